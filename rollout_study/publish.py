"""New runs and published reports: where a run's folder lives and how it reaches `reports/`.

A run writes into a hidden partial folder under the git-ignored runs root and is renamed to
`<name>-<UTC time>` only when complete, so no run ever overwrites another's files. Publishing is
an explicit step that copies a finished run folder into `reports/<name>/`: it refuses an invalid
result and refuses to replace a GPU result with a CPU one, and it swaps the folder in by renames,
so an interrupted publish leaves the previous report whole. Both roots keep an `index.html` that
is rebuilt from what is on disk.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import filecmp
import os
import re
import shutil
import tempfile
from pathlib import Path

from .pipeline import REPO_ROOT, write_text
from .present.index import report_folders
from .record import ResultError
from .result import Result
from .sweep_lock import LOCK_FILE

RUNS_ROOT = REPO_ROOT / "runs"
REPORTS_ROOT = REPO_ROOT / "reports"
FOLDER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
RESERVED_NAMES = {"index.html", "index"}
MAX_NAME = 200  # with the run folder's time stamp or a partial folder's prefix and suffix, under 255 bytes


class PublishError(ValueError):
    """A run cannot be published (no valid result, or it would replace a GPU result with a CPU one)."""


def check_name(name: str, what: str = "name") -> str:
    if not FOLDER_NAME.match(name or "") or name in RESERVED_NAMES or len(name) > MAX_NAME:
        raise PublishError(f"{what} {name!r} names a report folder; allowed: letters, digits, '.', '_' and '-', "
                           f"starting with a letter or digit, at most {MAX_NAME} characters, and not "
                           f"{', '.join(sorted(RESERVED_NAMES))}")
    return name


def _stamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")


FOLDER_MODE = 0o755


def readable(folder: Path) -> Path:
    """A folder made by mkdtemp (owner-only, 0700) opened as a plain mkdir would make it: its files are written
    for everyone to read (files.py), and a run or report folder that only its owner can enter hides them."""
    os.chmod(folder, FOLDER_MODE)
    return folder


def start_run(runs_root: Path, name: str) -> Path:
    """A new hidden partial folder for one run (unique even for two runs started in the same second)."""
    runs_root.mkdir(parents=True, exist_ok=True)
    return readable(Path(tempfile.mkdtemp(prefix=f".{name}.partial-", dir=runs_root)))


def finish_run(partial: Path, name: str) -> Path:
    """Rename a partial folder to its final `<name>-<UTC time>` (a suffix keeps it unique)."""
    stamp = _stamp()
    final = partial.parent / f"{name}-{stamp}"
    number = 1
    while final.exists():
        number += 1
        final = partial.parent / f"{name}-{stamp}-{number}"
    os.replace(partial, final)
    return final


def standalone_run_folder(name: str, runs_root: Path | None = None) -> Path:
    """Where a notebook run by hand (papermill, nbconvert, Jupyter) writes when given no output_dir.

    The runs root is the repository's runs/, or ROLLOUT_STUDY_RUNS where that is set.
    """
    runs_root = Path(runs_root or os.environ.get("ROLLOUT_STUDY_RUNS") or RUNS_ROOT)
    stamp = _stamp()
    return readable(Path(tempfile.mkdtemp(prefix=f"{check_name(name)}-{stamp}-", dir=_made(runs_root))))


def _made(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _device(result: Result) -> str:
    return "GPU" if result.metadata.get("device") == "cuda" else "CPU"


def publish(run_folder: str | os.PathLike, reports_root: str | os.PathLike = REPORTS_ROOT,
            name: str | None = None) -> Path:
    """Copy a finished run folder to reports_root/<name> (default: the run's name); returns the folder."""
    given = Path(run_folder)
    if given.exists() and not given.is_dir():  # else "[Errno 20] Not a directory: '.../result.json'"
        finished = any((given.parent / name).is_file() for name in ("result.json", "sweep.json"))
        hint = f" (the folder that holds it: {str(given.parent)!r})" if finished else ""
        raise PublishError(f"publish: {str(given)!r} is a file; allowed: a run or sweep folder{hint}")
    run_folder, reports_root = given.resolve(), Path(reports_root).resolve()
    result, problems, default_name, results = _readable(run_folder)  # validity from the records, never a flag
    if problems:
        raise PublishError(f"{run_folder}: the result is invalid ({'; '.join(problems)}); "
                           "an invalid run is a failed run and is not published")
    wrong_code = code_problems(results)
    if wrong_code:
        raise PublishError(f"{run_folder}: {'; '.join(wrong_code)}; a published figure names the code that measured it")
    gaps = report_gaps(run_folder)
    if gaps:
        raise PublishError(f"{run_folder}: its report is incomplete ({'; '.join(gaps)}): the run's report step "
                           f"failed; rebuild it (python -m rollout_study report {run_folder}), then publish")
    name = check_name(default_name if name is None else name, "--name" if name is not None else "name")
    target = reports_root / name
    reports_root.mkdir(parents=True, exist_ok=True)
    with locked(reports_root):
        refuse_downgrade(target, result)
        refuse_linked(target)
        incoming = Path(tempfile.mkdtemp(prefix=f".{name}.incoming-", dir=reports_root))
        try:
            # A sweep's lock file is no result: left by a crash, or there while a sweep runs (sweep_lock.py)
            shutil.copytree(run_folder, incoming, dirs_exist_ok=True, ignore=shutil.ignore_patterns(LOCK_FILE))
            readable(incoming)  # copytree gave it the run folder's mode: 0700 where a run's mkdtemp made it
            link_copies(incoming, reports_root, name)
            swap_in(incoming, target)
        finally:
            if incoming.exists():
                shutil.rmtree(incoming)
        write_index(reports_root)
    return target


def _readable(folder: Path) -> tuple[Result, list[str], str, list[Result]]:
    """(a result that stands for the folder, why it is invalid, its name, every result in it): a run folder,
    or a sweep folder."""
    from . import sweep

    try:
        if (folder / sweep.SWEEP_FILE).is_file():
            loaded = sweep.load(folder)
            results = sweep.finished(loaded[1])
            if not results:
                raise PublishError(f"{folder}: the sweep has no finished point")
            return results[0], sweep.validity_problems(folder, loaded), loaded[0]["spec"]["name"], results
        result = Result.read(folder / "result.json")
    except FileNotFoundError:
        raise PublishError(f"{folder} has no result.json or sweep.json: only finished runs can be published") from None
    except (ResultError, ValueError, KeyError) as err:
        raise PublishError(f"{folder}: unreadable result: {err}") from None
    return result, result.validity_problems(), result.run_name, [result]


def report_gaps(folder: Path) -> list[str]:
    """What a finished folder's report lacks: a run whose report step failed has a valid result and no report.html,
    summary.md or figures, or a report notebook stopped at a cell (papermill records the exception) and rendered
    as far as it ran. A run needs its study.html too; a sweep's notebook is its report's (hazards, sweep)."""
    import json

    from .sweep import SWEEP_FILE

    if (folder / SWEEP_FILE).is_file():
        notebook = f"{json.loads((folder / SWEEP_FILE).read_text(encoding='utf-8'))['spec']['report']}.ipynb"
        needed = ("report.html", "summary.md", notebook)
    else:
        notebook, needed = "report.ipynb", ("study.html", "report.html", "summary.md", "report.ipynb")
    gaps = [f"no {name}" for name in needed if not (folder / name).is_file()]
    if (folder / notebook).is_file():
        try:
            stopped = (json.loads((folder / notebook).read_text(encoding="utf-8"))["metadata"].get("papermill")
                       or {}).get("exception")
        except (ValueError, KeyError, TypeError):
            stopped = "unreadable"
        if stopped:
            gaps.append(f"{notebook} stopped at a failing cell" if stopped is True else f"{notebook} does not read")
    if (folder / "report.html").is_file():
        page = (folder / "report.html").read_text(encoding="utf-8", errors="replace")
        absent = [src for src in re.findall(r'<img[^>]*\bsrc="([^"]+)"', page)
                  if not src.startswith("data:") and not (folder / src).is_file()]
        if absent:
            gaps.append(f"no {', '.join(absent[:3])}{' ...' if len(absent) > 3 else ''} (report.html shows them)")
    return gaps


def code_problems(results: list[Result], shown: int = 3) -> list[str]:
    """Results whose measuring code is not that of the commit they name: each result's recorded fingerprint
    against the commit's, computed from this repository. A lent machine's copy of the tree once carried a
    stale .git, and its runs named a commit two changes older than the code that ran. Checked where a result
    kept its fingerprint (not those written before) and the package sits in a repository."""
    from .environment import commit_fingerprint, in_repository

    if not in_repository():
        return []
    fingerprints, problems = {}, []
    for result in results:
        git = result.metadata.get("git") or {}
        recorded, commit = git.get("code_sha256"), git.get("commit")
        if not recorded:
            continue
        if commit not in fingerprints:
            fingerprints[commit] = commit_fingerprint(commit)
        then, why = fingerprints[commit]
        if then is None:
            problems.append(f"{result.run_name} {why}")
        elif then != recorded:
            problems.append(f"{result.run_name} ran code (fingerprint {recorded[:12]}) that is not commit "
                            f"{commit[:12]}'s ({then[:12]}): run it from that commit's clean tree, or name the "
                            "commit it ran at (ROLLOUT_STUDY_COMMIT, where the machine's .git is stale)")
    return problems[:shown] + ([f"{len(problems) - shown} more"] if len(problems) > shown else [])


@contextlib.contextmanager
def locked(root: Path, wait_s: float = 60.0):
    """One publisher at a time per reports root; a second waits, then refuses with a clear message."""
    import fcntl
    import time

    with open(root / ".lock", "w") as handle:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise PublishError(f"{root} is being published into by another process; try again later") from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def refuse_downgrade(target: Path, result: Result) -> None:
    """A CPU result never replaces a GPU one; a report whose result cannot be read is not replaced blindly."""
    if not target.exists() or not any((target / name).exists() for name in ("result.json", "sweep.json")):
        return
    try:
        old = _readable(target)[0]
    except PublishError as err:
        raise PublishError(f"{target} holds a result that cannot be read ({err}); move it away first") from None
    if _device(old) == "GPU" and _device(result) == "CPU":
        raise PublishError(f"{target} holds a GPU result ({old.machine}); a CPU run does not replace it "
                           "(publish it under another name with --name)")


def link_copies(incoming: Path, root: Path, name: str) -> int:
    """Each point file of `incoming` byte-identical to the same-named file of another published report becomes a
    relative link to it; returns how many. A whole sweep built with --keep-from from published subsets holds their
    raw results as they are, and the device calls carry the tracked tree, whose size limits what else they can carry:
    one copy of each result in reports/, not two. The link names a file, never another link."""
    from .sweep import POINTS_FOLDER

    linked = 0
    others = [p for p in report_folders(root) if p.name != name]  # `name` is being replaced
    for point in sorted((incoming / POINTS_FOLDER).glob("*.json")):
        for other in others:
            twin = other / POINTS_FOLDER / point.name
            if twin.is_file() and not twin.is_symlink() and filecmp.cmp(point, twin, shallow=False):
                point.unlink()
                point.symlink_to(Path("..", "..", other.name, POINTS_FOLDER, point.name))
                linked += 1
                break
    return linked


def refuse_linked(target: Path) -> None:
    """A report whose raw results another report links to is not replaced: that report's results would change
    with it, or vanish."""
    from .sweep import POINTS_FOLDER

    users = sorted(other.name for other in report_folders(target.parent) if other.name != target.name
                   and any(Path(os.readlink(link)).parts[2:3] == (target.name,)
                           for link in (other / POINTS_FOLDER).glob("*.json") if link.is_symlink()))
    if users:
        raise PublishError(f"{target}: {', '.join(users)} beside it link to its raw results (points/): replacing "
                           "or removing it would change theirs; publish under another name with --name")


def swap_in(incoming: Path, target: Path) -> None:
    """Replace target by incoming with two renames: the old folder is removed only after the new one is in place.

    Only between the two renames (microseconds) is there no folder at `target`; a complete one
    is on disk throughout, never a half-copied one.
    """
    retired = None
    if target.exists():
        retired = Path(tempfile.mkdtemp(prefix=f".{target.name}.retired-", dir=target.parent))
        os.replace(target, retired / target.name)
    try:
        os.replace(incoming, target)
    except BaseException:
        if retired is not None:
            os.replace(retired / target.name, target)  # put the old report back
        raise
    if retired is not None:
        shutil.rmtree(retired)


def write_index(root: str | os.PathLike) -> Path:
    from .present import index

    root = Path(root)
    target = root / "index.html"
    write_text(target, index.page(index.entries(root)))
    return target
