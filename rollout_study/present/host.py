"""How fast a run's host ran (host_speed.py: us per tiny CPU tensor operation, at the run's start and end),
and how far the host-bound baseline's own calls spread within each sweep point.

On the H200 the host is not one speed, and it does not keep one speed for a run. The sweep's 21 tiny
points at 1280b96 recorded near 1.0 or near 2.0-2.4 us at their starts and ends, and
tools/probe_host.py (reports/probes-h200) found why it cannot be told per point: over 90 s, sampled every
0.14 s on each of the 16 CPUs in turn, 37% of the samples were slow, on every CPU (each one's fastest
near 1.0 us, its slowest 2.16 us or more), pinned (36%) as unpinned (38%), and the speed switched 256
times in 648 samples. Work on other cores may slow it too: right after a matmul on four threads, all ten
samples were 1.99-2.15 us (one unpinned run of ten: a hint, not a control). So a point's start and end say
how fast the host was at two instants, not which of its calls ran slow, and holding points against the
sweep's fastest figure (this module's former rule) marked points whose generate() was among the fastest
as slow. What does show what the host did to a point's speed-ups is the spread of the calls they divide
by: eager generate()'s cycle-0 steady calls (the slowest over the fastest), host-bound, against the graph
engines' replays, which do not follow the host.
"""
from __future__ import annotations

from ..engines import BASELINE
from ..result import Result


def figures(result: Result | None) -> tuple[float | None, float | None]:
    """The point's (start, end) us per tiny operation; None where not recorded (a failed point, or one
    written before host speed was kept)."""
    speed = (result.metadata.get("host_speed") or {}) if result is not None else {}
    return tuple((speed.get(when) or {}).get("dispatch_us") for when in ("start", "end"))


def baseline_spread(result: Result | None) -> tuple[int, float | None]:
    """(calls, slowest over fastest) of eager generate()'s cycle-0 steady calls, the very calls every sweep
    speed-up divides by (sweep_curves.Point.steady); None under two calls."""
    samples = result.samples(BASELINE, 0, "steady") if result is not None else None
    if samples is None:
        return 0, None
    return samples.n, (samples.max / samples.min if samples.n > 1 and samples.min > 0 else None)


def baseline_between_points(points) -> list[tuple[object, float]]:
    """Per place (sweep_curves.split's: every parameter but the engines) that two or more valid points ran (a
    sweep's engine groups each run eager): one of its points and the slowest over the fastest of their eager
    generate() cycle-0 steady medians. Each speed-up divides by its own point's, so two variants from different
    groups differ by this in what they divide by, and the host's pace sets it."""
    places: dict[object, list] = {}
    for p in points:
        samples = p.steady(BASELINE)
        if samples is not None and samples.median > 0:
            places.setdefault(p.place, []).append((p, samples.median))
    return [(pairs[0][0], max(m for _, m in pairs) / min(m for _, m in pairs))
            for pairs in places.values() if len(pairs) > 1]
