"""`rollout-study sweep`: validate a sweep file, run its points (local or Ray), repeat the sampled
points alone, build the report, and name the folder; the steps live in sweep.py and repeats.py."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from .param_values import ParameterError

DESCRIPTION = (
    "One study per point of a sweep file, each in a fresh process, then the sweep's report (report: hazards, "
    "the update-path matrix; or sweep, curves over batch size and new tokens per model). Keys of the file: name, "
    "report, sweep (parameter -> list of values, or of mappings of parameters that go together), repeat_alone (N "
    "points run again one at a time after the sweep, to tell whether running side by side moved them), and any "
    "StudyParams field shared by every point; point_timeout_s (seconds, at most 2,000,000: a point's process is "
    "killed after it and the point recorded failed). One sweep at a time per folder (a lock). Writes "
    "runs/<name>-<time>/ with sweep.json (points, wall time), points/, repeats/, summary.md and report.html.")


def command(args) -> list[str]:
    """`rollout-study sweep`: validate, run the points (local or Ray), build the report; returns the problems."""
    from . import publish
    from .files import writable
    from .sweep import SWEEP_FILE, SweepSpec, load
    from .sweep_lock import locked

    spec = SweepSpec.from_yaml(args.sweep_file)  # every point validated before any runs
    points = spec.points()
    if spec.report == "hazards":
        matrix_points(points)
    if args.executor == "ray":
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise ParameterError("--executor ray needs the ray package (pip install ray==2.60.0); allowed "
                                 "without it: --executor local")
        if args.address:
            reachable(args.address)
    elif args.address:
        raise ParameterError("--address needs --executor ray")
    if not args.address:  # every point runs on this host: one asking for a device it lacks is refused now
        for slug, params in points:
            params.resolved_device()
    publish.check_name(spec.name, "name")
    for source in args.keep_from:
        if not (Path(source) / SWEEP_FILE).is_file():
            raise ParameterError(f"--keep-from {source!r}: not a sweep folder (no {SWEEP_FILE}); allowed: a "
                                 "sweep folder whose points share parameters with this sweep's")
        load(source)  # a record or a point's result that does not read is refused here, before the new folder
    if args.into:  # resume: points with a result from the same code in the folder are not run again (sweep.kept_status)
        folder = Path(args.into).resolve()
        if not (folder / SWEEP_FILE).is_file():
            raise ParameterError(f"--into {args.into!r}: not a sweep folder (no {SWEEP_FILE})")
        earlier = load(folder)[0]["spec"]
        if (earlier.get("name"), earlier.get("report")) != (spec.name, spec.report):
            held = (f"sweep {earlier.get('name')!r}, not {spec.name!r}" if earlier.get("name") != spec.name else
                    f"sweep {spec.name!r} with report {earlier.get('report')!r}, not {spec.report!r}")
            raise ParameterError(f"--into {args.into!r}: that folder holds {held}; allowed: a folder of the same "
                                 "sweep")
        if any(Path(source).resolve() == folder for source in args.keep_from):
            raise ParameterError("--keep-from: the folder the sweep resumes (--into); allowed: another sweep folder")
    else:
        problem = writable(Path(args.output_root) / "probe.json")
        if problem:
            raise ParameterError(f"--output-root {args.output_root!r}: {problem}")
    if not args.address:  # the points' model files are this host's (under Ray's cluster, its nodes')
        preflight_points(points)
    if not args.into:
        folder = publish.start_run(Path(args.output_root).resolve(), spec.name)
    with locked(folder) as lock:  # one sweep per folder, through the report; refused before any work
        return _run(args, spec, folder, lock)


def matrix_points(points: list) -> None:
    """A hazard sweep's points as its matrix reads them: a row per point, named by its update path, so no two points
    share one (a sweep over seed as well merged their rows), and cells from an engine beside eager (the reference);
    points: (slug, parameters) as SweepSpec.points gives them."""
    first: dict[str, str] = {}
    for slug, params in points:
        if params.update_path in first:
            raise ParameterError(f"report: hazards draws one matrix row per update path, and points "
                                 f"{first[params.update_path]!r} and {slug!r} both sync by {params.update_path!r}; "
                                 "allowed: each update path in one point, or report: sweep for curves over other "
                                 "parameters")
        first[params.update_path] = slug
    if not any(engine != "eager" for engine in points[0][1].engines):
        raise ParameterError(f"report: hazards needs an engine beside eager (its cells are the graph engines' "
                             f"policies and the peer engines); engines is {list(points[0][1].engines)}")


def preflight_points(points: list) -> None:
    """cli_params.preflight for each point (its chat prompts against its prompt_len and the model's positions), a
    tokenizer read once per model: else each such point loads its model in a process of its own, and fails there."""
    from .cli_params import preflight

    tokenizers: dict = {}
    for slug, params in points:
        try:
            preflight(params, tokenizers)
        except ParameterError as err:
            raise ParameterError(f"point {slug}: {err}") from None


def reachable(address: str, timeout_s: float = 10.0) -> None:
    """Refuse a cluster address nothing answers at: ray.init retries one for minutes before it gives up, and the
    sweep would have made its folder by then. 'auto' is the cluster Ray itself would find (RAY_ADDRESS, the last
    `ray start` on this host, a running one); ray:// client addresses (where Ray's client is installed) are left to
    Ray."""
    import importlib.util
    import socket

    named = repr(address)
    if address == "auto":
        address = _auto_address()
        if address is None:
            return
        named = f"'auto' (Ray finds {address!r} here)"
    host, _, port = address.rpartition(":")
    if "://" in address:
        if not address.startswith("ray://"):
            raise ParameterError(f"--address {named}: allowed: HOST:PORT of a Ray cluster's head, 'auto', or "
                                 "ray://HOST:PORT (Ray's client)")
        if importlib.util.find_spec("grpc") is None:  # what ray[client] adds
            raise ParameterError(f"--address {named}: a ray:// address needs Ray's client (pip install "
                                 "'ray[client]==2.60.0'); allowed without it: HOST:PORT of the head, or 'auto'")
        return
    if not host or not port.isdigit():
        raise ParameterError(f"--address {named}: expected HOST:PORT of a Ray cluster's head (or 'auto')")
    try:  # an IPv6 host as Ray writes it, [::1]:6379, without the brackets
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as err:
        raise ParameterError(f"--address {named}: nothing answers there ({err}); allowed: the HOST:PORT of a "
                             "running Ray cluster's head (ray start --head prints it)") from None


def _auto_address() -> str | None:
    """HOST:PORT of the cluster `--address auto` reaches, found as ray.init finds it, None where this Ray cannot say
    (a private function, which a later Ray may move); refused where there is none, which ray.init would say only
    after the sweep had made its folder."""
    try:
        from ray._private.services import get_ray_address_from_environment
    except ImportError:
        return None
    try:
        found = get_ray_address_from_environment("auto", None)
    except ConnectionError:
        raise ParameterError("--address 'auto': no running Ray cluster found (RAY_ADDRESS unset or 'auto', no `ray "
                             "start` on this host); allowed: 'auto' with one running, HOST:PORT of a cluster's head, "
                             "or no --address (a local instance started for the sweep)") from None
    except Exception:  # a later Ray's other signature, or /tmp/ray unreadable: ray.init will say
        return None
    # RAY_ADDRESS may hold anything an explicit --address may (ray://, or the http:// of `ray job submit`), and
    # gets the same checks; 'local' and the like start an instance of their own
    return found if isinstance(found, str) and ":" in found else None


def _run(args, spec, folder: Path, lock) -> list[str]:
    """The sweep in its locked folder: --keep-from, the points, the repeats, the report, the folder's name."""
    from . import pipeline, publish, repeats
    from .pipeline import say
    from .sweep import SWEEP_FILE, load, point_problems, run_local, validity_problems
    from .sweep_ray import run_ray

    for source in args.keep_from:
        kept = keep_from(Path(source), folder, spec)
        if not args.quiet:
            say(f"--keep-from: {len(kept)} point(s) of {source} copied in (kept if from the same code)")
    try:
        if args.executor == "ray":
            run_ray(spec, folder, address=args.address, progress=not args.quiet)
        else:
            run_local(spec, folder, progress=not args.quiet)
        if spec.repeat_alone and args.executor != "ray":  # run_ray repeats them as Ray tasks, before Ray stops
            repeats.run(spec, folder, progress=not args.quiet)
    except BaseException:
        if (folder / SWEEP_FILE).is_file():
            say(f"interrupted; finished points are kept in {folder} (resume with --into)")
        elif not args.into:  # nothing recorded (Ray unreachable, say): --into would refuse the empty folder
            shutil.rmtree(folder, ignore_errors=True)
            say(f"the sweep stopped before any point was recorded; nothing to resume ({folder} removed)")
        raise
    renamed = not args.into or folder.name.startswith(f".{spec.name}.partial-")  # a resumed hidden partial one too
    with pipeline.kernel_environment():
        problems = pipeline.sweep_report_step(
            folder, spec.report, progress=not args.quiet,
            folder_shown="the sweep folder (renamed when the sweep ends: 'sweep folder:' below)" if renamed else None)
    if renamed:
        folder = publish.finish_run(folder, spec.name)
        lock.moved(folder)
    publish.write_index(folder.parent)
    loaded = load(folder)  # once: every point's result file, for the validity and the findings alike
    problems += validity_problems(folder, loaded)
    say(f"sweep folder: {folder}")
    findings = point_problems(loaded[1]) if spec.report == "sweep" else []
    if findings:  # a curve sweep's failed and invalid points are its findings, not errors: said all the same
        say(f"{len(findings)} point(s) failed or are invalid (listed in the report, never plotted); "
            f"first: {findings[0]}")
    for problem in problems:
        say(f"error: {problem}")
    return problems


def keep_from(source: Path, folder: Path, spec) -> list[str]:
    """Copy into `folder` the results in sweep folder `source` of points this sweep has; returns their files.

    For a subset of a long sweep (sweep_subset.py: a smoke run of its corner, one model's points): a
    point is the same point when its parameters are (the file name holds their hash), so its result need
    not be measured twice. The resume rule then decides, as for any result in the folder, whether it is
    kept (same code, torch, Transformers, device and GPU model) or run again. `source`'s invocations join
    this sweep's, named by its sweep and in the order all of them ran, so the time that measured the kept
    points stays in the sweep's wall time. Points `folder` already holds are not overwritten. `source` is
    a sweep folder other than `folder`, as `command` checks before any work.
    """
    from .files import write_json_atomic
    from .sweep import POINTS_FOLDER, SWEEP_FILE, earlier_walls, invocations, load, point_file, point_hash

    name = load(source)[0]["spec"].get("name")
    files = [point_file(POINTS_FOLDER, slug, point_hash(params)) for slug, params in spec.points()]
    copied = [file for file in files if (source / file).is_file() and not (folder / file).exists()]
    if not copied:
        return []
    (folder / POINTS_FOLDER).mkdir(parents=True, exist_ok=True)
    for file in copied:
        shutil.copy2(source / file, folder / file)
    # Named by the sweep that ran them (a subset's own copied-in invocations keep their first name)
    walls = [{**wall, "sweep": wall.get("sweep") or name} for wall in earlier_walls(source)]
    path = folder / SWEEP_FILE
    if not walls:  # a record without wall time (none was ever written so): nothing to add
        return copied
    record = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else \
        {"schema_version": 1, "spec": spec.to_dict(), "executor": walls[-1].get("executor"), "points": []}
    known = invocations(record.get("wall"))
    # Each invocation counts once: one copied in before, or this sweep's own come back through a subset that
    # kept them (the folder's own blocks carry no name: theirs is this sweep's)
    counted = {(w.get("sweep") or spec.name, w.get("start")) for w in known}
    merged = sorted([*known, *(w for w in walls if (w["sweep"], w.get("start")) not in counted)],
                    key=lambda w: w.get("start") or "")  # in the order they ran
    record["wall"] = {**merged[-1], "earlier": merged[:-1],
                      "total_seconds": sum(w.get("seconds") or 0.0 for w in merged)}
    write_json_atomic(record, path)
    return copied
