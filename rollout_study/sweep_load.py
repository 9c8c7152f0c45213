"""A sweep folder read back: its record (sweep.json, checked as `sweep` writes it, else bad input) and each point's
result, in the spec's order. sweep.py re-exports these."""
from __future__ import annotations

import json
import os
from pathlib import Path

from .param_values import ParameterError
from .record import ResultError
from .result import Result

REPORTS = ("hazards", "sweep")
SWEEP_FILE = "sweep.json"


def read_record(folder: str | os.PathLike) -> dict:
    """A sweep folder's sweep.json, as `sweep` writes it: else bad input (ParameterError), named, before anything
    reads a field of it (every command that takes a sweep folder reads it here, through `load`)."""
    path = Path(folder) / SWEEP_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ParameterError(f"{path}: not valid JSON: {err}") from None
    except (ValueError, OSError) as err:  # not UTF-8, not readable, not there
        raise ParameterError(f"{path}: cannot be read: {err}") from None
    spec = record.get("spec") if isinstance(record, dict) else None
    if not isinstance(spec, dict) or spec.get("report") not in REPORTS or not isinstance(spec.get("name"), str):
        raise ParameterError(f"{path}: not a sweep record: it needs a 'spec' mapping with its name and a report, "
                             f"one of {', '.join(REPORTS)}, as `sweep` writes it")
    points = record.get("points", [])
    if not isinstance(points, list) or not all(
            isinstance(p, dict) and isinstance(p.get("file"), str) and isinstance(p.get("slug"), str)
            and isinstance(p.get("order", 0), int) for p in points):
        raise ParameterError(f"{path}: 'points' must be a list of entries, each naming its point (slug), its "
                             "result file (file) and, where it has one, its place in the spec (order, an integer)")
    for key in ("wall", "repeats"):
        if not isinstance(record.get(key) or {}, dict):
            raise ParameterError(f"{path}: '{key}' must be a mapping, as `sweep` writes it")
    return record


def load(folder: str | os.PathLike) -> tuple[dict, list[tuple[dict, Result | None]]]:
    """The sweep record (read_record) and, per point, its entry and result (None where the point failed)."""
    folder = Path(folder)
    record = read_record(folder)
    points = []
    # In the spec's order, whatever order the points finished in (Ray runs them side by side).
    for entry in sorted(record.get("points", []), key=lambda e: e.get("order", 0)):
        path = folder / entry["file"]
        if path.is_symlink() and not path.exists():  # else read as a point that never ran, and run again
            raise ResultError(f"{path} links to {os.readlink(path)}, which is not there: the report it names "
                              "(publish.link_copies) was moved or removed")
        ran = entry.get("status") != "failed" and path.is_file()
        points.append((entry, Result.read(path) if ran else None))
    return record, points


def load_results(folder: str | os.PathLike) -> tuple[dict, list[Result]]:
    """The sweep record and the results of the points that finished (what every report reads)."""
    record, points = load(folder)
    return record, finished(points)


def finished(points: list[tuple[dict, Result | None]]) -> list[Result]:
    return [result for _, result in points if result is not None]
