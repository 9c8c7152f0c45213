"""Sweeps: one parameter file with lists under `sweep:`, one full study per point, each in a fresh process.

    name: hazards-tiny
    report: hazards            # the notebook that reads the sweep (notebooks/<report>.ipynb)
    sweep:
      update_path: [in-place, copy, assign]
    repeat_alone: 0            # points run again one at a time afterwards, to tell contention (repeats.py)
    point_timeout_s: 3600      # optional: a point's process (and what it started) is killed after this long
    engines: [eager, graph]    # every other key: a StudyParams field shared by all points

The points are the product of the lists, each validated by `StudyParams` before any point runs.
A list entry may be a mapping of several parameters that go together, for example
`update: [{update_path: in-place, optimizer: sgd}, {update_path: copy, optimizer: adamw}]`
(the axis name is then only a label).
Each point's result is written to `points/<slug>-<hash>.json` (the slug cut at FILE_SLUG_BYTES) when done, and
`sweep.json` lists every point with its status, so an interrupted sweep keeps what it finished and,
run again into the same folder, skips points whose result is already there, valid or invalid for parity
(the hash is of the point's parameters; a failed point, or one whose result records a failure, runs
again). A point that fails, runs out of memory, outlives `point_timeout_s` or whose result cannot be
written is recorded and the sweep goes on. One sweep at a time per folder: an invocation holds the
folder's lock (sweep_lock.py) throughout; a second is refused, naming the holder.

Executors: `local` runs the points one after another; `ray` (sweep_ray.py) runs each as a Ray task with
one GPU (`num_gpus=1`; one CPU each on a machine without CUDA), on a local Ray instance started for the
sweep or on an existing cluster by address; points sharing a host are pinned to disjoint cores. Either
way each point runs in a fresh process of the sweep file's `launcher:` (launch.LAUNCHERS): a new
interpreter (`fresh`, the default) or a child of a fork server that imported the study once
(`fork-server`, forkserver.py); each entry of `sweep.json` names the one that ran it.
`sweep.json` records the sweep's wall time (start, end, seconds, executor, GPUs and workers), so
runs of one sweep on different machines can be compared (`rollout-study compare A B`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import itertools
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from .files import write_json_atomic
from .launch import LAUNCHERS
from .param_values import ParameterError
from .params import LATER_PARAMETERS, StudyParams
from .record import excerpt
from .result import Result
# Whether a sweep folder may be published: in sweep_validity.py, read from here by its callers
from .sweep_validity import missing_points, point_problems, validity_problems  # noqa: F401
# Which results a run into a sweep folder keeps: in sweep_resume.py, read from here by its callers
from .sweep_resume import KEPT, kept_on_resume, kept_status, was_kept  # noqa: F401
# A sweep folder read back (its record and its points' results): in sweep_load.py, read from here by its callers
from .sweep_load import REPORTS, SWEEP_FILE, finished, load, load_results, read_record  # noqa: F401

SWEEP_KEYS = ("name", "report", "sweep", "repeat_alone", "launcher", "point_timeout_s", "subset_of")
MAX_POINT_TIMEOUT_S = 2_000_000  # a point's wait polls in milliseconds, a C int: past about 2,147,483 s it overflows
POINTS_FOLDER = "points"


@dataclass(frozen=True)
class SweepSpec:
    name: str
    report: str
    axes: dict  # parameter -> list of values, in file order
    base: dict = field(default_factory=dict)
    repeat_alone: int = 0  # points run again alone after the sweep (repeats.py)
    launcher: str = "fresh"  # how each point's fresh process starts, under either executor (launch.LAUNCHERS)
    subset_of: str | None = None  # the full sweep file whose points these are (sweep_subset.py): a label
    point_timeout_s: float | None = None  # a point's process is killed after this long (launch.point_launcher)

    @classmethod
    def from_dict(cls, values: dict, source: str = "sweep") -> "SweepSpec":
        if not isinstance(values, dict) or not isinstance(values.get("sweep"), dict) or not values["sweep"]:
            raise ParameterError(f"{source}: a sweep file needs a 'sweep:' mapping of parameter names to lists")
        values = dict(values)
        axes, report = values.pop("sweep"), values.pop("report", "hazards")
        repeat, subset_of = values.pop("repeat_alone", 0), values.pop("subset_of", None)
        launcher, timeout = values.pop("launcher", "fresh"), values.pop("point_timeout_s", None)
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or not 0 < timeout <= MAX_POINT_TIMEOUT_S):
            raise ParameterError(f"{source}: point_timeout_s must be a number of seconds > 0 and <= "
                                 f"{MAX_POINT_TIMEOUT_S:,} (each point's process is killed after it; left out, no "
                                 f"limit), got {timeout!r}")
        if launcher not in LAUNCHERS:
            raise ParameterError(f"{source}: launcher must be one of {', '.join(LAUNCHERS)}, got {launcher!r}")
        if subset_of is not None and not isinstance(subset_of, str):
            raise ParameterError(f"{source}: subset_of must name a sweep file, got {subset_of!r}")
        if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 0:
            raise ParameterError(f"{source}: repeat_alone must be an integer >= 0 (points run again alone after "
                                 f"the sweep), got {repeat!r}")
        if report not in REPORTS:
            raise ParameterError(f"{source}: report must be one of {', '.join(REPORTS)}; got {report!r}")
        if "name" in axes:
            raise ParameterError(f"{source}: 'name' cannot be swept (each point is named after its values)")
        fields = {f.name for f in dataclasses.fields(StudyParams)}
        unknown = sorted(set(values) - fields)
        if unknown:  # else refused against the first point, as though its values were wrong
            raise ParameterError(f"{source}: unknown key(s) {', '.join(map(str, unknown))}; allowed: the sweep "
                                 f"file's own ({', '.join(SWEEP_KEYS)}) and the StudyParams fields, shared by every "
                                 f"point ({', '.join(sorted(fields))})")
        for key, options in axes.items():
            if not isinstance(options, list) or not options:
                raise ParameterError(f"{source}: sweep.{key} must be a non-empty list, got {options!r}")
            if any(isinstance(option, dict) and "name" in option for option in options):
                raise ParameterError(f"{source}: sweep.{key}: 'name' cannot be swept (each point is named after its "
                                     "values)")
        name = values.get("name", "sweep")
        if not isinstance(name, str) or not name.strip():
            raise ParameterError(f"{source}: name must be a non-empty string (left out: 'sweep'), got {name!r}")
        spec = cls(name, report, dict(axes), values, repeat, launcher, subset_of, timeout)
        points = spec.points()  # every point validated before anything runs
        total = len(points)
        seen: dict[str, str] = {}
        studies: dict[str, str] = {}
        for slug, params in points:  # two entries of one axis that are the same value (0.0001 and 1e-4)
            for key in (point_hash(params), slug):
                if key in seen:
                    raise ParameterError(f"{source}: points {seen[key]!r} and {slug!r} have the same parameters or "
                                         "name; allowed: each value of an axis once")
                seen[key] = slug
            study = same_study(params)
            if study in studies:  # auto and what it reads as, both, or two names of one policy list
                raise ParameterError(f"{source}: points {studies[study]!r} and {slug!r} are one study once 'auto' "
                                     "and the policy names are read (dtype auto under a named device, a synthetic "
                                     "model's prompts auto: random, 32 long; both: recapture, reuse); allowed: "
                                     "each study once")
            studies[study] = slug
        if repeat > total:
            raise ParameterError(f"{source}: repeat_alone must be at most the sweep's {total} point(s), got {repeat}")
        return spec

    @classmethod
    def from_yaml(cls, path: str) -> "SweepSpec":
        from .files import read_yaml

        values = read_yaml(path, "sweep file")  # bad YAML or bytes: a clear error, exit 2
        if isinstance(values, dict) and "subset_of" in values:  # some of another file's points (sweep_subset.py)
            from .sweep_subset import resolve

            values = resolve(values, path)
        if isinstance(values, dict) and "name" not in values:
            values["name"] = Path(path).stem
        return cls.from_dict(values, source=path)

    def points(self) -> list[tuple[str, StudyParams]]:
        """(slug, parameters) per point, in the product's order: validated once per spec (each point's StudyParams,
        reading a checkpoint's config and weights' headers), however many of a sweep's steps ask."""
        return list(self._points)

    @functools.cached_property
    def _points(self) -> tuple[tuple[str, StudyParams], ...]:
        keys = list(self.axes)
        out = []
        for combo in itertools.product(*(self.axes[k] for k in keys)):
            slug = "-".join(_slug(v) if isinstance(v, dict) else f"{k}={_slug(v)}" for k, v in zip(keys, combo))
            values = dict(self.base)
            for key, value in zip(keys, combo):
                values.update(value if isinstance(value, dict) else {key: value})
            values["name"] = f"{self.name}-{slug}"
            out.append((slug, StudyParams.from_dict(values, source=f"sweep {self.name} point {slug}")))
        return tuple(out)

    def to_dict(self) -> dict:
        repeat = {"repeat_alone": self.repeat_alone} if self.repeat_alone else {}
        subset = {"subset_of": self.subset_of} if self.subset_of else {}
        launcher = {"launcher": self.launcher} if self.launcher != "fresh" else {}
        timeout = {"point_timeout_s": self.point_timeout_s} if self.point_timeout_s is not None else {}
        return {"name": self.name, "report": self.report, **subset, **repeat, **launcher, **timeout,
                "sweep": self.axes, **self.base}


def _slug(value) -> str:
    if isinstance(value, dict):
        return "-".join(f"{k}={_slug(v)}" for k, v in value.items())
    text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    return "".join(ch if ch.isalnum() or ch in "._,-" else "_" for ch in text)


# A long slug (a local checkpoint path) once made a name past the file system's 255 bytes, and the sweep stopped.
# Over 121, the longest published slug: a name at or under the cap is a resume key and must not move.
FILE_SLUG_BYTES = 200


def point_file(folder_name: str, slug: str, digest: str) -> str:
    """A point's (or a repeat's) result file, relative to the sweep folder: `<folder_name>/<slug>-<digest>.json`."""
    cut = slug.encode()[:FILE_SLUG_BYTES].decode("utf-8", "ignore")  # bytes, as the file system counts
    return f"{folder_name}/{cut}-{digest}.json"


def point_hash(params: StudyParams) -> str:
    """Of everything that shapes the point's result (the name aside); a parameter added after sweeps were
    published (LATER_PARAMETERS) at the value every earlier point ran with leaves the hash as it was, so published
    and pinned sweeps keep their file names and resume."""
    values = {k: v for k, v in params.to_dict().items()
              if k != "name" and not (k in LATER_PARAMETERS and v == LATER_PARAMETERS[k])}
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:12]


def same_study(params: StudyParams) -> str:
    """What a point measures once the `auto`s that read the same on every host are read: dtype under a named device,
    a synthetic model's prompts (random) and their length (32), and its policy named in full. Two points alike in it
    are one study twice, under two hashes. device auto, and dtype under it, stay as written: what they read as
    depends on the host that runs the point (another under Ray), not the one that reads the file."""
    values = {**params.to_dict(), "policy": list(params.policies)}
    if params.device != "auto":
        values["dtype"] = params.resolved_dtype(params.device)
    if params.is_synthetic:
        values["prompts"] = params.resolved_prompts(False)
        if values["prompts"] == "random":
            values["prompt_len"] = params.resolved_prompt_len()
    values.pop("name")
    return json.dumps(values, sort_keys=True, default=str)


def _now() -> str:
    from .environment import now  # imports torch: only once a sweep runs

    return now()


def earlier_walls(folder: Path) -> list[dict]:
    """The wall time of each invocation recorded in a sweep folder, oldest first."""
    try:
        with open(folder / SWEEP_FILE, encoding="utf-8") as handle:
            return invocations(json.load(handle).get("wall"))
    except (OSError, ValueError):
        return []


def invocations(wall: dict | None) -> list[dict]:
    """The invocations of a sweep record's `wall` block, oldest first (the latest is the block itself)."""
    if not wall:
        return []
    return [*wall.get("earlier", []), {k: v for k, v in wall.items() if k not in ("earlier", "total_seconds")}]


def settle(folder: Path, entry: dict, result: Result | None = None, error: BaseException | None = None,
           code: str | None = None) -> None:
    """A point's (or a repeat's) outcome: its result written and its status, or why it failed. `code`: the sweep's
    code fingerprint; a result that names another is this point's failure (other_code)."""
    from .launch import LaunchError

    if result is not None and (problem := other_code(result, code)):
        result, error = None, RuntimeError(problem)
    why = None
    if result is not None:
        try:
            result.write(folder / entry["file"])
            entry["status"] = "valid" if result.is_valid else "invalid"
        except Exception as err:  # the disk full, say: this point's failure, and the sweep goes on
            why = excerpt(f"its result could not be written to {entry['file']}: {type(err).__name__}: {err}")
    elif error is not None:
        # A LaunchError's message is already the head and tail of the process's output (launch.fresh_process)
        why = str(error) if isinstance(error, LaunchError) else excerpt(f"{type(error).__name__}: {error}")
    if why is not None:
        with contextlib.suppress(OSError):  # where the file name itself failed
            (folder / entry["file"]).unlink(missing_ok=True)  # an older result must not stand in for it
        entry.update(status="failed", error=why)


def other_code(result: Result, code: str | None) -> str | None:
    """Why a point's result does not count where it names other measuring code than the sweep's: a Ray cluster
    runs the package its nodes have installed, which need not be the driver's (nor need the files of a long local
    sweep stay as they were). Results that predate the fingerprint, or a sweep without one, are not judged."""
    recorded = (result.metadata.get("git") or {}).get("code_sha256")
    if not (recorded and code) or recorded == code:
        return None
    return (f"the point ran other code (fingerprint {recorded[:12]}) than the sweep's ({code[:12]}): install this "
            "code on every node the sweep runs on")


class _Record:
    """sweep.json as the points finish: written after each one, so an interrupted sweep keeps them."""

    def __init__(self, spec: SweepSpec, folder: Path, executor: str, progress: bool, gpus: int, workers: int):
        (folder / POINTS_FOLDER).mkdir(parents=True, exist_ok=True)
        self.folder, self.progress, self.total = folder, progress, len(spec.points())
        # This invocation's wall time, and the earlier invocations' of a resumed sweep (one session
        # may not fit a sweep): their sum is the time the sweep took to run, pauses between them aside.
        earlier = earlier_walls(folder)
        wall = {"executor": executor.split()[0], "gpus": gpus, "workers": workers, "start": _now(), "end": None,
                "seconds": 0.0, "points_run": 0, "points_kept": 0, "earlier": earlier,
                "total_seconds": sum(w.get("seconds") or 0.0 for w in earlier)}
        self.data = {"schema_version": 1, "spec": spec.to_dict(), "executor": executor, "wall": wall, "points": []}
        self.began = time.perf_counter()
        self.code: str | None = None  # the sweep's code fingerprint, taken by pending()

    def pending(self, spec: SweepSpec) -> list[tuple[dict, StudyParams]]:
        """Entries of the points to run; those with a result to keep are recorded at once."""
        from .environment import git_commit

        todo, current = [], git_commit()  # once: two git processes and a hash of the package each time
        self.code = current.get("code_sha256")
        for order, (slug, params) in enumerate(spec.points()):
            digest = point_hash(params)
            file = point_file(POINTS_FOLDER, slug, digest)
            entry = {"order": order, "slug": slug, "hash": digest, "file": file, "params": params.to_dict()}
            kept = kept_status(self.folder, file, params, current)
            if kept:
                self.done(entry, status=kept, wall_s=None)
            else:
                todo.append((entry, params))
        return todo

    def done(self, entry: dict, result: Result | None = None, error: BaseException | None = None, **fields) -> None:
        from .pipeline import say

        entry.update(fields)
        settle(self.folder, entry, result, error, self.code)
        self.data["points"].append(entry)
        self.data["wall_s"] = time.perf_counter() - self.began
        wall = self.data["wall"]
        wall.update(end=_now(), seconds=self.data["wall_s"],
                    total_seconds=self.data["wall_s"] + sum(w.get("seconds") or 0.0 for w in wall["earlier"]))
        wall["points_kept" if was_kept(entry) else "points_run"] += 1
        write_json_atomic(self.data, self.folder / SWEEP_FILE)
        if self.progress:
            say(f"[{len(self.data['points'])}/{self.total}] {entry['slug']}: {entry['status']}")


def run_local(spec: SweepSpec, folder: Path, progress: bool = True, launcher=None) -> dict:
    """Every point one after another, each in a fresh process; returns the sweep record (also on disk).

    `launcher(params) -> Result` runs one point; the default is the spec's (a fresh process running the whole
    study: a new interpreter, or a child of the fork server, killed with what it started after the spec's
    point_timeout_s: recorded failed, and the sweep goes on), and each entry names the one that ran it.
    Holds the folder's lock (sweep_lock.py): SweepLockedError where another process sweeps into it.
    """
    from .sweep_lock import locked

    with locked(folder):
        return _run_local(spec, folder, progress, launcher)


def _run_local(spec: SweepSpec, folder: Path, progress: bool, launcher) -> dict:
    import torch

    from .launch import sweep_launcher

    kind, launcher = sweep_launcher(spec.launcher, launcher, timeout_s=spec.point_timeout_s)
    record = _Record(spec, folder, "local", progress, gpus=int(torch.cuda.is_available()), workers=1)
    run = local_runner(launcher)
    for entry, params in record.pending(spec):
        result, error, wall_s, _ = run(params)
        record.done(entry, result, error, wall_s=wall_s, launcher=kind, executor="local")
    return record.data


def local_runner(launcher):
    """`run(params, side=None) -> (result, error, wall seconds, placement)` of one point by `launcher` in this
    host's fresh process, as sweep_ray's tasks reply (placement: none recorded locally); the points' and the
    repeats' runner under the local executor."""
    def run(params: StudyParams, side: dict | None = None):
        start = time.perf_counter()
        try:
            return launcher(params), None, time.perf_counter() - start, {}
        except Exception as err:  # out of memory, a crash: recorded, and the sweep goes on
            return None, err, time.perf_counter() - start, {}

    return run
