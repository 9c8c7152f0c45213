"""How fast a run's host ran (host_speed.py: us per tiny CPU tensor operation, at the run's start and end),
and each sweep point against the fastest figure any point of the sweep recorded.

The H200 host is not one speed: of the 42 figures of the sweep's 21 tiny points at 1280b96, 20 were
0.99-1.15 us and 17 were 1.86-2.36 us (5 between), and the start and end of 11 of the 21 processes fell
on opposite sides of 1.5. A median of such figures falls between the two speeds and describes no
point, so each point is held against the sweep's fastest figure instead: within SPREAD of it at both
start and end, its host ran at the sweep's fastest speed as far as the two measurements can tell (they
bracket the run; a change between them is not seen); otherwise its host-bound times (eager generate(),
hf-compile, hf-continuous, compilation) may be longer by about as much as its slowest figure says, and
so the graph engines' speed-ups over generate() larger.
"""
from __future__ import annotations

from ..result import Result

SPREAD = 0.10


def figures(result: Result | None) -> tuple[float | None, float | None]:
    """The point's (start, end) us per tiny operation; None where not recorded (a failed point, or one
    written before host speed was kept)."""
    speed = (result.metadata.get("host_speed") or {}) if result is not None else {}
    return tuple((speed.get(when) or {}).get("dispatch_us") for when in ("start", "end"))


def fastest(results) -> float | None:
    """The fastest figure of any of `results`: the host's best speed seen in the sweep."""
    seen = [value for result in results for value in figures(result) if value is not None]
    return min(seen) if seen else None


def slowdown(result: Result | None, best: float | None) -> float | None:
    """The point's slowest figure over `best` (1.0: at the sweep's fastest speed at start and end)."""
    seen = [value for value in figures(result) if value is not None]
    return max(seen) / best if seen and best else None


def slowed(result: Result | None, best: float | None) -> bool:
    ratio = slowdown(result, best)
    return ratio is not None and ratio > 1 + SPREAD
