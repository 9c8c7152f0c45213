"""Recapture against reuse phase by phase (policy_gap.py): a run's table, and a sweep's per model.

A run's table says whether the two policies' steady gap stays through the run's recaptures; a sweep's, over
its points (each a process of its own), whether the gap after the last update follows the gap before the
first: a gap fixed within each run, which more samples do not narrow, so the break-even reads a gap between
two policies only beyond its margin. What fixes it, neither says (policy_gap.py).
"""
from __future__ import annotations

import statistics

import pandas as pd

from .. import analysis
from ..effects import STEADY_MARGIN
from ..policy_gap import MIN_RUNS_FOR_INTERVAL, persistence, phase_gaps
from ..result import Result
from .tables import typed_frame
from .text import phase_name, table

TITLE = "Recapture over reuse per steady phase: the same kernels, graphs recaptured after every update"
NOTE = ("recapture's steady median over reuse's with its 95% bootstrap interval. Before the first update the two "
        "are one engine captured the same way, though in two instances, allocated one after the other and taking "
        "their turns in a fixed order (recapture first); a gap that stays the same after the recaptures is fixed "
        "within the run, not a cost of either policy, and more samples narrow its interval but not the gap: the "
        f"break-even reads a steady gap between two policies only beyond {STEADY_MARGIN:.0%} as well as its "
        "interval.")
COLUMNS = ["engine", "cycle", "phase", "recapture / reuse", "95% low", "95% high"]

SWEEP_TITLE = "Recapture over reuse before the first update and after the last, over the points"
SWEEP_NOTE = ("each point is a process of its own. before and after: recapture's steady median over reuse's in a "
              "point's cycle-0 steady phase and in its last steady phase after an update (after the last "
              "recapture); Pearson's correlation over the points, with a 95% bootstrap interval over them (from "
              f"{MIN_RUNS_FOR_INTERVAL} points), and Spearman's (of the ranks: one outlying point moves it less). "
              "Near 1: each point's gap is fixed within its run, not redrawn by the recaptures; near 0: drawn anew "
              "(noise or drift between phases). Which fixes it (the instances' buffers, their allocation order, "
              "their turn in each round: recapture always goes first) this cannot tell.")
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
