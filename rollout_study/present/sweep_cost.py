"""What a sweep's points cost and where they ran: the sweep's wall time per invocation, where each point's
time went, and each point's host (its pace, and how far eager generate()'s calls spread within a point and
between the points of one place), as tables and the summary's host line. The curves are sweep.py's.
"""
from __future__ import annotations

import pandas as pd

from .. import sweep_curves as curves
from .. import sweep_settings as settings
from ..result import Result
from . import host


def _wall_row(what: str, wall: dict) -> dict:
    return {"what": what, "executor": wall.get("executor"), "GPUs": wall.get("gpus"), "workers": wall.get("workers"),
            "start": wall.get("start"), "end": wall.get("end"), "seconds": wall.get("seconds"),
            "points run": wall.get("points_run"), "points kept": wall.get("points_kept")}


def wall_table(record: dict) -> pd.DataFrame:
    """Each invocation of the sweep (a resumed one has several), their sum, then the repeats alone."""
    wall = record.get("wall") or {"executor": record.get("executor"), "seconds": record.get("wall_s")}
    earlier = wall.get("earlier", [])
    # An invocation of another sweep whose points were copied in (--keep-from: a smoke run of the corner) is named
    rows = [_wall_row(f"sweep points, invocation {i + 1}" + (f" ({w['sweep']}, its points copied in)"
                                                             if w.get("sweep") else ""), w)
            for i, w in enumerate(earlier)]
    rows.append(_wall_row("sweep points" + (f", invocation {len(earlier) + 1}" if earlier else ""), wall))
    if earlier:
        rows.append({"what": "sweep points, all invocations", "seconds": wall.get("total_seconds")})
    block = record.get("repeats")
    if block:
        # by the sweep's executor since the runs alone run twice; older records repeated in a local process
        by = sorted({str(e["executor"]) for e in block.get("points", []) if e.get("executor")}) or ["local"]
        rows.append({"what": "repeats alone", "executor": f"{' and '.join(by)}, one at a time", "workers": 1,
                     "start": block.get("start"), "end": block.get("end"), "seconds": block.get("seconds"),
                     "points run": len(block.get("points", []))})
    # Counts stay integers where a row has none (the all-invocations row): a float column printed 35.000 points
    return pd.DataFrame(rows, columns=list(_wall_row("", {}))).astype(
        {"GPUs": "Int64", "workers": "Int64", "points run": "Int64", "points kept": "Int64", "seconds": "float64"})


def point_model(point: dict, result: Result | None) -> str:
    """The label and model of a point's row: tables list points of every model, synthetic and pretrained,
    and a slug names the model as the sweep file does (smollm2-135m-instruct), not what it is."""
    if result is not None:
        return f"{result.label}: {result.model_name}"
    return f"{(point.get('params') or {}).get('model', '-')} (no result)"


def _seconds(ms):
    return None if ms is None else ms / 1e3


def time_table(loaded: list[tuple[dict, Result | None]]) -> pd.DataFrame:
    """Where each point's wall time went (the launcher's clock, fresh process included), and the sum over
    points: start-up (the process's own start where it had one, model load, initialization), the measured calls
    (compile among them), the host work around them (results written before it was kept: blank), the rest
    (set-up of engines and trainer, process exit; blank where the point also ran a profiling process, cold
    starts or instrumented calls). The last row sums each column over the points that have it (a point kept from
    an earlier invocation has parts but no wall here). What a sweep costs, and which part a shorter one would
    cut."""
    rows = []
    for point, result in loaded:
        meta = result.metadata if result is not None else {}
        startup, untimed = meta.get("startup") or {}, meta.get("untimed_ms") or {}
        # The process's age counts only where the point had a process of its own (the executors' launcher):
        # a point run in a longer-lived process (a test's) did not pay that process's start.
        own = str(meta.get("command", "")).startswith("fresh process")
        counted = ("model_load_ms", "initialization_ms") + (("process_startup_ms",) if own else ())
        parts_ms = {"start-up s": sum(startup.get(k) or 0.0 for k in counted) if startup else None,
                    "measured calls s": sum(c.total_ms for c in result.calls) if result is not None else None,
                    **{f"{part} s": untimed.get(part) for part in ("collect", "parity", "reference", "update")}}
        compile_ms = sum(c.breakdown_ms.get("compile", 0.0) for c in result.calls) if result is not None else None
        wall = point.get("wall_s")
        # A profiling process, cold starts or instrumented calls would sit in the rest unnamed: then no rest.
        others = result is not None and (result.profile or result.cold_starts or "instrumented_calls" in result.extra)
        rest = (wall - sum(ms for ms in parts_ms.values() if ms is not None) / 1e3
                if wall is not None and untimed and startup and not others else None)
        rows.append({"point": point.get("slug"), "model": point_model(point, result), "wall s": wall,
                     **{k: _seconds(ms) for k, ms in parts_ms.items()},
                     "of which compile s": _seconds(compile_ms), "rest s": rest})
    frame = pd.DataFrame(rows, columns=["point", "model", "wall s", "start-up s", "measured calls s",
                                        "of which compile s", "collect s", "parity s", "reference s", "update s",
                                        "rest s"])
    if not frame.empty:
        total = frame.drop(columns=["point", "model"]).sum(min_count=1)
        timed = int(frame["wall s"].notna().sum())
        # Beside parts summed over every point, a wall summed over fewer would read as parts over the wall.
        label = "all points" if timed in (0, len(frame)) else (
            f"all points (wall s: the {timed} of {len(frame)} run in the latest invocation)")
        frame.loc[len(frame)] = {"point": label, "model": "-", **total.to_dict()}
    return frame


HOST_CAPTION = ("Host of each point: speed at start and end (us per tiny CPU tensor operation), spread of eager "
                "generate()'s steady calls")


def host_table(loaded: list[tuple[dict, Result | None]]) -> pd.DataFrame:
    """Each point's host speed (host.py) at its start and end, and the spread of eager generate()'s cycle-0
    steady calls: the host-bound calls every speed-up divides by, against replays that do not follow the host."""
    rows = []
    for point, result in loaded:
        start, end = host.figures(result)
        calls, spread = host.baseline_spread(result)
        rows.append({"point": point.get("slug"), "model": point_model(point, result), "start us": start, "end us": end,
                     "generate() steady calls": calls or None, "slowest / fastest call": spread})
    return pd.DataFrame(rows, columns=["point", "model", "start us", "end us", "generate() steady calls",
                                       "slowest / fastest call"]).astype(
        {"start us": "float64", "end us": "float64", "generate() steady calls": "Int64",
         "slowest / fastest call": "float64"})


def placement_lines(record: dict) -> list[str]:
    """Where the Ray points ran: how many were pinned to their slot's cores and, under a NUMA layout (numa.py),
    how many had cores on their GPU's node; [] where no entry recorded a placement (the local executor)."""
    from ..numa import beside_gpu

    placed = [e["placement"] for e in record.get("points", []) + (record.get("repeats") or {}).get("points", [])
              if e.get("placement")]
    if not placed:
        return []
    pinned = sum(1 for p in placed if p.get("pinned"))
    known = [beside for beside in map(beside_gpu, placed) if beside is not None]
    where = (f"{sum(known)} of them with cores on their GPU's NUMA node, {len(known) - sum(known)} on another"
             if known else "no NUMA layout (one node, or the host did not say where its GPUs sit): the slots cut "
             "in core order, not necessarily beside their GPUs")
    return [f"placement: {pinned} of {len(placed)} Ray run(s) (points and runs alone) pinned to their slot's cores; "
            f"{where}"]


def host_lines(loaded: list[tuple[dict, Result | None]]) -> list[str]:
    frame = host_table(loaded)
    seen = pd.concat([frame["start us"], frame["end us"]]).dropna()
    # The spread of the valid points only: the speed-ups it speaks of are theirs
    usable = curves.split(loaded)[0]
    valid = {p.slug for p in usable}
    spread = frame[frame["point"].isin(valid)]["slowest / fastest call"].dropna()
    between = host.baseline_between_points(usable)
    if seen.empty and spread.empty and not between:  # points written before host speed was kept, or none finished
        return []
    parts = []
    if not seen.empty:
        parts.append(f"{seen.min():.2f} to {seen.max():.2f} us per tiny CPU operation at the points' starts and "
                     "ends (two instants of each run: they do not say which of its calls ran on a slow host)")
    if not spread.empty:
        parts.append(
            f"within each valid point, eager generate()'s steady calls spread by {spread.median():.2f}x (median over "
            f"{len(spread)} point(s); up to {spread.max():.2f}x, slowest over fastest call): generate() runs at "
            "the host's pace and the graph engines' replays do not, so the speed-ups over it carry that spread "
            "(their intervals in the speed-up figure)")
    if between:
        where, most = max(between, key=lambda row: row[1])
        model = f"{where.model[1]} {where.model[2]}, " if len({p.model for p, _ in between}) > 1 else ""
        model += f"{settings.text(where.setting)}, " if where.setting else ""
        typical = float(pd.Series([ratio for _, ratio in between]).median())
        parts.append(
            f"between the valid points of one place (each engine group's point runs eager), eager generate()'s "
            f"steady medians differ by up to {most:.2f}x ({model}{where.new_tokens} new tokens, batch "
            f"{where.batch}; median {typical:.2f}x over {len(between)} place(s), slowest over fastest): each "
            "speed-up divides by its own point's, so speed-ups of variants from different groups differ by that "
            "too; their steady ms (the latency table) compare without it")
    return ["host: " + "; ".join(parts)]
