"""Where a steady graph call's `other` goes: the device's time outside the replays, split by the call's clock.

A call whose parts are all device parts (timed by CUDA events: a steady call of a graph engine) has an
`other` that is the device's time outside the replays. The clock (timing.py) splits it by an event
recorded at the start: before the first part (host work the idle device waits for), between parts,
after the last part (outputs copied out, the synchronized stop). On a model small enough for a call to
take a few milliseconds this is what keeps wall time above kernel time (issue 11's 1.2x), and which of
the three it is says what would shorten it. Results written before the split was kept, runs without
CUDA and engines without device parts give no rows.
"""
from __future__ import annotations

import statistics

import pandas as pd

from ..result import Result
from .tables import typed_frame
from .text import table

TITLE = "Outside the replays: where a steady call's other goes"
NOTE = ("Cycle-0 steady calls whose parts are all device parts (CUDA events around the replays), in ms: calls "
        "counts them, and every column is a median over those calls only (total and other can differ from the "
        "summary's steady medians where some steady calls had a host part). other = total - the parts; before "
        "first part: from the start event, recorded on the idle device as the host clock starts, to the first "
        "replay's start event (the engine's check, the first prompt loaded, the launch); between parts: the "
        "device's time between replays that no part covers (the next prompt's copies, the outputs gathered on "
        "the device, a replay launched late; for parts back to back, a few microseconds either side of zero, "
        "the events' resolution); after last part: the host clock's total less the device's span from the start "
        "event to the last part's end (the last batch's outputs gathered on the device, the host's return, the "
        "wake from the synchronization; the outputs reach the host after the call). The three add up to other "
        "call by call; their medians need not add up to other's median.")
KEYS = ("before_first_part_ms", "between_parts_ms", "after_last_part_ms")
COLUMNS = ["variant", "calls", "total ms", "other ms", "before first part ms", "between parts ms",
           "after last part ms"]


def split_rows(result: Result) -> list[list]:
    """One row per checked variant whose cycle-0 steady calls carry a split, in registry order."""
    rows = []
    for variant in result.checked_variants():
        calls = [c for c in result.calls_of(variant, 0, "steady") if isinstance(c.extra.get("other_split"), dict)]
        if not calls:
            continue
        splits = [c.extra["other_split"] for c in calls]
        rows.append([variant, len(calls), statistics.median(c.total_ms for c in calls),
                     statistics.median(c.breakdown_ms["other"] for c in calls),
                     *(statistics.median(split[key] for split in splits) for key in KEYS)])
    return rows


def split_table(results: list[Result]) -> pd.DataFrame:
    return typed_frame(results, split_rows, COLUMNS, ("calls",), tuple(COLUMNS[2:]))


def split_markdown(result: Result) -> list[str]:
    rows = split_rows(result)
    if not rows:
        return []
    return [f"## {TITLE}", "", NOTE, "", *table(COLUMNS, rows), ""]
