"""Bring a sweep pack home from the device: an unfinished sweep into sweeps-in-progress/, a finished one into runs/.

Usage, from the repository root: python3 tools/keep_sweep.py PACK.tgz   (PACK: what `h200-reports.sh sweep-pack`
wrote, `$SWEEP-runs.tgz`)

A long sweep spans sessions, and only what is committed outlives one: runs/ is git-ignored, and a new session starts
from a fresh checkout. So the unfinished folder (sweep.json, points/ and repeats/, the raw results) is kept packed,
as sweeps-in-progress/<sweep>.tgz (packed: the tracked tree counts towards the device's carry limit, and the points'
JSON packs about 8x), and `h200-reports.sh resume` resumes it from there. Those points are not results until the
sweep finishes and is published: the finished folder goes to runs/ for `python -m rollout_study publish`, after
which sweeps-in-progress/<sweep>.tgz (and its .pin) is removed with the `git rm` this prints.

Nothing is written unless the whole pack can be taken:
- a kept sweep is never replaced by one with fewer results (points and repeats) measured by the code it is held to
  (its pin's, else the code as it is now; an older pack,
  from an earlier call of the same session, say, would throw measured points away);
- a pack's unfinished sweep must pass `problems` (what tests/test_sweeps_in_progress.py holds every kept sweep
  to), so what is kept does not turn CI red;
- a point file the sweep does not list was not kept by the resume that wrote the pack (measured by other code,
  or failed): it would run again, and is left out.
"""
from __future__ import annotations

import io
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
import zlib
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import sweep_pin  # noqa: E402 -- beside this file, found through the line above

IN_PROGRESS = "sweeps-in-progress"
KEPT_FOLDER = ".{name}.partial-kept"  # the name a kept sweep unpacks to: a resumable partial folder


class KeepError(Exception):
    pass


def _record(folder: Path) -> dict:
    try:
        with open(folder / "sweep.json", encoding="utf-8") as handle:
            record = json.load(handle)
        if not all(isinstance(entry.get("file"), str) for entry in _entries(record)):
            raise ValueError("a point entry without its file")
        return record
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise KeepError(f"{folder.name}: not a sweep folder ({type(err).__name__}: {err})") from err


def _entries(record: dict) -> list[dict]:
    """The sweep's points and the repeats of some of them run alone (repeats.py), each with its result file."""
    return record["points"] + ((record.get("repeats") or {}).get("points") or [])


def _fingerprint(path: Path) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)["metadata"]["git"]["code_sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _measured(folder: Path, fingerprint: str) -> list[str]:
    """The files of a sweep folder's points (and repeats) with a result measured by the code of `fingerprint`
    (failed ones have none)."""
    return [entry["file"] for entry in _entries(_record(folder)) if entry.get("status") != "failed"
            and _fingerprint(folder / entry["file"]) == fingerprint]


def measured_points(folder: Path, fingerprint: str) -> int:
    """How many points (and repeats) of a sweep folder have a result measured by the code of `fingerprint`."""
    return len(_measured(folder, fingerprint))


def held_code(name: str, root: Path = ROOT) -> tuple[str, str]:
    """(the fingerprint of the measuring code whose points the kept sweep `name` counts, that code in words): its
    pin's (tools/sweep_pin.py), else this package's as it is now."""
    from rollout_study.environment import code_fingerprint

    try:
        pinned = sweep_pin.read(name, root)
    except sweep_pin.PinError as err:
        raise KeepError(str(err)) from err
    if pinned:
        return pinned["code_sha256"], f"its pinned code {pinned['code_sha256'][:8]}"
    return code_fingerprint(), "this code"


def sweep_name(folder: Path) -> str:
    """The sweep's name as its sweep.json records it, checked to be a name and to be the folder's."""
    from rollout_study.publish import PublishError, check_name

    try:
        name = check_name(_record(folder)["spec"]["name"], "the sweep's name")
    except (KeyError, TypeError, PublishError) as err:
        raise KeepError(f"{folder.name}: {err}") from err
    finished = re.fullmatch(rf"{re.escape(name)}-\d{{8}}-\d{{6}}(-\d+)?", folder.name)
    if not (folder.name.startswith(f".{name}.partial-") or finished):
        raise KeepError(f"{folder.name}: holds sweep {name!r}, which its name does not say")
    return name


class Held(NamedTuple):
    """What a kept sweep's points are held to: the sweep's name and report, its point files (None where they
    cannot be known: a pinned commit a shallow clone lacks), the measuring code's fingerprint, and in words
    where the points come from, what that code is, and what to revert where a point is of other code."""
    name: str | None
    report: str | None
    files: set | None
    fingerprint: str
    where: str
    code: str
    fix: str


def _held(name: str, record: dict, root: Path, shallow: bool) -> tuple[Held | None, list[str]]:
    """(what the kept sweep `name` is held to, problems); None with the problems where nothing can be held."""
    from rollout_study import environment
    from rollout_study.sweep import SweepSpec, point_hash

    try:
        pinned = sweep_pin.read(name, root)
    except sweep_pin.PinError as err:
        return None, [str(err)]
    if not pinned:
        try:
            spec = SweepSpec.from_yaml(str(root / "params" / f"{name}.yaml"))
        except Exception as err:  # a missing or invalid file: whatever it raised is the reason
            return None, [f"params/{name}.yaml: {err}"]
        fingerprint = environment.code_fingerprint(str(root))
        return Held(spec.name, spec.report, {f"{slug}-{point_hash(params)}.json" for slug, params in spec.points()},
                    fingerprint, f"params/{name}.yaml", f"now {fingerprint[:8]}",
                    "the change to the measuring code"), []
    # Pinned: the pinned commit's own code names the points and measures them (tools/sweep_pin.py)
    pin, commit, fingerprint = f"{sweep_pin.IN_PROGRESS}/{name}.pin", pinned["commit"], pinned["code_sha256"]
    held = Held(record["spec"].get("name"), record["spec"].get("report"), None, fingerprint,
                f"params/{name}.yaml at {commit[:12]}", f"pinned to {fingerprint[:8]}", pin)
    try:
        asked = sweep_pin.pinned_sweep(commit, name, root)
    except sweep_pin.PinError as err:
        # a shallow clone lacks the commit: the points are held to the pin's fingerprint only
        return (held, []) if shallow else (None, [f"{pin}: {err}"])
    found = [] if asked["code_sha256"] == fingerprint else [
        f"{pin}: commit {commit[:12]}'s code is {asked['code_sha256'][:8]}, the pin says {fingerprint[:8]}"]
    return held._replace(name=asked["name"], report=asked["report"], files=set(asked["files"])), found


def problems(folder: Path, root: Path = ROOT) -> list[str]:
    """Why an unfinished sweep folder cannot be kept: its points are not those of params/<name>.yaml, or would all
    run again at the resume (measured by other code, or another Transformers than the device's wheels). For a
    pinned sweep, the parameter file and the code are the pinned commit's (from root's history), read by that
    commit's own code."""
    from rollout_study import environment
    from rollout_study.publish import code_problems
    from rollout_study.result import Result

    record, name = _record(folder), sweep_name(folder)
    shallow = environment._git("rev-parse", "--is-shallow-repository", root=str(root)) == "true"
    held, found = _held(name, record, root, shallow)
    if held is None:
        return found
    if (held.name, held.report) != (record["spec"].get("name"), record["spec"].get("report")):
        found.append(f"{held.where} is sweep {held.name!r} ({held.report}), the folder's is another")
    listed = {entry["file"] for entry in _entries(record)}
    on_disk = {f"{kind}/{p.name}" for kind in ("points", "repeats") if (folder / kind).is_dir()
               for p in (folder / kind).iterdir()}
    found += [f"{file}: on disk, not listed in sweep.json" for file in sorted(on_disk - listed)]
    found += [f"{file}: no longer a point of {held.where}" for file in sorted(listed)
              if held.files is not None and file.split("/", 1)[-1] not in held.files]
    wheels = (root / "tools" / "device-wheels.txt").read_text()
    pin = re.search(r"^transformers==(\S+?)\r?$", wheels, re.M)
    if pin is None:
        return found + ["tools/device-wheels.txt pins no transformers: the device's version is unknown"]
    transformers = pin.group(1)
    results = []
    for file in sorted(on_disk & listed):
        try:
            result = Result.read(folder / file)
        except Exception as err:  # a point file no reader takes: the resume would measure it again
            found.append(f"{file}: not a result ({type(err).__name__}: {err})")
            continue
        recorded = (result.metadata.get("git") or {}).get("code_sha256") or "none"
        if recorded != held.fingerprint:
            found.append(f"{file}: measured by code {recorded[:8]}, the code is {held.code}: it would run "
                         f"again (revert {held.fix}, or drop the kept sweep knowingly)")
        if (result.metadata.get("software") or {}).get("transformers") != transformers:
            found.append(f"{file}: measured with another Transformers than tools/device-wheels.txt's {transformers}")
        results.append(result)
    return found + ([] if shallow else code_problems(results))  # a shallow clone lacks the commits they name


def points_left(folder: Path, fingerprint: str, root: Path = ROOT) -> Left | None:
    """The sweep's points the resume will run, all its points, and those run again (`Left`), by its parameter file
    (a pinned sweep's: the pinned commit's); None where that cannot be read. Run: those with no result measured by
    the code of `fingerprint`, or one the resume does not keep (a failure recorded). Repeats not counted: they run
    after."""
    held, _ = _held(sweep_name(folder), _record(folder), root, shallow=True)  # a missing commit: not known
    if held is None or held.files is None:
        return None
    measured = [file for file in _measured(folder, fingerprint) if file.startswith("points/")]
    done = {file.split("/", 1)[-1] for file in measured if _kept_on_resume(folder / file)}
    return Left(len(held.files - done), len(held.files), len(measured) - len(done))


def _kept_on_resume(path: Path) -> bool:
    from rollout_study.record import ResultError
    from rollout_study.result import Result
    from rollout_study.sweep import kept_on_resume

    try:
        return kept_on_resume(Result.read(path))
    except (ResultError, ValueError):  # no result the resume reads: it runs the point again
        return False


class Left(NamedTuple):
    """A kept sweep's points the resume will run, all its points, and those of them measured already but whose
    result records a failure (they run again)."""
    left: int
    total: int
    again: int


def _many(count: int, thing: str) -> str:
    return f"{count} {thing}" + ("" if count == 1 else "s")


def _counted(count: int, repeats: int, by: str, left: Left | None) -> str:
    """What a kept sweep holds, in words: points and repeats measured, and points the resume will run."""
    said = _many(count - repeats, "point") + (f" and {_many(repeats, 'repeat')}" if repeats else "")
    said += f" measured by {by}"
    if left is None:
        return said
    if not left.left:
        return said + f"; none of the sweep's {_many(left.total, 'point')} left (its repeats, if it has any, run next)"
    again = f" ({left.again} of them measured, recording a failure: run again)" if left.again else ""
    return said + f"; {left.left} of the sweep's {_many(left.total, 'point')} left{again}"


def _unpack(pack: Path, into: Path) -> None:
    """Extract a tgz with nothing outside `into` and no links (tarfile's data filter does this from 3.11.4 on)."""
    try:
        with tarfile.open(pack) as archive:
            for member in archive.getmembers():
                parts = Path(member.name).parts
                if member.name.startswith("/") or ".." in parts or not (member.isfile() or member.isdir()):
                    raise KeepError(f"{pack}: {member.name!r} is not a plain file or folder inside the pack")
            archive.extractall(into, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    except (tarfile.TarError, EOFError, zlib.error) as err:  # a cut-off or corrupt pack
        raise KeepError(f"{pack}: not a whole tgz ({type(err).__name__}: {err})") from err


def _pack_bytes(folder: Path, arcname: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        archive.add(folder, arcname=arcname)
    return buffer.getvalue()


def kept_folder(pack: Path, into: Path) -> Path:
    """Unpack a kept sweep (sweeps-in-progress/<name>.tgz) into `into`; returns its folder."""
    _unpack(pack, into)
    folders = [p for p in into.iterdir() if p.is_dir()]
    if len(folders) != 1:
        raise KeepError(f"{pack}: holds {len(folders)} folders, a kept sweep one")
    return folders[0]


def keep(pack: Path, root: Path = ROOT, check=problems, fingerprint: str | None = None) -> list[str]:
    """Take `pack` into root's sweeps-in-progress/ (unfinished) and runs/ (finished); returns what was done.
    `check(folder, root)`: why an unfinished folder cannot be kept; `fingerprint`: the measuring code's, whose
    points count (by default each sweep's held_code; tests give their own, as they do a root)."""
    given, done, writes = fingerprint, [], []
    with tempfile.TemporaryDirectory() as scratch:
        unpacked = Path(scratch) / "pack"
        unpacked.mkdir()
        _unpack(pack, unpacked)
        groups: dict[str, list[Path]] = {}
        for folder in sorted(p for p in unpacked.iterdir() if p.is_dir()):
            groups.setdefault(sweep_name(folder), []).append(folder)
        if not groups:
            raise KeepError(f"{pack}: holds no sweep folder")
        for name, folders in groups.items():  # every folder checked before anything is written
            finished = [f for f in folders if not f.name.startswith(".")]
            unfinished = [f for f in folders if f.name.startswith(".")]
            if len(finished) > 1:
                raise KeepError(f"{pack}: {len(finished)} finished folders of {name}; bring them home one at a time")
            if finished:  # the sweep is done: what else of it the pack holds is older
                target = root / "runs" / finished[0].name
                if target.exists():
                    raise KeepError(f"{target} exists already; nothing kept")
                writes.append(("move", finished[0], target))
                # The device drew its report with the code it measured with (a pin's tree): the published
                # report is drawn again by this code, which test_published_reports holds it to.
                # what of it the tree keeps: none where it finished in the call it started in (`git rm` of a
                # missing path fails, and removes nothing it names beside it)
                kept = [f"{IN_PROGRESS}/{name}.{ext}" for ext in ("tgz", "pin")
                        if (root / IN_PROGRESS / f"{name}.{ext}").exists()]
                done.append(f"finished {target.relative_to(root)}: `python -m rollout_study publish "
                            f"{target.relative_to(root)}`, `python -m rollout_study report reports/{name}`"
                            + (f", then `git rm {' '.join(kept)}`" if kept else "")
                            + (f" ({len(unfinished)} unfinished folder(s) of it in the pack left out)"
                               if unfinished else ""))
                continue
            fingerprint, by = (given, "this code") if given else held_code(name, root)
            measured = {f: _measured(f, fingerprint) for f in unfinished}  # unlisted files count for none
            best = max(unfinished, key=lambda f: len(measured[f]))
            listed = {entry["file"] for entry in _entries(_record(best))}
            stale = [p for kind in ("points", "repeats") for p in (best / kind).glob("*")
                     if f"{kind}/{p.name}" not in listed]
            for path in stale:
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink()
            found = check(best, root)
            if found:
                raise KeepError(f"{best.name} cannot be kept ({len(found)} problem(s)); nothing kept; "
                                f"first: {found[0]}")
            target, count = root / IN_PROGRESS / f"{name}.tgz", len(measured[best])
            if count == 0:
                raise KeepError(f"{best.name}: no point measured by {by}; nothing kept")
            if target.is_file():
                earlier = measured_points(kept_folder(target, Path(scratch) / f"kept-{name}"), fingerprint)
                if earlier > count:
                    raise KeepError(f"{target.relative_to(root)} holds {earlier} results (points and repeats) "
                                    f"measured by {by}, the pack {count}: an older pack; nothing kept")
            writes.append(("pack", best, target))
            repeats = sum(1 for file in measured[best] if file.startswith("repeats/"))
            holds = _counted(count, repeats, by, points_left(best, fingerprint, root))
            done.append(f"kept {target.relative_to(root)} ({holds}"
                        + (f"; {len(stale)} unlisted point file(s) left out" if stale else "")
                        + "): commit it; `h200-reports.sh resume` resumes it")
        for kind, folder, target in writes:
            target.parent.mkdir(parents=True, exist_ok=True)
            if kind == "move":  # copied beside it first (from /tmp, a move is a copy), then one rename
                staged = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".incoming", dir=target.parent))
                shutil.copytree(folder, staged, dirs_exist_ok=True)
                # copytree gives it the unpacked folder's mode over mkdtemp's 0700: the data filter drops a packed
                # directory's mode, leaving mkdir's under the umask (0700 under 077); without it (before 3.11.4), the
                # pack's. Neither need be 0755
                os.chmod(staged, 0o755)
                os.replace(staged, target)
            else:  # a whole new file, then one rename: the kept sweep is never half-written
                name = target.stem
                handle, staged = tempfile.mkstemp(prefix=f".{name}.", suffix=".incoming", dir=target.parent)
                with os.fdopen(handle, "wb") as out:
                    out.write(_pack_bytes(folder, KEPT_FOLDER.format(name=name)))
                os.chmod(staged, 0o644)  # mkstemp's 0600 is no file's mode in a repository
                os.replace(staged, target)
    return done


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        for line in keep(Path(argv[0])):
            print(line)
    except (KeepError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
