"""Whether a sweep folder is a result that may be published: every point of its spec ran, its repeats ran,
and (per report) its points are valid or are findings. sweep.py re-exports these functions, and this
module reads sweep.py's `load` only when called (sweep.py imports it)."""
from __future__ import annotations

import os

from .result import Result


def point_problems(points: list[tuple[dict, Result | None]]) -> list[str]:
    """Each point that failed (no result) or whose result is invalid, with why."""
    problems = []
    for entry, result in points:
        why = [entry.get("error") or "no result"] if result is None else result.validity_problems()
        if why:
            problems.append(f"point {entry['slug']}: {'; '.join(why)}")
    return problems


def failed_points(folder: str | os.PathLike) -> list[str]:
    """The points that failed (no result) or whose result records a failure (out of memory in a phase, say),
    as against a lost parity alone: what stops the H200 run after its smoke sweep (tools/h200-reports.sh)."""
    from .sweep import load

    return [entry["slug"] for entry, result in load(folder)[1] if result is None or result.failures]


def missing_points(record: dict) -> tuple[int, int] | None:
    """(points of the spec without an outcome, points of the spec), counted from the spec's axes alone (not
    through today's parameter checks, which may refuse an older record); None where the axes cannot be read."""
    axes = (record.get("spec") or {}).get("sweep")
    if not isinstance(axes, dict) or not axes or not all(isinstance(v, list) for v in axes.values()):
        return None
    total = 1
    for values in axes.values():
        total *= len(values)
    # By slug: older records have no `order`, and a spec with two points of one slug is refused (from_dict)
    done = {entry.get("slug") for entry in record.get("points", [])}
    return max(0, total - len(done)), total


def validity_problems(folder: str | os.PathLike, loaded: tuple | None = None) -> list[str]:
    """Why a sweep folder is not publishable: points not run, its report's own checks, and (hazard sweeps)
    failed or invalid points.

    A curve sweep (report `sweep`) records a point that fails, runs out of memory or loses parity as such and
    goes on: each point's outcome is a finding of the sweep, listed first in its report and never plotted, so
    it does not stop the sweep from being published; a sweep with no valid point, or with points it never
    ran, does. A hazard sweep's matrix needs every cell. `loaded`: what `load(folder)` returned, where the
    caller has it already."""
    from . import hazards, repeats
    from .sweep import finished, load  # here: sweep.py imports this module

    record, points = loaded or load(folder)
    curves = record.get("spec", {}).get("report") == "sweep"
    failed_or_invalid = point_problems(points)
    problems = [] if curves else list(failed_or_invalid)
    if curves and points and len(failed_or_invalid) == len(points):
        problems.append("no valid point")
    missing = missing_points(record)
    if missing is None:
        problems.append("the record's spec has no readable axes: which points should have run is unknown")
    elif missing[0]:
        problems.append(f"{missing[0]} of the spec's {missing[1]} point(s) not run (resume with --into)")
    if not points:
        problems.append("no points")
    problems += repeats.problems(record)
    if record.get("spec", {}).get("report") == "hazards":
        problems += hazards.problems(hazards.matrix(finished(points)))
    return problems
