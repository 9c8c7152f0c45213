"""Recapture against reuse in one run: the steady gap between two graph policies of one engine, phase by phase.

Both policies of an engine replay the same kernels, yet their steady states differ by a few percent in one run,
either way, which is why the break-even reads a steady gap between them only beyond a margin
(effects.STEADY_MARGIN). `recapture` drops its graphs after every update and captures new ones into a new pool;
`reuse` keeps its graphs (unless an address or the layout moved); each engine keeps its runner (static inputs,
KV cache) through updates either way. Phase by phase, the gap tells apart:
  - noise of the samples or drift between phases: the gap after the updates would not follow the gap before
    them, across runs;
  - a gap fixed within a run, which the recaptures do not redraw: it would follow, whatever its sign. More
    samples narrow an interval but not such a gap, so only a margin keeps it from reading as a policy's cost.
It does not tell what fixes it: the two instances' buffers, the order they were built in, or their turn in each
round (both follow the order `policy` lists them; `both` is recapture first), any of which may depend on the
workload and so fall either way across runs. policy_order.py reads a sweep that ran both orders (where one did, the
gap followed the turn, not the policy nor the build order, on H200 machines; on two H100 machines it was within
0.8% before any update, mostly inside the intervals). A recapture need not redraw where its graphs sit
either: the caching allocator may hand the freed pool's blocks back.

    phase_gaps   per engine with both policies in a run: recapture's steady median over reuse's in each steady
                 phase, in run order, with its 95% bootstrap interval
    persistence  over many runs (a sweep's points, each its own process): per engine, the gap in cycle 0's steady
                 phase (before any update) against the gap in the last steady phase after an update (after the
                 last recapture), over the runs that measured both: their correlation, Pearson's with a 95%
                 bootstrap interval over the runs (from MIN_RUNS_FOR_INTERVAL runs) and Spearman's (the ranks',
                 which one outlying run moves less)
"""
from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass

from .analysis import STEADY_PHASES
from .result import Result
from .stats import LEVEL, RESAMPLES, Ratio, percentile, ratio_interval

BEFORE = (0, "steady")  # cycle 0's steady phase: before any update, the two policies one engine captured alike
MIN_RUNS_FOR_INTERVAL = 10  # under it the resampled correlations are mostly +-1 or undefined: no interval


@dataclass(frozen=True)
class PhaseGap:
    engine: str
    cycle: int
    phase: str
    ratio: Ratio  # recapture's steady median over reuse's


def phase_gaps(result: Result) -> list[PhaseGap]:
    """Each engine with both `recapture` and `reuse` calls: the gap in every steady phase both measured."""
    engines = sorted({v.partition("[")[0] for v in result.variants() if v.endswith("[recapture]")})
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
    runs: int  # runs with both phases
    before: tuple[float, ...]  # each run's gap in cycle 0's steady phase
    after: tuple[float, ...]  # and in its last steady phase after an update, in the same run order
    pearson: float | None  # None: under 3 runs, or no spread
    interval: tuple[float, float] | None  # Pearson's 95% bootstrap interval (None: under MIN_RUNS_FOR_INTERVAL)
    spearman: float | None


def pearson(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) != len(ys):
        raise ValueError(f"pearson needs pairs: {len(xs)} x against {len(ys)} y")
    if len(xs) < 3:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sx = math.fsum((x - mx) ** 2 for x in xs)
    sy = math.fsum((y - my) ** 2 for y in ys)
    if sx == 0 or sy == 0:
        return None
    r = math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys)) / math.sqrt(sx * sy)
    return max(-1.0, min(1.0, r))  # rounding can step past the bounds


def ranks(values: list[float]) -> list[float]:
    """1-based ranks, ties sharing their mean rank."""
    order = sorted(range(len(values)), key=values.__getitem__)
    out = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for i in order[start:end + 1]:
            out[i] = (start + end) / 2 + 1
        start = end + 1
    return out


def spearman(xs: list[float], ys: list[float]) -> float | None:
    return pearson(ranks(xs), ranks(ys))


def _pearson_interval(xs: list[float], ys: list[float], seed: int = 0) -> tuple[float, float] | None:
    if len(xs) < MIN_RUNS_FOR_INTERVAL:
        return None
    rng = random.Random(seed)
    values = []
    for _ in range(RESAMPLES):
        picks = [rng.randrange(len(xs)) for _ in xs]
        r = pearson([xs[i] for i in picks], [ys[i] for i in picks])
        if r is not None:  # a resample without spread (from 10 runs up, rare) has no correlation
            values.append(r)
    if not values:
        return None
    values.sort()
    tail = (1 - LEVEL) / 2
    return percentile(values, tail), percentile(values, 1 - tail)


def first_and_last_phases(result: Result) -> dict[str, tuple[PhaseGap, PhaseGap | None]]:
    """Per engine with a gap before any update: that phase's gap, and the last steady phase after an update where
    both policies measured (None where the run has none)."""
    by_engine: dict[str, list[PhaseGap]] = {}
    for gap in phase_gaps(result):
        by_engine.setdefault(gap.engine, []).append(gap)
    out: dict[str, tuple[PhaseGap, PhaseGap | None]] = {}
    for engine, gaps in by_engine.items():
        before = next((g for g in gaps if (g.cycle, g.phase) == BEFORE), None)
        after = [g for g in gaps if g.phase == "steady_after_update"]
        if before:
            out[engine] = (before, after[-1] if after else None)
    return out


def first_and_last(result: Result) -> dict[str, tuple[Ratio, Ratio | None]]:
    """first_and_last_phases' gaps alone."""
    return {engine: (before.ratio, after.ratio if after else None)
            for engine, (before, after) in first_and_last_phases(result).items()}


def before_and_after(result: Result) -> dict[str, tuple[float, float]]:
    """Per engine: the gap before any update and after the last, where the run measured both."""
    return {engine: (before.point, after.point) for engine, (before, after) in first_and_last(result).items()
            if after is not None}


def persistence(results: list[Result]) -> list[Persistence]:
    pairs: dict[str, list[tuple[float, float]]] = {}
    for result in results:
        for engine, pair in before_and_after(result).items():
            pairs.setdefault(engine, []).append(pair)
    out = []
    for engine, rows in sorted(pairs.items()):
        before, after = [a for a, _ in rows], [b for _, b in rows]
        r = pearson(before, after)
        out.append(Persistence(engine, len(rows), tuple(before), tuple(after), r,
                               _pearson_interval(before, after) if r is not None else None, spearman(before, after)))
    return out
