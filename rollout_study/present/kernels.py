"""Where the kernel time goes: the longest kernels of each variant's profiled steady call.

Two engines of the same model can run nearly the same number of kernels and still differ in summed
kernel time (the graph engine's SmolLM2 rollout against generate()'s); the floors table shows that
they differ, this table shows which kernels make the difference. One DataFrame for the report
notebook, one markdown section for summary.md; both empty where no profile kept its kernels (CPU
runs, results written before kernels were kept).
"""
from __future__ import annotations

import pandas as pd

from .. import floors
from ..result import Result
from .tables import require_single_label
from .text import number, table

TITLE = "Where the kernel time goes: the longest kernels of each profiled steady call"
NOTE = ("The kernels that took the most summed time in each variant's profiled cycle-0 steady call (profiling "
        "process), longest first; names cut at their argument list. share: of the call's summed kernel time; "
        "per step: launches over the call's steps (see the floors table).")
COLUMNS = ["variant", "kernel", "launches", "per step", "ms", "us per launch", "share %"]
NAME_CHARS = 90


def short_name(name: str) -> str:
    """A kernel's name without its argument list, cut to NAME_CHARS (the head says which kernel it is)."""
    head = name.split("(", 1)[0] if "(" in name[1:] else name
    return head if len(head) <= NAME_CHARS else head[: NAME_CHARS - 3] + "..."


def kernel_rows(result: Result) -> list[list]:
    steps = floors.floor_of(result).steps
    rows = []
    for variant, profile in result.profile.items():
        for kernel in profile.top_kernels:
            ms, count = kernel["ms"], kernel["count"]
            rows.append([variant, short_name(kernel["name"]), count, count / steps if steps else None, ms,
                         1e3 * ms / count if count else None,
                         100 * ms / profile.kernel_ms if profile.kernel_ms else None])
    return rows


def kernels_table(results: list[Result]) -> pd.DataFrame:
    require_single_label(results)
    frame = pd.DataFrame([[result.run_name, *row] for result in results for row in kernel_rows(result)],
                         columns=["run"] + COLUMNS)
    frame["launches"] = frame["launches"].astype("Int64")
    for column in COLUMNS[3:]:
        frame[column] = frame[column].astype("float64")
    return frame


def kernels_markdown(result: Result) -> list[str]:
    rows = kernel_rows(result)
    if not rows:
        return []
    cells = [[variant, f"`{name}`", count, number(per_step, 1), ms, number(per_launch, 2), number(share, 1)]
             for variant, name, count, per_step, ms, per_launch, share in rows]
    return [f"## {TITLE}", "", NOTE, "", *table(COLUMNS, cells), ""]
