"""Recapture against reuse phase by phase (policy_gap.py): a run's table, and a sweep's per model.

A run's table says whether the two policies' steady gap stays through the run's recaptures; a sweep's, over
its points (each a process of its own), whether the gap after the last update follows the gap before the
first: an offset fixed for each run, which more samples do not narrow, so the break-even reads a gap between
two policies only beyond its margin.
"""
from __future__ import annotations

import statistics

import pandas as pd

from .. import analysis
from ..effects import STEADY_MARGIN
from ..policy_gap import persistence, phase_gaps
from ..result import Result
from .tables import typed_frame
from .text import phase_name, table

TITLE = "Recapture over reuse per steady phase: the same kernels, graphs recaptured after every update"
NOTE = ("recapture's steady median over reuse's with its 95% bootstrap interval. Before the first update the two "
        "are one engine captured the same way, so a gap there is the two instances' offset in this process (or "
        "their turn in each round, which would give it one sign in every run: a sweep report's table of this gap "
        "over its points says which); a gap that stays the same after the recaptures is that offset again, not a "
        "cost of either policy, and more samples narrow its interval but not the offset: the break-even reads a "
        f"steady gap between two policies only beyond {STEADY_MARGIN:.0%} as well as its interval.")
COLUMNS = ["engine", "cycle", "phase", "recapture / reuse", "95% low", "95% high"]

SWEEP_TITLE = "Recapture over reuse before the first update and after the last, over the points"
SWEEP_NOTE = ("Each point is a process of its own. first and last: recapture's steady median over reuse's in a "
              "point's first steady phase and in its last (after the last recapture); correlation: Pearson's over "
              "the points, with a 95% bootstrap interval over them. Near 1: each run's gap is an offset that stays "
              "through its recaptures; near 0: drawn anew (noise or drift). Where the gaps' spread is about the "
              "samples' own, no correlation is expected.")
SWEEP_COLUMNS = ["engine", "points", "first mean", "first sd", "last mean", "last sd", "correlation", "95% low",
                 "95% high"]


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
        rows.append([p.engine, p.runs, statistics.fmean(p.first), statistics.pstdev(p.first), statistics.fmean(p.last),
                     statistics.pstdev(p.last), p.correlation, low, high])
    return pd.DataFrame(rows, columns=SWEEP_COLUMNS)
