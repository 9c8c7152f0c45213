"""Which a steady gap between graph[recapture] and graph[reuse] follows: the policy, or the two instances' order.

policy_gap.py finds recapture's steady median over reuse's fixed within a run, though both replay the same kernels.
An engine's policies are built in the order `policy` lists them, and under `turn_order: fixed` that is also the
order they call in, every round; `both` is recapture first. A sweep that runs each place in both orders
(`policy: [recapture, reuse]` and `[reuse, recapture]`, params/probe-policy-order.yaml) tells the two apart, per
engine, turn order and place (every parameter but the policies' order and the seed):

    follows the order    every point with recapture first has its gap's 95% interval on one side of 1, and every
                         point with reuse first on the other: the instance built first (and, under fixed turns,
                         called first) is the faster or the slower one, whichever policy it holds
    follows the policy   every point's interval on the same side of 1, in both orders
    no gap               every point's interval includes 1
    mixed                anything else (a point whose interval includes 1 beside points clear of it, say)

Each sign test reads the intervals, not the size: an order effect of 2% beside a policy effect of 1% still follows
the order. The sizes are apart: `first_over_second`, the instance built first's steady median over the second's
(under 1: the first is faster), and `recapture_over_reuse`, each the geometric mean over one order's points, then
over the two orders, so an order with more points weighs no more. Read for the steady phase before any update
(both captured alike) and for the last steady phase after an update (after recapture's last recapture).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

from .params import LATER_PARAMETERS, named_policies
from .policy_gap import PhaseGap, first_and_last_phases
from .result import Result
from .stats import Ratio

POLICY_PAIR = ("recapture", "reuse")
NOT_A_PLACE = ("name", "seed")  # what the points of one place may differ in, besides the order of `policy`
ORDER, POLICY, NO_GAP, MIXED = "follows the order", "follows the policy", "no gap", "mixed"


@dataclass(frozen=True)
class OrderedGap:
    """One point's gap, recapture's steady median over reuse's, with the policy built first."""
    engine: str
    first: str  # recapture or reuse
    place: str  # the point's parameters less NOT_A_PLACE (LATER_PARAMETERS filled in), as sorted JSON
    before: Ratio
    after: Ratio | None  # the last steady phase after an update; None where the run has none
    # which of the two policies called first in each of those phases (in its round 0; another engine, eager say,
    # may call before both), by the calls' recorded order: under turn_order rotate-run it moves between the phases
    leads: tuple[str | None, str | None] = (None, None)

    def leader(self, phase: str) -> str | None:
        """'built first' or 'built second': the instance that took the phase's first turn (None: unknown)."""
        policy = self.leads[0 if phase == "before" else 1]
        return None if policy is None else "built first" if policy == self.first else "built second"

    def first_over_second(self, phase: str) -> float | None:
        gap = self.before if phase == "before" else self.after
        if gap is None:
            return None
        return gap.point if self.first == "recapture" else 1 / gap.point


def built_first(result: Result, engine: str) -> str | None:
    """Which of recapture and reuse this run built first for the engine (the metadata lists engines as built)."""
    built = [e.get("policy") for e in result.metadata.get("engines") or [] if e.get("engine") == engine]
    built = [p for p in built if p in POLICY_PAIR]
    return built[0] if set(built) == set(POLICY_PAIR) else None


def place_of(result: Result) -> str:
    """The point's parameters less NOT_A_PLACE, `policy` as the set it names (its order is what a place varies)."""
    params = {**LATER_PARAMETERS, **(result.metadata.get("params") or {})}
    policy = params.get("policy")
    params["policy"] = sorted(named_policies(policy)) if isinstance(policy, (str, list, tuple)) else policy
    return json.dumps({k: v for k, v in params.items() if k not in NOT_A_PLACE}, sort_keys=True)


def _first_turn(result: Result, engine: str, gap: PhaseGap | None) -> str | None:
    """The policy whose call came first, among the engine's recapture and reuse calls, in the phase of `gap`."""
    if gap is None:
        return None
    variants = {f"{engine}[{policy}]": policy for policy in POLICY_PAIR}
    return next((variants[c.variant] for c in result.calls
                 if c.variant in variants and (c.cycle, c.phase) == (gap.cycle, gap.phase)), None)


def ordered_gaps(result: Result) -> list[OrderedGap]:
    gaps = []
    for engine, (before, after) in sorted(first_and_last_phases(result).items()):
        first = built_first(result, engine)
        if first is not None:
            leads = (_first_turn(result, engine, before), _first_turn(result, engine, after))
            gaps.append(OrderedGap(engine, first, place_of(result), before.ratio, after.ratio if after else None,
                                   leads))
    return gaps


def common(values) -> str:
    """The one value these say (None left out), 'varies' where they differ, '-' where none says."""
    said = set(values) - {None}
    return said.pop() if len(said) == 1 else "varies" if said else "-"


def verdict(recapture_first: list[Ratio], reuse_first: list[Ratio]) -> str | None:
    """The module's rule; None where one order has no point (nothing to tell apart)."""
    if not recapture_first or not reuse_first:
        return None
    a, b = {r.side() for r in recapture_first}, {r.side() for r in reuse_first}
    if a == b == {0}:
        return NO_GAP
    if len(a) == len(b) == 1 and 0 not in a | b:
        return ORDER if a != b else POLICY
    return MIXED


@dataclass(frozen=True)
class OrderRow:
    engine: str
    place: str
    recapture_first: tuple[OrderedGap, ...]
    reuse_first: tuple[OrderedGap, ...]

    @property
    def params(self) -> dict:
        return json.loads(self.place)

    def gaps(self, first: str, phase: str) -> list[Ratio]:
        rows = self.recapture_first if first == "recapture" else self.reuse_first
        out = [g.before if phase == "before" else g.after for g in rows]
        return [r for r in out if r is not None]

    def verdict(self, phase: str) -> str | None:
        return verdict(self.gaps("recapture", phase), self.gaps("reuse", phase))

    def first_turn(self, phase: str) -> str:
        """Which instance took the phase's first turn in every point ('built first', 'built second'), 'varies'
        where the points differ, '-' where none says."""
        return common(g.leader(phase) for g in self.recapture_first + self.reuse_first)

    def first_over_second(self, phase: str) -> float | None:
        return _across_orders([[g.first_over_second(phase) for g in gaps]
                               for gaps in (self.recapture_first, self.reuse_first)])

    def recapture_over_reuse(self, phase: str) -> float | None:
        """Near 1 where the gap follows the order alone; away from it, what the policy adds."""
        return _across_orders([[r.point for r in self.gaps(first, phase)] for first in POLICY_PAIR])


def _geometric_mean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def _across_orders(per_order: list[list[float | None]]) -> float | None:
    """The geometric mean over the orders of each order's geometric mean: None where an order has no value."""
    means = [_geometric_mean([v for v in values if v is not None]) for values in per_order]
    return None if None in means else _geometric_mean(means)


def order_rows(results: list[Result]) -> list[OrderRow]:
    """Per engine and place (in the results' order) where points ran in both orders."""
    groups: dict[tuple[str, str], list[OrderedGap]] = {}
    for result in results:
        for gap in ordered_gaps(result):
            groups.setdefault((gap.engine, gap.place), []).append(gap)
    rows = [OrderRow(engine, place, tuple(g for g in gaps if g.first == "recapture"),
                     tuple(g for g in gaps if g.first == "reuse")) for (engine, place), gaps in groups.items()]
    return [row for row in rows if row.recapture_first and row.reuse_first]
