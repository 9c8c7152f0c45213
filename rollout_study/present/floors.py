"""The floors table: each variant's steady call beside the weight-streaming floor (rollout_study/floors.py).

One DataFrame for the report notebook, one markdown section for summary.md, and the note both
carry: what a step is, what the floor counts, where the bandwidth came from, or why it is absent.
"""
from __future__ import annotations

import pandas as pd

from .. import floors
from ..result import Result
from .tables import typed_frame
from .text import number, table

COLUMNS = ["variant", "steps per call", "wall ms", "kernel ms", "kernels", "kernels per step", "floor ms per step",
           "floor ms per call", "wall / floor", "kernel / floor"]
TITLE = "Floors: steady call against the weight-streaming limit"
DEFINITION = (
    "A step is one forward of the model over one batch: the prefill is one step and each further new token one "
    "more, so a call makes batches x max_new_tokens steps. Each step reads the weights at least once, so the floor "
    "per step is weight bytes / measured bandwidth: every parameter's storage once (tied embeddings once; an "
    "untied input embedding table left out, as a lookup reads only its tokens' rows; buffers such as the rotary "
    "inv_freq left out). KV cache and activations are not counted, so the floor is a lower bound, as long as the "
    "weights do not fit in the device's last-level cache (from there a step can read them faster); an engine that "
    "batches requests differently from the workload (continuous batching) makes a different number of forwards. "
    "Wall ms: median of the cycle-0 steady calls; kernel ms and kernels: the profiled cycle-0 steady call "
    "(profiling process).")


def _cells(row: floors.FloorRow) -> list:
    return [row.variant, row.steps, row.wall_ms, row.kernel_ms, row.kernels, row.kernels_per_step,
            row.floor_ms_per_step, row.floor_ms, row.wall_over_floor, row.kernel_over_floor]


def floors_table(results: list[Result]) -> pd.DataFrame:
    """One row per variant and run; floor columns empty (NaN) where a run has no floor (`floor_note` says why)."""
    counts = ("steps per call", "kernels")
    return typed_frame(results, lambda result: [_cells(row) for row in floors.floor_rows(result)], COLUMNS, counts,
                       tuple(c for c in COLUMNS[1:] if c not in counts))


def floor_note(result: Result) -> str:
    """The floor's inputs in this run (or why there is none), then the definitions."""
    floor = floors.floor_of(result)
    steps = (f"{floor.batches} batch(es) x {floor.max_new_tokens} new tokens = {floor.steps} steps per call"
             if floor.steps else "steps per call unknown")
    if floor.absent:
        return f"Floor: {floor.absent}; {steps}. {DEFINITION}"
    record = floors.bandwidth_record(result)
    return (f"Floor: {number(floor.weight_bytes / 1e6)} MB of weights per step at {number(floor.gb_per_s, 1)} GB/s "
            f"(10^9 B/s; median of the samples {number(record.get('median_gb_per_s'), 1)} GB/s; "
            f"{record.get('method')}) = {number(floor.ms_per_step)} ms per step; {steps}. {DEFINITION}")


def floors_markdown(result: Result) -> list[str]:
    """The summary's section: heading, note, table (numbers formatted, '-' where not measured)."""
    rows = [_cells(row) for row in floors.floor_rows(result)]
    return [f"## {TITLE}", "", floor_note(result), "", *table(COLUMNS, rows), ""]
