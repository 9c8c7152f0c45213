"""Each CUDA graph the graph engines captured: the cache length it attends over, its capture time and
what it grew the graph pool by.

With length buckets a runner captures one decode graph per bucket of cache length, so what the
buckets cost is per graph, not per call: the calls' `capture` part sums them. The rows come from
each call's `engine_notes["captures"]` (the graph engines record one note per graph captured in
that call), so calls that captured nothing have no rows, and results written before the notes were
kept, or with engines that capture no graphs of the study's own, give an empty table. `batch` is
the runner's batch size (a partial batch has its own runner and graphs), absent in results written
before the notes named it.
"""
from __future__ import annotations

import pandas as pd

from .. import analysis
from ..engines import variant_rank
from ..record import run_order
from ..result import Result
from .tables import typed_frame
from .text import number, phase_name, table

TITLE = "Graphs captured: cache length, capture time and graph-pool growth per graph"
NOTE = ("One row per CUDA graph a call captured (first calls, and first calls after an update that recaptures). "
        "keys: cache positions the graph attends over (with length buckets, its bucket's end); steps: decode steps "
        "one replay runs; capture ms: host time of the capture, synchronized; pool MiB: reserved memory the "
        "capture added (graphs of one engine share one pool, so a later graph often adds nothing); allocated MiB: "
        "allocated memory the capture added, still allocated after it.")
COLUMNS = ["variant", "cycle", "phase", "call", "batch", "graph", "keys", "steps", "capture ms", "pool MiB",
           "allocated MiB"]


def capture_rows(result: Result) -> list[list]:
    """Every captured graph of every measured call, in the order the protocol ran them (phase, then call
    index, then variant in registry order), each call's graphs in capture order. The phase as tables name
    it: a control cycle's first call after its update recaptures too, and says it was a control."""
    controls = analysis.control_cycles(result)
    calls = sorted((c for c in result.calls if (c.extra.get("engine_notes") or {}).get("captures")),
                   key=lambda c: (run_order(c.cycle, c.phase), c.index, variant_rank(c.variant)))
    rows = []
    for call in calls:
        for note in call.extra["engine_notes"]["captures"]:
            # Notes written before several steps per graph existed have no "steps": one step then.
            rows.append([call.variant, call.cycle, phase_name(controls, call.cycle, call.phase), call.index,
                         note.get("batch"), note["graph"], note["keys"], note.get("steps", 1), note["capture_ms"],
                         note["pool_bytes"] / 2 ** 20, note["allocated_bytes"] / 2 ** 20])
    return rows


def captures_table(results: list[Result]) -> pd.DataFrame:
    return typed_frame(results, capture_rows, COLUMNS, ("cycle", "call", "batch", "keys", "steps"),
                       ("capture ms", "pool MiB", "allocated MiB"))


def captures_markdown(result: Result) -> list[str]:
    rows = capture_rows(result)
    if not rows:
        return []
    cells = [[variant, cycle, phase, index, "-" if batch is None else batch, f"`{graph}`", keys, steps, ms,
              number(pool, 1), number(allocated, 1)]
             for variant, cycle, phase, index, batch, graph, keys, steps, ms, pool, allocated in rows]
    return [f"## {TITLE}", "", NOTE, "", *table(COLUMNS, cells), ""]
