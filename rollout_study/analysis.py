"""Numbers from result records, with no formatting: summaries, break-even, timeline, goals, headline.

Everything here is a pure function of a `Result` (record.py), so a report can be rebuilt anywhere
from committed JSON without a GPU. Medians, quartiles and the wide-spread flag come from `Samples`;
engine order comes from the engine registry (`variant_rank`), never from a list written here.
Ratios carry bootstrap intervals (stats.py); after-update figures use real updates only, never the
control cycles (effects.py), whose updates leave the weights unchanged.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from .breakeven import (BreakEven, BreakEvenRow, break_even_pairs, break_even_rollouts,  # noqa: F401
                        break_even_rows, costs_after_update, interval_excludes_one, rollouts_cost)
from .engines import BASELINE, variant_rank
from .effects import (VERDICT_REAL, Effect, Instrumented, all_profiles, before_text, control_cycles,  # noqa: F401
                      effects, instrumented_calls, real_cycles, samples_in, timing_checked,
                      timing_flagged, untouched_variants)
from .record import PARTS, Call, run_order
from .result import Result
from .stats import Ratio, Samples, ratio_interval, resampled_sides  # noqa: F401

REUSE = "reuse"  # the refresh policy that keeps its graphs across an update: the goals hold it to that
STEADY_PHASES = ("steady", "steady_after_update")
MEMORY_KINDS = ("allocated", "reserved", "peak_allocated")
# The issues' performance goals.
MIN_SPEEDUP = 12.0
MAX_KERNEL_RATIO = 1.3
MAX_REUSE_FIRST_RATIO = 1.10
MAX_REUSE_AFTER_DRIFT = 0.005  # steady after an update within 0.5% of steady before
MAX_TIMING_OVERLAP = 0.01  # the protocol flags a call whose parts exceed its total by more than this


def graph_variants(result: Result) -> list[str]:
    """Variants with a real refresh policy: those of every graph engine, whatever the engine is called
    (diagnostic policies, which exist to show a hazard, are left to the hazard report)."""
    return sorted({c.variant for c in result.calls if c.policy is not None and not c.diagnostic}, key=variant_rank)


# -- summary ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class SummaryRow:
    """One (variant, cycle, phase): its samples and the medians of everything recorded per call."""

    variant: str
    cycle: int
    phase: str
    samples: Samples
    parts_ms: dict  # median of each breakdown part over the samples
    captures: int  # summed over the phase's calls
    memory_bytes: dict  # largest value of each kind over the calls; None where never recorded
    tokens_per_s: float | None
    parity_ok: bool  # every call checked and matched generate()


def median_call(calls: list[Call]) -> Call:
    """The sample whose total is the (lower) median: a real call, so its breakdown sums to its total."""
    return sorted(calls, key=lambda call: call.total_ms)[(len(calls) - 1) // 2]


def largest_memory(calls: list[Call], kind: str) -> int | None:
    values = [c.memory_bytes.get(kind) for c in calls if c.memory_bytes.get(kind) is not None]
    return max(values) if values else None


def summary_rows(result: Result) -> list[SummaryRow]:
    """Rows in run order, variants in registry order within a phase."""
    rows = []
    for cycle, phase in result.phase_groups():
        for variant in result.variants():
            calls = result.calls_of(variant, cycle, phase)
            if not calls:
                continue
            rates = [c.tokens_per_s for c in calls]
            rows.append(SummaryRow(
                variant, cycle, phase, Samples([c.total_ms for c in calls]),
                {part: statistics.median(c.breakdown_ms[part] for c in calls) for part in PARTS},
                sum(c.captures for c in calls), {kind: largest_memory(calls, kind) for kind in MEMORY_KINDS},
                statistics.median(rates) if None not in rates else None, all(c.parity_ok for c in calls)))
    return rows


# -- cumulative timeline ----------------------------------------------------------------------
@dataclass(frozen=True)
class Event:
    step: int
    kind: str  # rollout or update
    cycle: int
    phase: str
    index: int
    ms: float
    cumulative_ms: float


def timeline(result: Result, variant: str) -> list[Event]:
    """One variant's calls and every training update in run order, with the cumulative wall time."""
    raw = [("rollout", c.cycle, c.phase, c.index, c.total_ms) for c in result.calls_of(variant)]
    # A failed (non-finite) update has no time; it still marks where the weights changed.
    raw += [("update", u.cycle, "update", 0, u.ms or 0.0) for u in result.updates]
    raw.sort(key=lambda e: (run_order(e[1], e[2]), e[3]))
    events, total = [], 0.0
    for step, (kind, cycle, phase, index, ms) in enumerate(raw, start=1):
        total += ms
        events.append(Event(step, kind, cycle, phase, index, ms, total))
    return events


# -- goals ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Goal:
    name: str
    measured: float | str | None
    threshold: str
    met: bool | None  # None: not measured (or a GPU-only goal on a CPU run)
    inputs: tuple = ()  # (what, value, unit) the measurement came from
    note: str = ""  # why it is not measured, or what stands beside the measurement
    gpu_only: bool = False
    measured_here: bool = True  # False: a GPU-only goal of a run without CUDA graphs
    interval: Ratio | None = None  # the measured ratio's bootstrap interval, where it is a ratio of samples
    interval_note: str = ""  # which samples the interval resampled

    @property
    def verdict(self) -> str:
        if not self.measured_here:
            return "GPU only, not measured on CPU"
        return {True: "yes", False: "no", None: "not measured"}[self.met]


def goals(result: Result) -> list[Goal]:
    """The issues' goals, checked against one result; a goal whose inputs are absent says so."""
    rows: list[Goal] = []
    gpu = result.cuda_graph

    def add(name, measured, threshold, met, inputs=(), note="", gpu_only=True, ratio=None, sides=""):
        here = gpu or not gpu_only
        rows.append(Goal(name, measured, threshold, met if here else None, inputs, note, gpu_only, here, ratio, sides))

    eager = result.samples(BASELINE, 0, "steady")
    for variant in graph_variants(result):
        graph = result.samples(variant, 0, "steady")
        if eager and graph:
            ratio = ratio_interval(eager, graph)
            add(f"{variant} steady speed-up over eager generate()", ratio.point, f">= {MIN_SPEEDUP}x",
                ratio.point >= MIN_SPEEDUP, (("eager", eager.median, "ms"), ("graph", graph.median, "ms")),
                ratio=ratio, sides=resampled_sides(eager, graph))
        profile = result.profile.get(variant)
        if profile and graph and profile.kernel_ms:
            kernels = Samples([profile.kernel_ms])
            ratio = ratio_interval(graph, kernels)
            add(f"{variant} steady over summed kernel time", ratio.point, f"<= {MAX_KERNEL_RATIO}x",
                ratio.point <= MAX_KERNEL_RATIO, (("steady", graph.median, "ms"), ("kernels", profile.kernel_ms, "ms"),
                                                  ("kernel count", profile.kernels, "")),
                ratio=ratio, sides=resampled_sides(graph, kernels))
        else:
            add(f"{variant} steady over summed kernel time", None, f"<= {MAX_KERNEL_RATIO}x", None,
                note="no profile in this run (CPU, or profiling off)")
    _bucket_goals(result, add)
    real = real_cycles(result)
    reuse = sorted({c.variant for c in result.calls if c.policy == REUSE}, key=variant_rank)
    # what each control update moved, beside the reuse goal's ratio: every variant's effects bootstrapped once
    control_moves = [e for e in effects(result) if e.control] if reuse else []
    for variant in reuse:
        for first in [c for c in result.calls_of(variant, phase="first_after_update") if c.cycle in real]:
            steady = result.samples(variant, first.cycle, "steady_after_update")
            ratio = ratio_interval(Samples([first.total_ms]), steady) if steady else None
            add(f"{variant} first call after update {first.cycle} vs steady", ratio and ratio.point,
                f"<= {MAX_REUSE_FIRST_RATIO:.2f}x", ratio is not None and ratio.point <= MAX_REUSE_FIRST_RATIO,
                (("first", first.total_ms, "ms"), ("steady", steady.median, "ms")) if steady else (),
                "" if steady else "no steady samples after this update", ratio=ratio,
                sides=resampled_sides(Samples([first.total_ms]), steady) if steady else "")
        after = [c for c in result.calls_of(variant, phase=("first_after_update", "steady_after_update"))
                 if c.cycle in real]
        captures = sum(c.captures for c in after)
        add(f"{variant} captures after an update", captures, "0", captures == 0 if after else None)
        _after_update_goal(result, variant, real, add, [e for e in control_moves if e.variant == variant])
    rows.append(_timing_goal(result))
    checked = result.checked_calls()
    matched = sum(c.parity_ok for c in checked)
    add("parity with generate() on every measured call", f"{matched}/{len(checked)}", "all",
        bool(checked) and matched == len(checked), gpu_only=False)
    return rows


def _bucket_goals(result: Result, add) -> None:
    """With length buckets, each graph variant's summed kernel time at most generate()'s: without them
    a static cache attends over every slot at every step, which costs more kernel time than generate()'s
    growing cache once the generation is long (issue 11). One profiled call each: no interval."""
    bucket = (result.metadata.get("params") or {}).get("length_bucket") or 0
    eager = result.profile.get(BASELINE)
    for variant in graph_variants(result) if bucket else []:
        profile = result.profile.get(variant)
        name = f"{variant} summed kernel time at most generate()'s (decode graphs per {bucket} positions)"
        if not (profile and eager and profile.kernel_ms and eager.kernel_ms):
            add(name, None, "<= 1.0x", None, note="no profile of both in this run (CPU, or profiling off)")
            continue
        ratio = profile.kernel_ms / eager.kernel_ms
        add(name, ratio, "<= 1.0x", ratio <= 1.0,
            (("kernels", profile.kernel_ms, "ms"), ("generate() kernels", eager.kernel_ms, "ms")))


def _after_update_goal(result: Result, variant: str, real: list[int], add, control_moves: list[Effect]) -> None:
    """Reuse keeps its graphs, so its steady state after each real update stays within 0.5% of the one
    before; measured as each real cycle's ratio of medians, the worst cycle reported (added through `add`), with
    what each control update moved (`control_moves`: this variant's control effects) beside it."""
    name = f"{variant} steady after an update within {MAX_REUSE_AFTER_DRIFT:.1%} of steady before"
    threshold = f"{1 - MAX_REUSE_AFTER_DRIFT:.3f}..{1 + MAX_REUSE_AFTER_DRIFT:.3f}x"
    before = result.samples(variant, 0, "steady")
    pairs = [(cycle, result.samples(variant, cycle, "steady_after_update")) for cycle in real]
    pairs = [(cycle, after) for cycle, after in pairs if after is not None]
    if before is None or not pairs:
        add(name, None, threshold, None, note="no steady samples before and after a real update")
        return
    ratios = {cycle: ratio_interval(after, before) for cycle, after in pairs}
    worst = max(ratios, key=lambda cycle: abs(ratios[cycle].point - 1))
    after = dict(pairs)[worst]
    # The goal reads the ratio alone, as the issue set it; what a control cycle moved stands beside it, so a reader
    # sees when a miss is no more than the drift (the effects table gives the verdict).
    drift = "; ".join(f"control update {e.cycle} moved it {e.ratio.point:.3f}x" for e in control_moves)
    add(name, ratios[worst].point, threshold,
        all(abs(r.point - 1) <= MAX_REUSE_AFTER_DRIFT + 1e-12 for r in ratios.values()),
        (("worst: update", worst, ""), ("before", before.median, "ms"), ("after", after.median, "ms")), note=drift,
        ratio=ratios[worst], sides=resampled_sides(after, before))


def _timing_goal(result: Result) -> Goal:
    name = f"timing: parts within {MAX_TIMING_OVERLAP:.0%} of the measured total on every call"
    checked = timing_checked(result)
    if not checked:
        return Goal(name, None, "0 flagged", None, note="no timing check recorded in this result")
    flagged = timing_flagged(checked)
    note = "" if not flagged else (f"first: {flagged[0].variant} cycle {flagged[0].cycle} {flagged[0].phase} "
                                   f"#{flagged[0].index}")
    return Goal(name, f"{len(flagged)}/{len(checked)} flagged", "0 flagged", not flagged, note=note)


# -- headline ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Span:
    low: float
    high: float
    # a hull of intervals that are each their samples' whole range (stats.Ratio.whole_range): said so where shown
    whole_range: bool = field(default=False, compare=False)

    @classmethod
    def of(cls, values: list[float]) -> "Span | None":
        return cls(min(values), max(values)) if values else None


def generate_token_sets(result: Result) -> list[tuple[str, int, int]]:
    """generate() against itself: for each set of weights (before the updates, after each), how many
    different token sets its measured calls returned, and over how many calls. More than one means
    generate() is not reproducible run to run here, so a parity mismatch at a near-tie may be that
    noise, not an engine's error (the run stays invalid either way)."""
    digests: dict[int | None, list[str]] = {}  # weights (None: before the updates, else the cycle) -> per call
    for call in result.calls:
        digest = call.extra.get("tokens_sha256")
        if call.engine != BASELINE or digest is None:
            continue
        weights = call.cycle if call.phase in ("first_after_update", "steady_after_update") else None
        digests.setdefault(weights, []).append(digest)
    return [("before the updates" if weights is None else f"after update {weights}", len(set(found)), len(found))
            for weights, found in sorted(digests.items(), key=lambda item: -1 if item[0] is None else item[0])]


def speedup_ratios(result: Result) -> list[tuple[str, int, str, Ratio]]:
    """(graph variant, cycle, phase, generate()'s steady median over the variant's, with its interval) per steady
    phase."""
    steady = [(cycle, phase) for cycle, phase in result.phase_groups() if phase in STEADY_PHASES]
    pairs = [(v, c, p, result.samples(BASELINE, c, p), result.samples(v, c, p))
             for v in graph_variants(result) for c, p in steady]
    return [(v, c, p, ratio_interval(eager, graph)) for v, c, p, eager, graph in pairs if eager and graph]


def interval_hull(ratios: list[Ratio]) -> Span | None:
    """From the lowest interval bound to the highest; None when any ratio has no interval."""
    if not ratios or not all(r.has_interval for r in ratios):
        return None
    return Span(min(r.low for r in ratios), max(r.high for r in ratios), all(r.whole_range for r in ratios))


@dataclass(frozen=True)
class FirstAfterUpdate:
    variant: str
    ms: Span  # over real cycles
    over_steady: Span  # each real cycle's first call over that cycle's steady median
    # Hull of those ratios' intervals: the first call is one sample, so only the steady samples are resampled.
    intervals: Span | None = None


@dataclass(frozen=True)
class Headline:
    """The answer a reader wants first, before any table."""

    speedups: dict[str, Span]  # graph variant -> generate() steady median over its own, over steady phases
    first_after_update: list[FirstAfterUpdate]
    first_update_ms: float | None
    later_updates_ms: Span | None
    break_even: list[BreakEvenRow]
    parity_matched: int
    calls: int
    problems: list[str] = field(default_factory=list)  # empty: valid
    speedup_intervals: dict[str, Span | None] = field(default_factory=dict)  # hull of the per-phase intervals
    effects: list[Effect] = field(default_factory=list)
    controls: int = 0  # control cycles in the run

    @property
    def valid(self) -> bool:
        return not self.problems

    @property
    def beyond_drift(self) -> list[Effect]:
        """Real updates whose after/before interval clears every control's and lies beyond the margin of each."""
        return [e for e in self.effects if e.verdict == VERDICT_REAL]


def headline(result: Result) -> Headline:
    """Speed-up per graph variant, the first call after a real update, the update, break-even, controls, validity."""
    # The speed-up as a range: generate() drifts between phases, so one phase's ratio would overstate certainty.
    speedups, speedup_intervals = {}, {}
    for variant in graph_variants(result):
        ratios = [ratio for v, _, _, ratio in speedup_ratios(result) if v == variant]
        if ratios:
            speedups[variant] = Span.of([r.point for r in ratios])
            speedup_intervals[variant] = interval_hull(ratios)
    firsts, real = [], real_cycles(result)
    for variant in graph_variants(result):
        ms, ratios = [], []
        for first in [c for c in result.calls_of(variant, phase="first_after_update") if c.cycle in real]:
            ms.append(first.total_ms)
            steady_after = result.samples(variant, first.cycle, "steady_after_update")
            if steady_after:
                ratios.append(ratio_interval(Samples([first.total_ms]), steady_after))
        if ms:
            firsts.append(FirstAfterUpdate(variant, Span.of(ms), Span.of([r.point for r in ratios]),
                                           interval_hull(ratios)))
    update_ms = [u.ms for u in sorted(result.updates, key=lambda u: u.cycle) if u.cycle in real]
    return Headline(speedups, firsts, update_ms[0] if update_ms else None,
                    Span.of([ms for ms in update_ms[1:] if ms is not None]), break_even_rows(result),
                    sum(c.parity_ok for c in result.checked_calls()), len(result.checked_calls()),
                    result.validity_problems(),
                    speedup_intervals, effects(result), len(control_cycles(result)))
