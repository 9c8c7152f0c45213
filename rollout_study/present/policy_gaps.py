"""Recapture against reuse phase by phase (policy_gap.py): a run's table, and a sweep's per model.

A run's table says whether the two policies' steady gap stays through the run's recaptures; a sweep's, over
its points (each a process of its own), whether the gap after the last update follows the gap before the
first: a gap fixed within each run, which more samples do not narrow, so the break-even reads a gap between
two policies only beyond its margin. What fixes it, neither says (policy_gap.py).
"""
from __future__ import annotations

import json
import statistics

import pandas as pd

from .. import analysis
from ..effects import STEADY_MARGIN
from ..policy_gap import MIN_RUNS_FOR_INTERVAL, persistence, phase_gaps
from ..policy_order import common, order_rows
from ..result import Result
from .tables import typed_frame
from .text import phase_name, table

TITLE = "Recapture over reuse per steady phase: the same kernels, graphs recaptured after every update"
NOTE = ("recapture's steady median over reuse's with its 95% bootstrap interval. Before the first update the two "
        "are one engine captured the same way, though in two instances, built one after the other and taking "
        "their turns in that order (the order policy lists them: recapture first for both); a gap that stays the "
        "same after the recaptures is fixed within the run, not a cost of either policy (where a sweep ran both "
        "orders, it followed the turn: 1 to 2.6% at batch 1 on H200 machines, with or without eager beside; within "
        "0.8% before any update on two H100 machines, mostly inside the intervals; probe-turn-order, "
        "probe-turn-alone and their -h100 twins), and more samples narrow its interval but not the gap: the "
        f"break-even reads a steady gap between two policies only beyond {STEADY_MARGIN:.0%} as well as its "
        "interval.")
COLUMNS = ["engine", "cycle", "phase", "recapture / reuse", "95% low", "95% high"]

SWEEP_TITLE = "Recapture over reuse before the first update and after the last, over the points"
SWEEP_NOTE = ("each point is a process of its own. before and after: recapture's steady median over reuse's in a "
              "point's cycle-0 steady phase and in its last steady phase after an update (after the last "
              "recapture); Pearson's correlation over the points, with a 95% bootstrap interval over them (from "
              f"{MIN_RUNS_FOR_INTERVAL} points), and Spearman's (of the ranks: one outlying point moves it less). "
              "Near 1: each point's gap is fixed within its run, not redrawn by the recaptures; near 0: drawn anew "
              "(noise or drift between phases). What fixes it this cannot tell: where a sweep ran each place in "
              "both orders, the order table below says whether it followed the policy or the instance built first.")
SWEEP_COLUMNS = ["engine", "points", "before mean", "before sd", "after mean", "after sd", "Pearson", "95% low",
                 "95% high", "Spearman"]


def gap_rows(result: Result) -> list[list]:
    controls = analysis.control_cycles(result)
    return [[g.engine, g.cycle, phase_name(controls, g.cycle, g.phase), g.ratio.point, g.ratio.low, g.ratio.high]
            for g in phase_gaps(result)]


def gaps_table(results: list[Result]) -> pd.DataFrame:
    return typed_frame(results, gap_rows, COLUMNS, ("cycle",),
                       ("recapture / reuse", "95% low", "95% high"))


def gaps_markdown(result: Result) -> list[str]:
    rows = gap_rows(result)
    return [f"## {TITLE}", "", NOTE, "", *table(COLUMNS, rows), ""] if rows else []


def persistence_table(points) -> pd.DataFrame:
    """One row per engine with both policies, over a sweep section's valid points."""
    rows = []
    for p in persistence([point.result for point in points]):
        low, high = p.interval or (None, None)
        rows.append([p.engine, p.runs, statistics.fmean(p.before), statistics.pstdev(p.before),
                     statistics.fmean(p.after), statistics.pstdev(p.after), p.pearson, low, high, p.spearman])
    return pd.DataFrame(rows, columns=SWEEP_COLUMNS)


ORDER_TITLE = "Recapture over reuse in both orders: the policy, or the instance built first"
ORDER_NOTE = ('where a sweep ran each place in both orders (policy [recapture, reuse] and [reuse, recapture], '
              "the settings 'recapture then reuse' and 'reuse then recapture': the first listed is built first; "
              'turn_order fixed calls it first of the two in every round, its first '
              'call, which allocates and captures, included; reverse second; rotate first in its first call, in each'
              " phase's first round and in half the rounds alone, in most beside other engines; rotate-run as rotate"
              " with the rounds counted over the run, so the phases' first rounds move between the two): recapture's"
              " steady median over reuse's, the range over a place's points in each order (their count in brackets),"
              " before any update and in the last steady phase after one. phase's first turn: of the two, the "
              "instance whose call came first in that phase, as the points recorded it. first / second: the "
              "instance built first's steady median over the second's (under 1: the first is faster); both orders: "
              "recapture's over reuse's (near 1: the policy adds nothing); each the geometric mean over one order's "
              "points, then over the two orders. Verdict: follows the order where every point's 95% interval is "
              "clear of 1, on one side with recapture first and on the other with reuse first; follows the policy "
              "where all are clear on the same side; no gap where every interval includes 1; else mixed. The verdict "
              "reads signs, the two means sizes.")
# Which of the two instances calls first in a round (rotation keeps the cyclic order, so beside other engines most
# rounds keep the build's; alone, half)
CALLS_FIRST = {"fixed": "built first", "reverse": "built second", "rotate": "varies", "rotate-run": "varies"}
ORDER_COLUMNS = ["engine", "turn order", "calls first", "batch", "requests", "new tokens", "also", "phase",
                 "phase's first turn", "recapture first", "reuse first", "first / second", "both orders", "verdict"]
SHOWN = ("turn_order", "batch_size", "requests", "max_new_tokens")


def _range(gaps) -> str:
    if not gaps:
        return "-"
    low, high = min(g.point for g in gaps), max(g.point for g in gaps)
    return f"{low:.3f} ({len(gaps)})" if low == high else f"{low:.3f} to {high:.3f} ({len(gaps)})"


def _also(rows) -> list[str]:
    """Per row, the parameters besides SHOWN whose values differ between the rows: what else tells places apart."""
    keys = sorted({k for r in rows for k in r.params} - set(SHOWN))
    varied = [k for k in keys if len({json.dumps(r.params.get(k), sort_keys=True) for r in rows}) > 1]
    return [", ".join(f"{k}={json.dumps(r.params.get(k))}" for k in varied) or "-" for r in rows]


def order_table(points) -> pd.DataFrame:
    """Two rows (before any update, after the last) per engine and place of one model's points that ran in both
    orders; empty where none did."""
    rows, out = order_rows([point.result for point in points]), []
    for row, also in zip(rows, _also(rows)):
        params = row.params
        turns = params.get("turn_order")
        for phase in ("before", "after"):
            out.append([row.engine, turns, CALLS_FIRST.get(turns, "-"), params.get("batch_size"),
                        params.get("requests"), params.get("max_new_tokens"), also, phase, row.first_turn(phase),
                        _range(row.gaps("recapture", phase)), _range(row.gaps("reuse", phase)),
                        row.first_over_second(phase),
                        row.recapture_over_reuse(phase), row.verdict(phase) or "-"])
    return pd.DataFrame(out, columns=ORDER_COLUMNS)


def order_lines(points, model: str) -> list[str]:
    """Per engine and turn order: how far the instance built first was from the second before any update and after
    the last, which instance led each of those phases, and the verdicts."""
    lines, rows = [], order_rows([point.result for point in points])
    for engine, turns in dict.fromkeys((r.engine, r.params.get("turn_order")) for r in rows):
        mine = [r for r in rows if (r.engine, r.params.get("turn_order")) == (engine, turns)]
        policy = [r.recapture_over_reuse("before") for r in mine]
        verdicts = [r.verdict("before") for r in mine]
        counts = ", ".join(f"{v} at {verdicts.count(v)}" for v in dict.fromkeys(verdicts))
        phases = []
        for phase, when in (("before", "before any update"), ("after", "after the last")):
            ratios = [r.first_over_second(phase) for r in mine]
            if None not in ratios:
                leader = _instance(common(r.first_turn(phase) for r in mine), "either, by point")
                phases.append(f"{_span(ratios)} {when} (its first round led by {leader})")
        calls = _instance(CALLS_FIRST.get(turns, "-"), "either, by round")
        lines.append(f"{model}: {engine} in both orders, turns {turns} (calling first of the two in a round: {calls}): "
                     f"the instance built first's steady median over the second's {' and '.join(phases)}, over "
                     f"{len(mine)} place(s); before any update recapture's over reuse's {_span(policy)} over both "
                     f"orders, and recapture over reuse {counts} (of {len(mine)})")
    return lines


def _span(values: list[float]) -> str:
    return f"{min(values):.3f}x to {max(values):.3f}x"


def _instance(which: str, varies: str) -> str:
    """'built first' (or second) as 'the instance built first', 'varies' in the words `varies` gives."""
    return f"the instance {which}" if which.startswith("built") else varies if which == "varies" else "unknown"
