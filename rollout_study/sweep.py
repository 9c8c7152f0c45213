"""Sweeps: one parameter file with lists under `sweep:`, one full study per point, each in a fresh process.

    name: hazards-tiny
    report: hazards            # the notebook that reads the sweep (notebooks/<report>.ipynb)
    sweep:
      update_path: [in-place, copy, assign]
    engines: [eager, graph]    # every other key: a StudyParams field shared by all points

The points are the product of the lists, each validated by `StudyParams` before any point runs.
A list entry may be a mapping of several parameters that go together, for example
`update: [{update_path: in-place, optimizer: sgd}, {update_path: copy, optimizer: adamw}]`
(the axis name is then only a label).
Each point's result is written to `points/<slug>-<hash>.json` as soon as it is done, and
`sweep.json` lists every point with its status, so an interrupted sweep keeps what it finished and,
run again into the same folder, skips points whose valid result is already there (the hash is of
the point's parameters). A point that fails or runs out of memory is recorded and the sweep goes on.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from .files import write_json_atomic
from .params import ParameterError, StudyParams
from .record import ResultError
from .result import Result

REPORTS = ("hazards",)
SWEEP_FILE = "sweep.json"
POINTS_FOLDER = "points"


@dataclass(frozen=True)
class SweepSpec:
    name: str
    report: str
    axes: dict  # parameter -> list of values, in file order
    base: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, values: dict, source: str = "sweep") -> "SweepSpec":
        if not isinstance(values, dict) or not isinstance(values.get("sweep"), dict) or not values["sweep"]:
            raise ParameterError(f"{source}: a sweep file needs a 'sweep:' mapping of parameter names to lists")
        values = dict(values)
        axes, report = values.pop("sweep"), values.pop("report", "hazards")
        if report not in REPORTS:
            raise ParameterError(f"{source}: report must be one of {', '.join(REPORTS)}; got {report!r}")
        if "name" in axes:
            raise ParameterError(f"{source}: 'name' cannot be swept (each point is named after its values)")
        for key, options in axes.items():
            if not isinstance(options, list) or not options:
                raise ParameterError(f"{source}: sweep.{key} must be a non-empty list, got {options!r}")
        spec = cls(str(values.get("name") or "sweep"), report, dict(axes), values)
        spec.points()  # every point validated before anything runs
        return spec

    @classmethod
    def from_yaml(cls, path: str) -> "SweepSpec":
        import yaml

        if not os.path.isfile(path):
            raise ParameterError(f"sweep file {path!r} does not exist")
        with open(path, encoding="utf-8") as handle:
            values = yaml.safe_load(handle)
        if isinstance(values, dict) and "name" not in values:
            values["name"] = Path(path).stem
        return cls.from_dict(values, source=path)

    def points(self) -> list[tuple[str, StudyParams]]:
        """(slug, parameters) per point, in the product's order."""
        keys = list(self.axes)
        out = []
        for combo in itertools.product(*(self.axes[k] for k in keys)):
            slug = "-".join(_slug(v) if isinstance(v, dict) else f"{k}={_slug(v)}" for k, v in zip(keys, combo))
            values = dict(self.base)
            for key, value in zip(keys, combo):
                values.update(value if isinstance(value, dict) else {key: value})
            values["name"] = f"{self.name}-{slug}"
            out.append((slug, StudyParams.from_dict(values, source=f"sweep {self.name} point {slug}")))
        return out

    def to_dict(self) -> dict:
        return {"name": self.name, "report": self.report, "sweep": self.axes, **self.base}


def _slug(value) -> str:
    if isinstance(value, dict):
        return "-".join(f"{k}={_slug(v)}" for k, v in value.items())
    text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    return "".join(ch if ch.isalnum() or ch in "._,-" else "_" for ch in text)


def point_hash(params: StudyParams) -> str:
    """Of everything that shapes the point's result (the name aside)."""
    values = {k: v for k, v in params.to_dict().items() if k != "name"}
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:12]


def _existing(folder: Path, file: str, params: StudyParams) -> bool:
    """A valid result of this point from the same code on the same kind of device: safe to keep on resume."""
    from .environment import git_commit

    try:
        result = Result.read(folder / file)
    except (FileNotFoundError, ResultError, ValueError):
        return False
    same_code = (result.metadata.get("git") or {}).get("commit") == git_commit().get("commit")
    return result.is_valid and same_code and result.metadata.get("device") == params.resolved_device()


def run_local(spec: SweepSpec, folder: Path, progress: bool = True, launcher=None) -> dict:
    """Every point one after another, each in a fresh process; returns the sweep record (also on disk).

    `launcher(params) -> Result` runs one point; the default is a fresh process running the whole study.
    """
    from .launch import STUDY_MODE, LaunchError, fresh_process
    from .pipeline import say

    launcher = launcher or (lambda params: fresh_process(params, mode=STUDY_MODE))
    (folder / POINTS_FOLDER).mkdir(parents=True, exist_ok=True)
    record = {"schema_version": 1, "spec": spec.to_dict(), "executor": "local", "points": []}
    began = time.perf_counter()
    for number, (slug, params) in enumerate(spec.points(), 1):
        file = f"{POINTS_FOLDER}/{slug}-{point_hash(params)}.json"
        entry = {"slug": slug, "hash": point_hash(params), "file": file, "params": params.to_dict()}
        if _existing(folder, file, params):
            entry.update(status="kept from an earlier run", wall_s=None)
        else:
            start = time.perf_counter()
            try:
                result = launcher(params)
                result.write(folder / file)
                entry["status"] = "valid" if result.is_valid else "invalid"
            except Exception as err:  # out of memory, a crash, a bad write: recorded, and the sweep goes on
                (folder / file).unlink(missing_ok=True)  # an older result of this point must not stand in for it
                entry.update(status="failed", error=(str(err) if isinstance(err, LaunchError)
                                                     else f"{type(err).__name__}: {err}")[-2000:])
            entry["wall_s"] = time.perf_counter() - start
        record["points"].append(entry)
        record["wall_s"] = time.perf_counter() - began
        write_json_atomic(record, folder / SWEEP_FILE)
        if progress:
            say(f"[{number}/{len(spec.points())}] {slug}: {entry['status']}")
    return record


def load(folder: str | os.PathLike) -> tuple[dict, list[tuple[dict, Result | None]]]:
    """The sweep record and, per point, its entry and result (None where the point failed)."""
    folder = Path(folder)
    with open(folder / SWEEP_FILE, encoding="utf-8") as handle:
        record = json.load(handle)
    points = []
    for entry in record.get("points", []):
        path = folder / entry["file"]
        ran = entry.get("status") != "failed" and path.is_file()
        points.append((entry, Result.read(path) if ran else None))
    return record, points


def validity_problems(folder: str | os.PathLike) -> list[str]:
    """Why a sweep folder is not publishable: failed or invalid points, and its report's own checks."""
    from . import hazards

    record, points = load(folder)
    problems = [f"point {e['slug']}: {e.get('error') or 'no result'}" for e, r in points if r is None]
    problems += [f"point {e['slug']}: {'; '.join(r.validity_problems())}" for e, r in points
                 if r is not None and r.validity_problems()]
    if not points:
        problems.append("no points")
    if record.get("spec", {}).get("report") == "hazards":
        problems += hazards.problems(hazards.matrix([r for _, r in points if r is not None]))
    return problems
