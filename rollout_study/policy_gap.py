"""Recapture against reuse in one run: the steady gap between two graph policies of one engine, phase by phase.

Both policies of an engine replay the same kernels, yet their steady states differ by up to about 3% in one run
(sweep-h200), either way, which is why the break-even reads a steady gap between them only beyond a margin
(effects.STEADY_MARGIN). `recapture` drops its graphs after every update and captures new ones into a new pool;
`reuse` keeps its graphs; each engine keeps its runner (static inputs, KV cache) through updates either way.
Phase by phase, the gap tells apart:
  - noise of the samples or drift: the gap after an update would not follow the gap before it, across runs;
  - the order of the engines in a round (the same in every run): the gap would take one sign;
  - an offset fixed for the run, per engine instance in its process: the gap after the last update follows the
    gap before the first, across runs, whatever its sign. More samples narrow an interval but not such an
    offset, so only a margin keeps it from reading as a policy's cost. A recapture need not redraw where its
    graphs sit (the caching allocator may hand the freed pool's blocks back), so this does not say which of
    the instance's buffers sets the offset.

    phase_gaps   per engine with both policies in a run: recapture's steady median over reuse's in each steady
                 phase, in run order, with its 95% bootstrap interval
    persistence  over many runs (a sweep's points, each its own process): per engine, the gap in the first
                 steady phase against the gap in the last (after the last recapture): how many runs, the mean and
                 spread of each, and their correlation (Pearson) with a 95% bootstrap interval over the runs
"""
from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass

from .analysis import STEADY_PHASES
from .result import Result
from .stats import LEVEL, Ratio, percentile, ratio_interval

RESAMPLES = 2000  # of the runs, for the correlation's interval


@dataclass(frozen=True)
class PhaseGap:
    engine: str
    cycle: int
    phase: str
    ratio: Ratio  # recapture's steady median over reuse's


def phase_gaps(result: Result) -> list[PhaseGap]:
    """Each engine with both `recapture` and `reuse` variants: the gap in every steady phase both measured."""
    variants = set(result.variants())
    engines = sorted({v.split("[")[0] for v in variants
                      if f"{v.split('[')[0]}[recapture]" in variants and f"{v.split('[')[0]}[reuse]" in variants})
    gaps = []
    for engine in engines:
        for cycle, phase in result.phase_groups():
            if phase not in STEADY_PHASES:
                continue
            recapture = result.samples(f"{engine}[recapture]", cycle, phase)
            reuse = result.samples(f"{engine}[reuse]", cycle, phase)
            if recapture and reuse:
                gaps.append(PhaseGap(engine, cycle, phase, ratio_interval(recapture, reuse)))
    return gaps


@dataclass(frozen=True)
class Persistence:
    engine: str
    runs: int
    first: tuple[float, ...]  # each run's gap in its first steady phase
    last: tuple[float, ...]  # and in its last, in the same run order
    correlation: float | None  # Pearson, first against last; None: under 3 runs or no spread
    interval: tuple[float, float] | None  # its 95% bootstrap interval over the runs (None: none)

    @property
    def text(self) -> str:
        if self.correlation is None:
            return f"{self.engine}: {self.runs} run(s), too few or no spread for a correlation"
        low, high = self.interval
        return (f"{self.engine}: over {self.runs} runs, recapture / reuse {_spread(self.first)} in the first steady "
                f"phase and {_spread(self.last)} in the last (after the last recapture); correlation "
                f"{self.correlation:.2f} [95% {low:.2f} to {high:.2f}]")


def _spread(values: tuple[float, ...]) -> str:
    return f"mean {statistics.fmean(values):.4f} (sd {statistics.pstdev(values):.4f})"


def pearson(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) < 3:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sx = math.fsum((x - mx) ** 2 for x in xs)
    sy = math.fsum((y - my) ** 2 for y in ys)
    if sx == 0 or sy == 0:
        return None
    return math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys)) / math.sqrt(sx * sy)


def _correlation_interval(xs: list[float], ys: list[float], seed: int = 0) -> tuple[float, float] | None:
    rng = random.Random(seed)
    values = []
    for _ in range(RESAMPLES):
        picks = [rng.randrange(len(xs)) for _ in xs]
        r = pearson([xs[i] for i in picks], [ys[i] for i in picks])
        if r is not None:  # a resample of one repeated run has no spread
            values.append(r)
    if not values:
        return None
    values.sort()
    tail = (1 - LEVEL) / 2
    return percentile(values, tail), percentile(values, 1 - tail)


def persistence(results: list[Result]) -> list[Persistence]:
    """Per engine, over the runs with at least two steady phases of both policies."""
    pairs: dict[str, list[tuple[float, float]]] = {}
    for result in results:
        by_engine: dict[str, list[PhaseGap]] = {}
        for gap in phase_gaps(result):
            by_engine.setdefault(gap.engine, []).append(gap)
        for engine, gaps in by_engine.items():
            if len(gaps) >= 2:
                pairs.setdefault(engine, []).append((gaps[0].ratio.point, gaps[-1].ratio.point))
    out = []
    for engine, rows in sorted(pairs.items()):
        first, last = [a for a, _ in rows], [b for _, b in rows]
        r = pearson(first, last)
        out.append(Persistence(engine, len(rows), tuple(first), tuple(last), r,
                               _correlation_interval(first, last) if r is not None else None))
    return out
