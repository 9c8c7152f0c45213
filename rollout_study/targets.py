"""The issues' performance targets, checked against a result file (never by a timed unit test).

Each check returns what was measured, the threshold and whether it is met; a check whose inputs
are absent (no CUDA profile, no reuse policy in the run) says so instead of passing.
"""
from __future__ import annotations

import statistics

from .results import target_of as _target


def _median(result: dict, target: str, phases: tuple[str, ...], cycle: int | None = None) -> float | None:
    values = [c["total_ms"] for c in result["calls"]
              if _target(c) == target and c["phase"] in phases and (cycle is None or c["cycle"] == cycle)]
    return statistics.median(values) if values else None


def _graph_targets(result: dict) -> list[str]:
    return sorted({_target(c) for c in result["calls"] if c["engine"] == "graph"})


def check(result: dict, min_speedup: float = 12.0, max_kernel_ratio: float = 1.3,
          max_reuse_first_ratio: float = 1.10) -> list[dict]:
    rows = []

    def row(name, measured, threshold, met, detail=""):
        rows.append({"target": name, "measured": measured, "threshold": threshold,
                     "met": met, "detail": detail})

    eager = _median(result, "eager", ("steady",), cycle=0)
    for target in _graph_targets(result):
        graph = _median(result, target, ("steady",), cycle=0)
        if eager is not None and graph:
            row(f"{target} steady speed-up over eager generate()", eager / graph, f">= {min_speedup}x",
                eager / graph >= min_speedup, f"eager {eager:.3f} ms, graph {graph:.3f} ms")
        profile = (result.get("profile") or {}).get(target)
        if profile and graph:
            ratio = graph / profile["kernel_ms"]
            row(f"{target} steady over summed kernel time", ratio, f"<= {max_kernel_ratio}x",
                ratio <= max_kernel_ratio, f"steady {graph:.3f} ms, kernels {profile['kernel_ms']:.3f} ms "
                f"({profile['kernels']} kernels)")
        else:
            row(f"{target} steady over summed kernel time", None, f"<= {max_kernel_ratio}x", None,
                "no profile in this run (CPU, or profiling off)")
    if "graph[reuse]" in _graph_targets(result):
        firsts = [c for c in result["calls"] if _target(c) == "graph[reuse]" and c["phase"] == "first_after_update"]
        for first in firsts:
            steady = _median(result, "graph[reuse]", ("steady_after_update",), cycle=first["cycle"])
            ratio = first["total_ms"] / steady if steady else None
            row(f"graph[reuse] first call after update {first['cycle']} vs steady", ratio,
                f"<= {max_reuse_first_ratio:.2f}x", ratio is not None and ratio <= max_reuse_first_ratio,
                f"first {first['total_ms']:.3f} ms, steady {steady:.3f} ms" if steady else "")
        after = [c for c in result["calls"] if _target(c) == "graph[reuse]" and c["phase"] in
                 ("first_after_update", "steady_after_update")]
        captures = sum(c["captures"] for c in after)
        row("graph[reuse] captures after an update", captures, "0", captures == 0 if after else None)
    checked = [c for c in result["calls"] if c.get("parity") is not None]
    failed = [c for c in checked if not c["parity"]["ok"]]
    row("parity with generate() on every measured call", f"{len(checked) - len(failed)}/{len(result['calls'])}",
        "all", not failed and len(checked) == len(result["calls"]))
    return rows
