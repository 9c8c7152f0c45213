"""Notebook execution: the study and report notebooks through papermill, HTML without churn.

    run folder  <- study.ipynb (papermill) -> result.json, study.html
                <- report.ipynb (papermill, from result.json alone) -> figures/, report.html, summary.md

A failing cell stops its notebook: the failure names the notebook, the cell (number and first
line) and the error, and keeps the executed notebook for inspection. Executed notebooks are
scrubbed of what changes from one execution to the next (timestamps, durations, absolute paths),
so rebuilding a report from the same result file gives the same bytes.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from .files import write_text

REPO_ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO_ROOT / "notebooks"
KERNEL_NAME = "python3"
KERNEL_START_TIMEOUT_S = 180  # a loaded two-core machine can take a minute to import the kernel
FIGURES_FOLDER = "figures"
REPORT_OUTPUTS = ("summary.md", "report.ipynb", "report.html", FIGURES_FOLDER)


class NotebookFailure(RuntimeError):
    """A notebook stopped; the message names the notebook, the cell and the error."""


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# -- kernel -----------------------------------------------------------------------------------
def runs_this_interpreter(argv: list[str]) -> bool:
    """Whether a kernel command line starts this interpreter.

    jupyter_client itself replaces a bare `python`, `python3` or `python3.X` with sys.executable.
    """
    executable = argv[0] if argv else ""
    if executable in {"python", f"python{sys.version_info[0]}", "python%d.%d" % sys.version_info[:2]}:
        return True
    found = shutil.which(executable) or executable
    return os.path.realpath(found) == os.path.realpath(sys.executable)


def kernel_argv() -> list[str]:
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        return KernelSpecManager().get_kernel_spec(KERNEL_NAME).argv
    except NoSuchKernel:
        return []


def write_kernel_spec(data_dir: str) -> str:
    """A `python3` kernelspec that starts this interpreter, under data_dir/kernels/python3."""
    folder = os.path.join(data_dir, "kernels", KERNEL_NAME)
    os.makedirs(folder, exist_ok=True)
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": f"Python {sys.version_info[0]} (rollout-study)", "language": "python",
            "metadata": {"debugger": False}}
    with open(os.path.join(folder, "kernel.json"), "w", encoding="utf-8") as handle:
        json.dump(spec, handle, indent=1)
    return folder


def _prepend(variable: str, entry: str) -> None:
    current = os.environ.get(variable)
    os.environ[variable] = entry if not current else os.pathsep.join([entry, current])


@contextlib.contextmanager
def kernel_environment():
    """While inside: the kernel imports this package and runs this interpreter.

    PYTHONPATH gets the repository root (the kernel and the cold-start processes it spawns inherit
    the environment), so a package supplied by PYTHONPATH instead of pip works too. If the `python3`
    kernelspec found first starts another interpreter, a private one takes precedence via JUPYTER_PATH.
    """
    saved = {name: os.environ.get(name) for name in ("PYTHONPATH", "JUPYTER_PATH", "MPLBACKEND")}
    with tempfile.TemporaryDirectory(prefix="rollout-kernel-") as private:
        try:
            _prepend("PYTHONPATH", str(REPO_ROOT))
            # Figures are saved as PNG and shown from the file: no inline backend is needed, and
            # some matplotlib builds reject ipykernel's module:// backend name (seen on the H200 image).
            os.environ["MPLBACKEND"] = "Agg"
            if not runs_this_interpreter(kernel_argv()):
                write_kernel_spec(private)
                _prepend("JUPYTER_PATH", private)
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


# -- notebooks --------------------------------------------------------------------------------
def relative(path: str | os.PathLike) -> str:
    """A path as notebooks should record it: relative to the repository where it lies inside it."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def first_line(source: str) -> str:
    return next((line.strip() for line in source.splitlines() if line.strip()), "")


def source_cell_number(notebook: Path, cell_source: str) -> int | None:
    """1-based number of the cell in the source notebook (papermill's injected cell shifts the executed one)."""
    import nbformat

    cells = nbformat.read(str(notebook), as_version=4).cells
    matches = [number for number, cell in enumerate(cells, 1) if cell.source == cell_source]
    return matches[0] if len(matches) == 1 else None


def describe_cell_failure(notebook: Path, executed: Path, error, kept_as: str | None = None) -> str:
    """kept_as: where the executed notebook is found once the command ends, where that is not `executed` (a
    partial folder is renamed when it is done)."""
    number = source_cell_number(notebook, error.source)
    where = f"cell {number}" if number else f"cell {error.cell_index + 1} of the executed notebook"
    return (f"{relative(notebook)} failed at {where} (In [{error.exec_count}]): {first_line(error.source)}\n"
            f"{error.ename}: {error.evalue}\n"
            f"executed notebook kept for inspection: {kept_as or executed}")


def kept_as(executed: Path, folder_shown: str | None) -> str | None:
    """How a failure names an executed notebook: by its path, or as a file of the folder it will be in."""
    return f"{executed.name} in {folder_shown}" if folder_shown else None


def execute_notebook(notebook: Path, executed: Path, parameters: dict, progress: bool = True,
                     cwd: Path = REPO_ROOT, kept: str | None = None) -> None:
    """papermill with kernel python3; raises NotebookFailure naming the cell (and `kept`: see
    describe_cell_failure)."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    try:
        papermill.execute_notebook(str(notebook), str(executed), parameters=parameters, kernel_name=KERNEL_NAME,
                                   progress_bar=progress, cwd=str(cwd), start_timeout=KERNEL_START_TIMEOUT_S)
    except PapermillExecutionError as error:
        raise NotebookFailure(describe_cell_failure(notebook, executed, error, kept)) from None
    except Exception as error:  # no cell to blame: the kernel did not start or died
        raise NotebookFailure(f"{relative(notebook)} could not run: {type(error).__name__}: {error}\n"
                              f"executed notebook (if any): {kept or executed}") from None
    finally:
        if executed.exists():
            scrub(executed)


# What changes between two executions of the same notebook on the same inputs.
_CHURN = ("start_time", "end_time", "duration", "input_path", "output_path")


def scrub(executed: Path) -> None:
    """Remove timestamps, durations and absolute paths that papermill writes into an executed notebook."""
    import nbformat

    notebook = nbformat.read(str(executed), as_version=4)
    papermill_meta = notebook.metadata.get("papermill", {})
    for key in _CHURN:
        papermill_meta.pop(key, None)
    notebook.metadata.get("widgets", None) and notebook.metadata.pop("widgets")
    for number, cell in enumerate(notebook.cells):
        # papermill gives its injected cell a random id; numbered ids keep rebuilt bytes stable.
        cell["id"] = f"cell-{number}"
        cell.metadata.pop("execution", None)
        cell_meta = cell.metadata.get("papermill")
        if cell_meta is not None:
            for key in _CHURN:
                cell_meta.pop(key, None)
    write_text(executed, nbformat.writes(notebook) + "\n")


def render_html(executed: Path, target: Path, with_code: bool) -> Path:
    from nbconvert import HTMLExporter

    from .present.page import page

    hide = not with_code
    exporter = HTMLExporter(template_name="basic", exclude_input=hide, exclude_input_prompt=hide,
                            exclude_output_prompt=hide)
    cells, _ = exporter.from_filename(str(executed))
    write_text(target, page(executed.stem, cells, with_code))
    return target


# -- steps ------------------------------------------------------------------------------------
def _step(action) -> list[str]:
    """Run one step; a NotebookFailure becomes a reported problem instead of ending the run."""
    try:
        action()
    except NotebookFailure as failure:
        say(f"error: {failure}")  # said at once: the steps that follow may take a while
        return [str(failure)]
    return []


def _guarded(what: str, action) -> list[str]:
    try:
        action()
    except Exception as err:  # a summary or rendering problem must not hide the run's own outcome
        problem = f"{what} failed: {type(err).__name__}: {err}"
        say(f"error: {problem}")
        return [problem]
    return []


def study_step(folder: Path, params: dict, command: str, progress: bool, notebooks: Path = NOTEBOOKS,
               folder_shown: str | None = None) -> list[str]:
    """The study notebook into folder (study.ipynb, result.json, study.html); inside kernel_environment.

    The kernel works in the folder itself and writes to ".", so no path of this machine (nor the
    temporary name of a run in progress) is recorded in the executed notebook. folder_shown: how a failure
    names the folder where it is renamed before the command ends ("the run folder named below"); None: its path.
    """
    model = params.get("model")
    if isinstance(model, str) and os.path.isdir(model):
        params = {**params, "model": os.path.abspath(model)}  # a checkpoint folder, seen from the new cwd
    parameters = {**params, "output_dir": ".", "command": command}
    executed = folder / "study.ipynb"
    problems = _step(lambda: execute_notebook(notebooks / "study.ipynb", executed, parameters, progress, cwd=folder,
                                              kept=kept_as(executed, folder_shown)))
    return problems + study_page_step(folder)


def remove_outputs(folder: Path, names) -> None:
    """A report's earlier outputs, files or folders, gone before it is drawn again."""
    for name in names:
        path = folder / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def report_step(folder: Path, progress: bool, notebooks: Path = NOTEBOOKS,
                folder_shown: str | None = None) -> list[str]:
    """summary.md, the report notebook, figures and report.html from folder/result.json alone (folder_shown: as
    study_step's)."""
    from .present import markdown
    from .result import Result

    remove_outputs(folder, REPORT_OUTPUTS)
    result_file = folder / "result.json"
    problems = _guarded("writing summary.md",
                        lambda: write_text(folder / "summary.md", markdown.summary(Result.read(result_file))))
    # Relative names with the folder as working directory: nothing absolute lands in the notebook.
    problems += _step(lambda: execute_notebook(notebooks / "report.ipynb", folder / "report.ipynb", {
        "result_files": ["result.json"], "figures_dir": FIGURES_FOLDER}, progress, cwd=folder,
        kept=kept_as(folder / "report.ipynb", folder_shown)))
    if (folder / "report.ipynb").exists():
        problems += _guarded("rendering report.html",
                             lambda: render_html(folder / "report.ipynb", folder / "report.html", with_code=False))
    return problems


def study_page_step(folder: Path) -> list[str]:
    """study.html drawn again from the folder's executed study.ipynb, where it has one (no cell runs: the notebook
    is the run's); a sweep folder has none."""
    executed = folder / "study.ipynb"
    if not executed.is_file():
        return []
    return _guarded("rendering study.html", lambda: render_html(executed, folder / "study.html", with_code=True))


def sweep_report_step(folder: Path, report: str, progress: bool, notebooks: Path = NOTEBOOKS,
                      folder_shown: str | None = None) -> list[str]:
    """summary.md, the sweep's report notebook (notebooks/<report>.ipynb) and report.html from the sweep folder
    (folder_shown: as study_step's)."""
    from . import sweep
    from .present import hazards
    from .present import sweep as sweep_report

    # Bare before it is drawn, as report_step's folder is: a figure this code no longer draws (a section renamed,
    # a model gone) would stay beside the new ones and read as part of the report
    remove_outputs(folder, ("summary.md", f"{report}.ipynb", "report.html", FIGURES_FOLDER))

    def summary():
        text = (hazards.summary(*sweep.load_results(folder)) if report == "hazards"
                else sweep_report.summary(*sweep.load(folder), folder=folder))
        write_text(folder / "summary.md", text)

    problems = _guarded("writing summary.md", summary)
    executed = folder / f"{report}.ipynb"
    problems += _step(lambda: execute_notebook(notebooks / f"{report}.ipynb", executed, {"sweep_dir": "."},
                                              progress, cwd=folder, kept=kept_as(executed, folder_shown)))
    if executed.exists():
        problems += _guarded("rendering report.html",
                             lambda: render_html(executed, folder / "report.html", with_code=False))
    return problems
