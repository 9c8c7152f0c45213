"""The numbers of a sweep report: curves over batch size and new tokens, per model, with no formatting.

A model is its label (synthetic or pretrained), its name (the shape) and its dtype: curves never mix two.
A point's setting is what else its model's points vary (sweep_settings.py): a section is one model at one
setting (`by_section`), and a curve never joins two settings either.
Only valid points enter a curve; failed and invalid ones are returned apart (`split`), to be shown
as such. Variants are whatever engines each point ran; "steady" is the cycle-0 steady phase (before
any update), and every speed-up is over the `eager` variant (Hugging Face generate()) of its own point.

A sweep may split the engines into groups, one point each with the same parameters but its engines,
so that one engine's lost parity (a near-tie) invalidates its own point, not the others' figures.
Every group runs eager, the base of its own speed-ups; a variant's rows at one place (the parameters
less the engines) come from the first valid point there that ran it, so no curve draws one twice.

    speed-up            eager's steady median / the variant's, with its 95% bootstrap interval
    ms per token        steady median / (requests x new tokens): the wall time per generated token
    ms per decode step  steady median / (batches per call x new tokens): one step of one batch
                        (the prefill is spread over the steps)
    capture             the capture part of the variant's first call (cycle 0), and its captures
    memory              of that first call: peak allocated and allocated after it, each minus the
                        allocated at its start; reserved after it minus reserved after the call
                        before it in run order (None on the CPU, or for the run's first call)
    first after update  median first call after a real update, and the steady median after it
    break-even          rollouts per update U from (or up to) which the variant pays off (breakeven.py)
    growth              least squares ms = a + b x new tokens per variant and batch: slope b
                        (ms per new token), intercept a, R^2 (None where every ms is equal)
    crossover           where the speed-up falls under `CROSSOVER` (sweep_crossover.py)
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace

from .breakeven import BreakEven, break_even_rows, costs_after_update
from .engines import BASELINE, variant_rank
from .result import Result
from .stats import Ratio, Samples, ratio_interval
from .sweep_settings import model_of, per_point

CROSSOVER = 1.5  # speed-up under which a graph no longer clearly pays for its complexity


@dataclass(frozen=True)
class Point:
    slug: str
    result: Result
    shown_before: frozenset = frozenset()  # variants an earlier valid point at the same place shows
    place: object = None  # split's key of where it sits: every parameter but its engines (_place)
    setting: tuple = ()  # ((parameter, value), ...) its model's points vary besides the curves' (sweep_settings.py)
    setting_rank: int = 0  # where its setting comes among its model's, in the sweep file's order

    @property
    def model(self) -> tuple[str, str, str]:
        return model_of(self.result)

    @property
    def batch(self) -> int:
        return int(self.result.metadata["workload"]["batch_size"])

    @property
    def requests(self) -> int:
        return int(self.result.metadata["workload"]["requests"])

    @property
    def new_tokens(self) -> int:
        return int(self.result.metadata["workload"]["max_new_tokens"])

    @property
    def batches(self) -> int:
        return self.result.batches_per_call

    def steady(self, variant: str) -> Samples | None:
        return self.result.samples(variant, 0, "steady")

    def variants(self) -> list[str]:
        """The variants whose rows this point gives: those it ran that no earlier point at its place shows."""
        return [v for v in self.result.checked_variants() if v not in self.shown_before]


@dataclass(frozen=True)
class Rejected:
    slug: str
    status: str  # failed, invalid
    reason: str
    # its section's (sweep_settings.per_point), where its result or its twins' say: the figures name it there; a
    # failed point with no twin's is ("unresolved", ...), which no section is, so only the failures table lists it
    model: tuple | None = None
    setting: tuple = ()
    params: dict | None = None  # its sweep.json entry's


def _rejected(entry: dict, status: str, reason: str, where) -> Rejected:
    params = entry.get("params") if isinstance(entry.get("params"), dict) else None
    return Rejected(entry["slug"], status, reason, where.model, where.setting, params)


def split(loaded: list[tuple[dict, Result | None]]) -> tuple[list[Point], list[Rejected]]:
    """Valid points (curves) and the rest (the failures table)."""
    usable, rejected = [], []
    for (entry, result), where in zip(loaded, per_point(loaded)):
        if result is None:
            rejected.append(_rejected(entry, "failed", entry.get("error") or "no result", where))
        elif result.validity_problems():
            rejected.append(_rejected(entry, "invalid", "; ".join(result.validity_problems()), where))
        else:
            point = Point(entry["slug"], result, setting=where.setting, setting_rank=where.rank)
            usable.append(replace(point, place=_place(entry, point, where.with_engines)))
    shown: dict = {}  # place -> the variants the valid points before show there
    for i, point in enumerate(usable):
        ran, seen = set(point.result.checked_variants()), shown.setdefault(point.place, set())
        if before := frozenset(ran & seen):
            usable[i] = replace(point, shown_before=before)
        seen |= ran
    return usable, rejected


def _place(entry: dict, point: Point, with_engines: tuple = ()):
    """Where a point sits: its parameters less the engines and what moves with them (its engine group), and the
    name; else its place on the curves."""
    params = entry.get("params")
    if isinstance(params, dict):
        group = ("name", "engines") + tuple(with_engines)
        return json.dumps({k: v for k, v in params.items() if k not in group}, sort_keys=True)
    return point.model, point.batch, point.requests, point.new_tokens


def by_model(points: list[Point]) -> dict[tuple[str, str, str], list[Point]]:
    """Points per (label, model name, dtype), synthetic before pretrained, each in batch then new-token order
    (every setting of the model: the models side by side leave out a place a model has twice)."""
    return _grouped(points, lambda point: point.model)


def by_section(points: list[Point]) -> dict[tuple, list[Point]]:
    """Points per ((label, model name, dtype), setting): one report section each, the settings of a model in
    the sweep file's order."""
    return _grouped(points, lambda point: (point.model, point.setting_rank, point.setting))


def _grouped(points: list[Point], key_of) -> dict:
    groups: dict = {}
    for point in points:
        groups.setdefault(key_of(point), []).append(point)
    models = list(dict.fromkeys(point.model for point in points))

    def rank(key):  # synthetic first, then the models' and their settings' order in the sweep
        first = groups[key][0]
        return first.model[0] != "synthetic", models.index(first.model), first.setting_rank
    order = sorted(groups, key=rank)
    return {key: sorted(groups[key], key=lambda p: (p.batch, p.new_tokens)) for key in order}


def variants(points: list[Point]) -> list[str]:
    return sorted({v for p in points for v in p.variants()}, key=variant_rank)


def _ordered(rows: list) -> list:
    """Tables read per variant (registry order), then new tokens, then batch."""
    return sorted(rows, key=lambda r: (variant_rank(r.variant), r.new_tokens, r.batch))


# -- steady state -----------------------------------------------------------------------------
@dataclass(frozen=True)
class SpeedUp:
    variant: str
    new_tokens: int
    batch: int
    ratio: Ratio


def speedups(points: list[Point]) -> list[SpeedUp]:
    rows = []
    for p in points:
        base = p.steady(BASELINE)
        for variant in p.variants():
            steady = p.steady(variant)
            if variant != BASELINE and base and steady:
                rows.append(SpeedUp(variant, p.new_tokens, p.batch, ratio_interval(base, steady)))
    return _ordered(rows)


@dataclass(frozen=True)
class Latency:
    variant: str
    new_tokens: int
    batch: int
    requests: int
    steady_ms: float
    ms_per_token: float
    ms_per_step: float


def latencies(points: list[Point]) -> list[Latency]:
    rows = []
    for p in points:
        for variant in p.variants():
            steady = p.steady(variant)
            if steady:
                rows.append(Latency(variant, p.new_tokens, p.batch, p.requests, steady.median,
                                    steady.median / (p.requests * p.new_tokens),
                                    steady.median / (p.batches * p.new_tokens)))
    return _ordered(rows)


# -- first calls and memory -------------------------------------------------------------------
@dataclass(frozen=True)
class Capture:
    variant: str
    new_tokens: int
    batch: int
    capture_ms: float
    captures: int
    peak_delta_bytes: int | None
    kept_bytes: int | None
    reserved_delta_bytes: int | None
    opened_run: bool = False  # the run's first call: no call before it for a reserved growth


def _minus(a, b):
    return None if a is None or b is None else a - b


def captures(points: list[Point]) -> list[Capture]:
    """Every non-eager variant's first call: capture time, captures, memory deltas."""
    rows = []
    for p in points:
        previous, shown = None, set(p.variants())
        for call in p.result.calls:  # run order
            if (call.cycle, call.phase) == (0, "first") and call.engine != BASELINE and not call.diagnostic \
                    and call.variant in shown:
                memory, start = call.memory_bytes, call.memory_bytes.get("phase_start_allocated")
                rows.append(Capture(call.variant, p.new_tokens, p.batch, call.breakdown_ms["capture"], call.captures,
                                    _minus(memory.get("peak_allocated"), start), _minus(memory.get("allocated"), start),
                                    _minus(memory.get("reserved"), previous and previous.memory_bytes.get("reserved")),
                                    previous is None))
            previous = call
    return _ordered(rows)


@dataclass(frozen=True)
class AfterUpdate:
    variant: str
    new_tokens: int
    batch: int
    first_ms: float
    steady_ms: float


def after_update(points: list[Point]) -> list[AfterUpdate]:
    rows = []
    for p in points:
        shown = p.variants()
        rows += [AfterUpdate(variant, p.new_tokens, p.batch, first, steady)
                 for variant, (first, steady) in costs_after_update(p.result).items() if variant in shown]
    return _ordered(rows)


@dataclass(frozen=True)
class BreakEvenPoint:
    candidate: str
    baseline: str
    new_tokens: int
    batch: int
    break_even: BreakEven
    steady_ratio: float  # candidate's steady median after the update over the baseline's: the gap the verdict read


def break_evens(points: list[Point]) -> list[BreakEvenPoint]:
    rows = []
    for p in points:
        shown = p.variants()
        rows += [BreakEvenPoint(row.candidate, row.baseline, p.new_tokens, p.batch, row.break_even,
                                row.candidate_steady_ms / row.baseline_steady_ms)
                 for row in break_even_rows(p.result) if row.candidate in shown]
    return rows


# -- growth with new tokens -------------------------------------------------------------------
@dataclass(frozen=True)
class Fit:
    intercept: float
    slope: float
    r2: float | None  # None: every y equal, nothing to explain
    n: int


def fit_line(xs: list[float], ys: list[float]) -> Fit | None:
    """Ordinary least squares y = intercept + slope * x; None with fewer than two distinct x."""
    n = len(xs)
    if n < 2 or len(set(xs)) < 2:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    intercept = my - slope * mx
    total = sum((y - my) ** 2 for y in ys)
    residual = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys))
    return Fit(intercept, slope, None if total == 0 else 1 - residual / total, n)


@dataclass(frozen=True)
class Growth:
    variant: str
    batch: int
    new_tokens: tuple[int, ...]
    steady_ms: tuple[float, ...]
    fit: Fit | None


def growth(points: list[Point]) -> list[Growth]:
    """Steady median against new tokens, per variant and batch, with its fitted line."""
    series: dict[tuple[str, int], list[tuple[int, float]]] = {}
    for row in latencies(points):
        series.setdefault((row.variant, row.batch), []).append((row.new_tokens, row.steady_ms))
    rows = []
    for (variant, batch), pairs in sorted(series.items(), key=lambda item: (variant_rank(item[0][0]), item[0][1])):
        pairs.sort()
        xs, ys = [float(x) for x, _ in pairs], [y for _, y in pairs]
        rows.append(Growth(variant, batch, tuple(x for x, _ in pairs), tuple(ys), fit_line(xs, ys)))
    return rows
