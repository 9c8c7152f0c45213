"""`rollout-study report FOLDER`: rebuild a folder's summary, report notebook, figures and HTML from its records
(a run folder's study.html too, from its executed study notebook, which no rebuild runs again).

The records are read and checked first: a sweep.json or result.json that does not read is bad input (exit 2),
named, with nothing written. The report is built in a copy beside the folder and swapped in, so an interrupted
or failing rebuild leaves it whole; a failing one keeps its copy, where its failure names the executed notebook.
The index of the folder's parent is rebuilt only where that parent is a root of run or report folders (see
`indexed_root`): `report ~/x` must not write ~/index.html. A sweep folder is rebuilt under its sweep lock
(sweep_lock.py): a sweep still writing into it would otherwise lose the points it wrote between the copy and the
swap, and a sweep started meanwhile is refused until the rebuild ends.
"""
from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

from .param_values import ParameterError
from .pipeline import say
from .sweep_lock import LOCK_FILE, locked


def sweep_kind(folder: Path) -> str:
    """The report of a sweep folder (hazards or sweep), once its record (sweep.read_record) and every point's
    result read."""
    from .record import ResultError
    from .sweep import load

    try:
        record, _ = load(folder)
    except ParameterError:  # its record: it names the file and what is wrong
        raise
    except (ResultError, ValueError, OSError) as err:
        raise ParameterError(f"{folder}: a point's result does not read: {err}") from None
    return record["spec"]["report"]


def check_result(folder: Path) -> None:
    from .record import ResultError
    from .result import Result

    path = folder / "result.json"
    try:
        Result.read(path)
    except (ResultError, ValueError, OSError) as err:  # ResultError names the file itself
        raise ParameterError(f"{path}: not a result this version reads: {str(err).removeprefix(f'{path}: ')}") \
            from None


def indexed_root(root: Path) -> bool:
    """Whether the index of `root` is the project's to rebuild: the repository's runs/ or reports/, or a folder that
    already has an index.html (a `run --output-root`, `sweep --output-root` or `publish --reports-root`)."""
    from .publish import REPORTS_ROOT, RUNS_ROOT

    return root in (RUNS_ROOT.resolve(), REPORTS_ROOT.resolve()) or (root / "index.html").is_file()


def command(args) -> int:
    """Exit status: 0 rebuilt, 1 a step failed (the report as it was), 2 bad input (nothing written) or a sweep
    running into the folder."""
    from . import publish
    from .sweep import SWEEP_FILE

    folder = Path(args.folder).resolve()
    swept = (folder / SWEEP_FILE).is_file()
    if not swept and not (folder / "result.json").is_file():
        raise ParameterError(f"{folder} holds neither result.json nor {SWEEP_FILE}")
    sweep_report = sweep_kind(folder) if swept else check_result(folder)  # before any work
    root = indexed_root(folder.parent)
    with locked(folder) if swept else contextlib.nullcontext():  # SweepLockedError before any work
        problems = _rebuild(folder, sweep_report, root, progress=not args.quiet)
    say(f"report folder: {folder}")
    if root:
        say(f"index: {publish.write_index(folder.parent)}")
    return 1 if problems else 0


def _rebuild(folder: Path, sweep_report: str | None, root: bool, progress: bool) -> list[str]:
    """The report built in a copy beside the folder, swapped in where no step failed; the steps' problems."""
    from . import pipeline, publish

    work = Path(tempfile.mkdtemp(prefix=f".{folder.name}.rebuild-", dir=folder.parent))
    problems: list[str] = []
    try:
        # links kept as links: a published copy of another report's raw result stays one (publish.link_copies);
        # the lock is the rebuild's own, no record
        shutil.copytree(folder, work, symlinks=True, dirs_exist_ok=True, ignore=shutil.ignore_patterns(LOCK_FILE))
        publish.readable(work)  # the folder's mode came with the copy: a run made before runs were opened was 0700
        with pipeline.kernel_environment():
            problems = (pipeline.sweep_report_step(work, sweep_report, progress=progress)
                        if sweep_report else pipeline.report_step(work, progress=progress))
            # The run's executed study notebook is a record, never run again here; only its page is redrawn, so a
            # change to the page (present/page.py) reaches every folder a rebuild reaches
            problems += pipeline.study_page_step(work)
        if not problems:
            # one publisher at a time per root; a folder elsewhere gets no .lock beside it
            with publish.locked(folder.parent) if root else contextlib.nullcontext():
                publish.swap_in(work, folder)
    finally:
        if problems and work.is_dir():  # its failure named the executed notebook in it: kept where named
            say(f"the failed rebuild is kept for inspection in {work} ({folder} is unchanged); remove it when done")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return problems
