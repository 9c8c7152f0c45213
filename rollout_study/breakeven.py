"""Break-even: with U rollouts per training update, when does a candidate cost no more than its baseline?

cost(U) = first call after the update + (U - 1) x steady state, per variant, from real updates only
(control cycles leave the weights unchanged). The update itself costs the same for both and cancels.
A candidate with a dearer first call but a cheaper steady state pays off from some U on; one with a
cheaper first call but a dearer steady state pays off only up to some U: both ends are reported.
Two steady states count as different only when the 95% bootstrap interval of their ratio excludes 1
(as the speed-ups are stated), and for two policies of one engine, which replay the same kernels, only
beyond effects.STEADY_MARGIN as well: a gap inside the replays' spread, or one the measurement makes between two
replays of the very same kernels, would otherwise end a policy's advantage at some U that the noise
chose. Where they tie, the first calls decide, by the interval alone; where those tie too, there is no
break-even to state.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from . import effects
from .effects import real_cycles, samples_in, within_margin
from .engines import BASELINE, variant_rank
from .result import Result
from .stats import ratio_interval

WITHIN_INTERVAL = "their 95% interval"
WITHIN_RANGE = "their 95% interval (their calls' whole range)"  # stats.WHOLE_RANGE


def margin_reason() -> str:
    """The tie's reason under the margin, read when it is used (so a changed effects.STEADY_MARGIN says so)."""
    return f"{effects.STEADY_MARGIN:.0%} (the margin)"


def rollouts_cost(first_ms: float, steady_ms: float, rollouts: int) -> float:
    """Time of `rollouts` calls after one update: the first pays the refresh, the rest are steady."""
    return first_ms + (rollouts - 1) * steady_ms


@dataclass(frozen=True)
class BreakEven:
    """For which rollouts per update U the candidate costs no more than its baseline.

    cost(U) = first + (U - 1) * steady for each; the update costs both the same and cancels. The
    difference is linear in U, so the U where the candidate pays off form one range:
    first_u to last_u (last_u None: every larger U too). first_u None: it never pays off.
    steady_differs False: the steady states are within `steady_within` of each other (their interval, or
    the margin; the interval where none is given), so the first calls alone decide; first_differs False
    too: the first calls are within their interval, so there is no break-even to state. steady_within is
    None where the steady states differ: there is no tie to explain.
    """

    first_u: int | None
    last_u: int | None
    steady_differs: bool = True
    first_differs: bool = True
    steady_within: str | None = None
    # Set where the steady states before any update differ and those after it, which the verdict reads, do not or
    # differ the other way (the 1B shape at batch 16 / 512 tokens in sweep-h200): _disagrees_before.
    disagrees_before: str | None = None
    first_within: str = WITHIN_INTERVAL  # what the first calls are within where they tie too (the 'no difference')

    def __post_init__(self):
        if self.steady_differs and self.steady_within is not None:
            raise ValueError(f"steady_within names why steady states tie; these differ ({self.steady_within!r})")
        if self.steady_differs and not self.first_differs:  # the first calls are tested only where steady states tie
            raise ValueError("first_differs=False means a tie the first calls break; these steady states differ")
        if not self.steady_differs and self.steady_within is None:
            object.__setattr__(self, "steady_within", WITHIN_INTERVAL)

    @property
    def verdict(self) -> str:
        if self.disagrees_before:
            return f"{self._verdict()}; but {self.disagrees_before}"
        return self._verdict()

    def _verdict(self) -> str:
        if not (self.steady_differs or self.first_differs):
            return (f"no difference: its first calls are within {self.first_within} of the baseline's and its "
                    f"steady states within {self.steady_within} of each other")
        if not self.steady_differs:
            same = f"the steady states are within {self.steady_within} of each other"
            return (f"pays off from the first rollout: its first call is not dearer and {same}"
                    if self.first_u == 1 else f"never: its first call is dearer and {same}")
        if self.first_u is None:
            return "never: its first call and its steady state are not cheaper"
        if self.last_u is not None:
            return f"only up to U={self.last_u} rollouts per update: its steady state is slower"
        if self.first_u == 1:
            return "pays off from the first rollout"
        return f"pays off from {self.first_u} rollouts per update"


def break_even_rollouts(base_first_ms: float, base_steady_ms: float, first_ms: float, steady_ms: float,
                        steady_differs: bool = True, first_differs: bool = True,
                        steady_within: str | None = None) -> BreakEven:
    if not (steady_differs or first_differs):
        return BreakEven(None, None, False, False, steady_within)
    if not steady_differs:
        first_u = 1 if first_ms <= base_first_ms else None
        return BreakEven(first_u, None, False, True, steady_within)

    def pays(u: int) -> bool:
        return rollouts_cost(first_ms, steady_ms, u) <= rollouts_cost(base_first_ms, base_steady_ms, u)

    extra_first, saving = first_ms - base_first_ms, base_steady_ms - steady_ms
    if pays(1):
        if saving >= 0:
            return BreakEven(1, None)
        # Cheaper first call, slower steady state: it pays off until the steady loss eats the head start.
        last = 1 + math.floor(-extra_first / -saving)
        # Correct the closed form against the cost itself, so float rounding cannot move it by one.
        while not pays(last):
            last -= 1
        while pays(last + 1):
            last += 1
        return BreakEven(1, last)
    if saving <= 0:
        return BreakEven(None, None)
    first = 1 + math.ceil(extra_first / saving)
    while first > 1 and pays(first - 1):
        first -= 1
    while not pays(first):
        first += 1
    return BreakEven(first, None)


@dataclass(frozen=True)
class BreakEvenRow:
    candidate: str
    baseline: str
    candidate_first_ms: float
    candidate_steady_ms: float
    baseline_first_ms: float
    baseline_steady_ms: float
    break_even: BreakEven


def costs_after_update(result: Result) -> dict[str, tuple[float, float]]:
    """Per variant: (median first call after a real update over cycles, median steady sample after real updates).

    Control cycles (no optimizer step) are left out: they show what an update that changes nothing costs.
    """
    return {variant: (firsts.median, steady.median)
            for variant, (firsts, steady) in _samples_after_update(result).items()}


def _samples_after_update(result: Result) -> dict:
    samples, cycles = {}, real_cycles(result)
    diagnostic = {c.variant for c in result.calls if c.diagnostic}  # shown by the hazard report only
    for variant in [v for v in result.variants() if v not in diagnostic]:
        firsts = samples_in(result, variant, "first_after_update", cycles)
        steady = samples_in(result, variant, "steady_after_update", cycles)
        if firsts and steady:
            samples[variant] = (firsts, steady)
    return samples


def same_engine(candidate: str, baseline: str) -> bool:
    """Two policies of one engine (graph[reuse], graph[recapture]): their steady states replay the same kernels."""
    return "[" in candidate and candidate.split("[")[0] == baseline.split("[")[0]


def break_even_pairs(variants: list[str]) -> list[tuple[str, str]]:
    """(candidate, baseline): every variant against eager, then the policies of one engine against each other.

    Within an engine the policy later in the registry is the candidate (reuse against recapture).
    """
    ordered = sorted(variants, key=variant_rank)
    pairs = [(v, BASELINE) for v in ordered if v != BASELINE and BASELINE in ordered]
    for i, later in enumerate(ordered):
        for earlier in ordered[:i]:
            if same_engine(later, earlier):
                pairs.append((later, earlier))
    return pairs


def interval_excludes_one(samples, base_samples) -> bool:
    """True unless the ratio's 95% interval holds 1; with one sample on each side (no interval) the medians decide.

    The interval alone: between two policies of one engine the steady states must also pass the margin
    (steady_tie), so a BreakEven's steady_differs can be False where this is True."""
    return not ratio_interval(samples, base_samples).contains(1.0)


def steady_tie(samples, base_samples, with_margin: bool) -> str | None:
    """Why two steady states count as one (their interval, or the margin where asked), or None where they differ."""
    ratio = ratio_interval(samples, base_samples)  # interval_excludes_one's, with its point
    if ratio.contains(1.0):
        return WITHIN_RANGE if ratio.whole_range else WITHIN_INTERVAL
    return margin_reason() if with_margin and within_margin(ratio.point) else None


def break_even_rows(result: Result) -> list[BreakEvenRow]:
    samples = _samples_after_update(result)
    rows = []
    for candidate, baseline in break_even_pairs(list(samples)):
        (firsts, steady), (base_firsts, base_steady) = samples[candidate], samples[baseline]
        first, base_first = firsts.median, base_firsts.median
        tie = steady_tie(steady, base_steady, with_margin=same_engine(candidate, baseline))
        # The first calls' interval matters only where the steady states tie: no bootstrap for it otherwise.
        first_differs = tie is None or interval_excludes_one(firsts, base_firsts)
        verdict = break_even_rollouts(base_first, base_steady.median, first, steady.median, tie is None,
                                      first_differs, tie)
        # said only in the 'no difference' it reads; the ratio is interval_excludes_one's (ratio_interval caches it)
        if not first_differs and ratio_interval(firsts, base_firsts).whole_range:
            verdict = dataclasses.replace(verdict, first_within=WITHIN_RANGE)
        after = 0 if tie else (1 if steady.median > base_steady.median else -1)
        if disagrees := _disagrees_before(result, candidate, baseline, after):
            verdict = dataclasses.replace(verdict, disagrees_before=disagrees)
        rows.append(BreakEvenRow(candidate, baseline, first, steady.median, base_first, base_steady.median, verdict))
    return rows


def _disagrees_before(result: Result, candidate: str, baseline: str, after: int) -> str | None:
    """Where the steady states before any update differ (as steady_tie counts a difference) and those after the
    updates, which the verdict reads, do not, or differ the other way: said beside the verdict, for the verdict
    then rests on which phases were measured (drift between them, or an update that moved one)."""
    mine, theirs = (result.samples(variant, *effects.BEFORE) for variant in (candidate, baseline))
    if mine is None or theirs is None:
        return None
    before = ratio_interval(mine, theirs)
    # side 0: no interval (one sample each), or one that holds 1
    if before.side() in (0, after) or steady_tie(mine, theirs, with_margin=same_engine(candidate, baseline)):
        return None
    return (f"before any update its steady state was the {'slower' if before.side() > 0 else 'faster'} "
            f"({before.point:.3f}x the baseline's, {before.bounds_name} {before.low:.3f} to {before.high:.3f}): "
            "the verdict reads the steady phases after the updates, which drift or an update moved")
