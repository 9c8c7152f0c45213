"""Where the kernel time goes: the kernels with the most summed time in each variant's profiled call.

Two engines of the same model can run nearly the same number of kernels and still differ in summed
kernel time (the graph engine's SmolLM2 rollout against generate()'s); the floors table shows that
they differ, this table shows which kernels make the difference. Each variant keeps its own top
kernels, so a kernel missing from one variant's rows may be smaller there, not absent: the "other
kernels" row holds the rest of its time and launches. One DataFrame for the report notebook, one
markdown section for summary.md; both empty where no profile kept its kernels (CPU runs, results
written before kernels were kept).
"""
from __future__ import annotations

import pandas as pd

from .. import floors
from ..engines import variant_rank
from ..result import Result
from .tables import typed_frame
from .text import number, table

TITLE = "Where the kernel time goes: the kernels with the most summed time in each profiled steady call"
NOTE = ("Per variant, the kernels (by name) with the most summed time in its profiled cycle-0 steady call "
        "(profiling process), then all its other kernels in one row. share: of the call's summed kernel time; "
        "per step: launches over the call's steps (see the floors table). Names lose their argument list, and a "
        "long one its middle.")
COLUMNS = ["variant", "kernel", "launches", "per step", "ms", "us per launch", "share %"]
OTHER = "other kernels"
NAME_CHARS = 100


def _without_arguments(name: str) -> str:
    """`name` without a trailing, bracket-balanced argument list; template arguments and names with
    brackets of their own (`(anonymous namespace)::`, `operator()`) are kept."""
    if not name.endswith(")"):
        return name
    depth = 0
    for index in range(len(name) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(name[index], 0)
        if depth == 0:
            return name[:index].rstrip() if index > 0 else name
    return name


def short_name(name: str) -> str:
    """A kernel's name as a table shows it: no leading `void `, no argument list, and past NAME_CHARS its
    middle cut out (the head names the kernel, the tail its functor or tile)."""
    head = _without_arguments(name.removeprefix("void "))
    if len(head) <= NAME_CHARS:
        return head
    keep = (NAME_CHARS - 3) // 2
    return head[:keep] + "..." + head[-(NAME_CHARS - 3 - keep):]


def _row(variant: str, name: str, count: int, ms: float, kernel_ms: float, steps: int | None) -> list:
    return [variant, name, count, count / steps if steps else None, ms, 1e3 * ms / count if count else None,
            100 * ms / kernel_ms if kernel_ms else None]


def kernel_rows(result: Result) -> list[list]:
    """Each variant's top kernels and an "other kernels" row for the rest, variants in registry order."""
    steps = floors.floor_of(result).steps
    rows = []
    for variant, profile in sorted(result.profile.items(), key=lambda item: variant_rank(item[0])):
        top = profile.top_kernels
        for kernel in top:
            rows.append(_row(variant, short_name(kernel["name"]), kernel["count"], kernel["ms"], profile.kernel_ms,
                             steps))
        rest = profile.kernels - sum(k["count"] for k in top)
        if top and rest > 0:
            rows.append(_row(variant, OTHER, rest, max(profile.kernel_ms - sum(k["ms"] for k in top), 0.0),
                             profile.kernel_ms, steps))
    return rows


def kernels_table(results: list[Result]) -> pd.DataFrame:
    return typed_frame(results, kernel_rows, COLUMNS, ("launches",), tuple(COLUMNS[3:]))


def tracing_verdict(record: dict) -> str:
    """One kind's reading: "lengthened" when every profiled replay's kernels outlast every unprofiled
    replay (per kernel, gaps included there), else "within" (then only a cost below the gaps could hide)."""
    return ("lengthened" if min(record["recorded_us_per_kernel_samples"]) > max(record["replay_us_per_kernel_samples"])
            else "within")


def tracing_note(result: Result) -> str | None:
    """What the profiler's tracing did to kernels inside a graph replay in this run's profiling process
    (tracing.py), kind by kind, or None where it was not measured (CPU runs, results written before)."""
    records = result.extra.get("tracing")
    if not records:
        return None
    parts, lengthened, within, apart = [], [], [], []
    for record in records:
        if record.get("error"):
            parts.append(f"{record.get('kind')}: not measured ({record['error']})")
            continue
        verdict = tracing_verdict(record)
        recorded, replay = record["recorded_us_per_kernel"], record["replay_us_per_kernel"]
        if verdict == "lengthened":
            lengthened.append(record["kind"])
            reading = f"recorded kernels outlast every unprofiled replay, by {number(recorded - replay, 3)} us each"
        else:
            within.append(record["kind"])
            reading = (f"recorded kernels fit within the unprofiled replay, whose gaps leave "
                       f"{number(max(replay - recorded, 0.0), 3)} us per kernel in which a cost could hide")
        alone = record.get("alone_us_per_kernel")
        if alone is not None:
            apart.append((record["kind"], recorded - alone, recorded / alone - 1))
            reading += f"; launched one at a time, {number(alone, 3)} us recorded per kernel"
        elif record.get("alone_error"):
            reading += f"; launched one at a time: not measured ({record['alone_error']})"
        parts.append(f"{record['kind']}: {number(recorded, 3)} us recorded per kernel against {number(replay, 3)} us "
                     f"per kernel for the whole unprofiled replay ({record['kernels']:,} kernels in "
                     f"{record['steps']:,} steps): {reading}")
    if lengthened:
        verdict = (f"the profiler lengthens the kernels it records back to back ({', '.join(lengthened)}): its own "
                   "cost is in the kernel sums of engines whose kernels run back to back in replays (generate()'s "
                   "run with host gaps between them)")
    elif within:
        verdict = "no lengthening beyond what the replays' gaps could hide"
    else:
        verdict = "not measured"
    if apart:
        verdict += ("; against the same kernels launched one at a time (host gaps between them, as a host-bound "
                    "generate() leaves them), a replay's are recorded " + ", ".join(
                        f"{kind} the same" if abs(us) < 0.0005 else f"{kind} {number(abs(us), 3)} us "
                        f"({number(100 * abs(share), 1)}%) {'longer' if us > 0 else 'shorter'}"
                        for kind, us, share in apart)
                    + " per kernel: a graph engine's kernel sum against generate()'s carries that for kernels like "
                      "these, whether the time is the kernel's or the trace's")
    return (f"Tracing check (profiling process, before the model loads; a graph of small kernels replayed without and "
            f"with the profiler, then the same kernels launched one at a time): {'; '.join(parts)}. So: {verdict}.")


def kernels_markdown(result: Result) -> list[str]:
    rows = kernel_rows(result)
    if not rows:
        return []
    cells = [[variant, name if name == OTHER else f"`{name}`", count, number(per_step, 1), ms,
              number(per_launch, 2), number(share, 1)]
             for variant, name, count, per_step, ms, per_launch, share in rows]
    tracing = tracing_note(result)
    return [f"## {TITLE}", "", NOTE, "", *([tracing, ""] if tracing else []), *table(COLUMNS, cells), ""]
