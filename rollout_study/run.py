"""One command for a whole study: validate, run the notebooks with papermill, render HTML, index.

    python -m rollout_study run [params/NAME.yaml] [--set key=value ...] [--output-root reports]

Into <output-root>/<name>/ (name: the file's `name` key, else its file name):
  1. validate the parameter file and every --set override (StudyParams); a bad one exits 2, writes nothing;
  2. execute notebooks/study.ipynb -> study.ipynb and result.json; render study.html (with code);
     write summary.md (rollout_study.markdown) from result.json;
  3. when result.json exists, execute notebooks/report.ipynb -> report.ipynb and figures/*.png;
     render report.html without code;
  4. refresh <output-root>/index.html, which lists every report folder there.

A failing cell stops its notebook: the run names the notebook, the cell (number and first line) and
the error, keeps the executed notebook for inspection, and exits 1. A study whose result is invalid
(parity mismatch, failed phase) fails its last cell after writing result.json; the report is still
rendered from that result, so the mismatch can be read there, and the run still exits 1.

Without a file: params/reference-tiny.yaml where CUDA is available, else params/cpu-smoke.yaml.
"""
from __future__ import annotations

import argparse
import contextlib
import html
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from .params import ParameterError, StudyParams

REPO_ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO_ROOT / "notebooks"
PARAMS_DIR = REPO_ROOT / "params"
GPU_DEFAULT_PARAMS = PARAMS_DIR / "reference-tiny.yaml"
CPU_DEFAULT_PARAMS = PARAMS_DIR / "cpu-smoke.yaml"
KERNEL_NAME = "python3"
KERNEL_START_TIMEOUT_S = 180  # a loaded two-core machine can take a minute to import the kernel
EXIT_OK, EXIT_FAILED, EXIT_BAD_PARAMETERS = 0, 1, 2
FIGURES_FOLDER = "figures"
# What a run writes into its folder; removed before a new run so a stale result cannot pass for a new one.
GENERATED = ("result.json", "summary.md", "study.ipynb", "study.html", "report.ipynb", "report.html", FIGURES_FOLDER)
FOLDER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class InvalidResult(RuntimeError):
    """The study finished but its result is not valid (parity mismatch or a failed phase)."""


class NotebookFailure(RuntimeError):
    """A notebook stopped; the message names the notebook, the cell and the error."""


# -- parameters -------------------------------------------------------------------------------
def parse_override(text: str) -> tuple[str, Any]:
    """`key=value`, the value read as YAML so numbers, booleans and lists keep their types."""
    import yaml

    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ParameterError(f"--set expects key=value, got {text!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as err:
        raise ParameterError(f"--set {key.strip()}: value {raw!r} is not valid YAML: {err}") from None
    return key.strip(), value


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    return dict(parse_override(pair) for pair in pairs)


def load_params(params_file: str | os.PathLike, overrides: dict | None = None) -> StudyParams:
    """The parameter file, then the overrides, validated by StudyParams (errors name the key)."""
    params = StudyParams.from_yaml(str(params_file))
    if not overrides:
        return params
    return StudyParams.from_dict({**params.to_dict(), **overrides}, source=f"{params_file} with --set")


def validate(params_file: str | os.PathLike, overrides: dict | None = None) -> StudyParams:
    """Everything that can be refused before a file is written: values, folder name, device."""
    params = load_params(params_file, overrides)
    if not FOLDER_NAME.match(params.name):
        raise ParameterError(f"{params_file}: name {params.name!r} names the report folder; "
                             f"allowed: letters, digits, '.', '_' and '-', starting with a letter or digit")
    params.resolved_device()  # device: cuda without a GPU is refused here, not inside the notebook
    return params


def default_params_file() -> Path:
    import torch

    return GPU_DEFAULT_PARAMS if torch.cuda.is_available() else CPU_DEFAULT_PARAMS


def invalid_summary(result: dict) -> str:
    """Why a result is invalid, in one paragraph (raised by the study notebook's last cell)."""
    from .report import target_of

    parts = []
    unmatched = [c for c in result["calls"] if not (c["parity"] or {}).get("ok")]
    if unmatched:
        first = unmatched[0]
        detail = first["parity"]["mismatch"] if first["parity"] else "no reference computed"
        parts.append(f"parity failed on {len(unmatched)} call(s); first: {target_of(first)} cycle {first['cycle']} "
                     f"{first['phase']} #{first['index']}: {json.dumps(detail)}")
    if result["failures"]:
        first = result["failures"][0]
        parts.append(f"{len(result['failures'])} phase(s) failed; first: {first.get('engine')} {first.get('phase')}: "
                     f"{first.get('error')}")
    bad_cold = [run for run in result.get("cold_starts") or [] if not run.get("valid", True)]
    if bad_cold:
        parts.append(f"{len(bad_cold)} cold-start run(s) invalid")
    return "the result is invalid (written anyway, for inspection): " + ("; ".join(parts) or "valid is false")


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
def notebook_path(path: Path) -> str:
    """A path as the kernel (cwd = repository root) should see it: relative inside the repository."""
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


def describe_cell_failure(notebook: Path, executed: Path, error) -> str:
    number = source_cell_number(notebook, error.source)
    where = f"cell {number}" if number else f"cell {error.cell_index + 1} of the executed notebook"
    return (f"{notebook_path(notebook)} failed at {where} (In [{error.exec_count}]): {first_line(error.source)}\n"
            f"{error.ename}: {error.evalue}\n"
            f"executed notebook kept for inspection: {executed}")


def execute_notebook(notebook: Path, executed: Path, parameters: dict, progress: bool = True) -> None:
    """papermill, kernel python3, cwd = repository root; raises NotebookFailure naming the cell."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    try:
        papermill.execute_notebook(str(notebook), str(executed), parameters=parameters, kernel_name=KERNEL_NAME,
                                   progress_bar=progress, cwd=str(REPO_ROOT), start_timeout=KERNEL_START_TIMEOUT_S)
    except PapermillExecutionError as error:
        raise NotebookFailure(describe_cell_failure(notebook, executed, error)) from None
    except Exception as error:  # no cell to blame: the kernel did not start or died
        raise NotebookFailure(f"{notebook_path(notebook)} could not run: {type(error).__name__}: {error}\n"
                              f"executed notebook (if any): {executed}") from None


def render_html(executed: Path, target: Path, with_code: bool) -> Path:
    from nbconvert import HTMLExporter

    hide = not with_code
    exporter = HTMLExporter(exclude_input=hide, exclude_input_prompt=hide, exclude_output_prompt=hide)
    body, _ = exporter.from_filename(str(executed))
    _write_text(target, body)
    return target


def _write_text(path: Path, text: str) -> None:
    # Write beside, then rename: a reader never sees half a page.
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


# -- index ------------------------------------------------------------------------------------
def index_entry(folder: Path) -> dict | None:
    """One report folder as the index shows it; None for a folder no run wrote."""
    from . import report, results

    links = [(name, name) for name in ("report.html", "study.html", "result.json") if (folder / name).exists()]
    entry = {"folder": folder.name, "label": None, "model": "-", "machine": "-", "date": "-", "valid": "no result",
             "links": links}
    if (folder / "result.json").exists():
        try:
            result = results.read(str(folder / "result.json"))
        except (ValueError, KeyError, OSError) as err:
            return {**entry, "valid": f"unreadable result: {type(err).__name__}"}
        meta = result["metadata"]
        return {**entry, "label": report.label_of(result), "model": report.model_name(result),
                "machine": report.machine_name(result), "date": meta.get("time_start") or "-",
                "valid": "valid" if result["valid"] else "INVALID",
                "graph": "CUDA graph" if meta.get("cuda_graph") else "no CUDA graph (CPU run)"}
    return entry if (folder / "study.ipynb").exists() else None


def index_entries(output_root: Path) -> list[dict]:
    folders = sorted(p for p in Path(output_root).iterdir() if p.is_dir() and not p.name.startswith("."))
    return [entry for entry in map(index_entry, folders) if entry is not None]


def index_html(entries: list[dict]) -> str:
    from .report import LABEL_TITLES, LABELS

    def table(rows: list[dict]) -> str:
        head = "<tr><th>report</th><th>model</th><th>machine</th><th>graph</th><th>date</th><th>validity</th><th>files</th></tr>"
        body = "".join(
            f"<tr><td>{html.escape(r['folder'])}</td><td>{html.escape(r['model'])}</td>"
            f"<td>{html.escape(r['machine'])}</td><td>{html.escape(r.get('graph', '-'))}</td>"
            f"<td>{html.escape(r['date'])}</td><td class=\"{'ok' if r['valid'] == 'valid' else 'bad'}\">"
            f"{html.escape(r['valid'])}</td><td>"
            + " ".join(f'<a href="{html.escape(r["folder"])}/{html.escape(href)}">{html.escape(text)}</a>'
                       for text, href in r["links"]) + "</td></tr>" for r in rows)
        return f"<table>{head}{body}</table>"

    # One table per label: the index never lists synthetic and pretrained runs together either.
    sections = []
    for label in LABELS:
        rows = [e for e in entries if e["label"] == label]
        if rows:
            sections.append(f"<h2>{LABEL_TITLES[label]} runs</h2>{table(rows)}")
    unlabelled = [e for e in entries if e["label"] is None]
    if unlabelled:
        sections.append(f"<h2>Runs without a readable result</h2>{table(unlabelled)}")
    style = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}.ok{color:#070}.bad{color:#c00;font-weight:bold}")
    content = "".join(sections) or "<p>No reports yet.</p>"
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>Rollout study reports</title>"
            f"<style>{style}</style></head><body><h1>Rollout study reports</h1>{content}</body></html>\n")


def write_index(output_root: Path) -> Path:
    target = Path(output_root) / "index.html"
    _write_text(target, index_html(index_entries(Path(output_root))))
    return target


# -- the run ----------------------------------------------------------------------------------
REPORT_OUTPUTS = ("summary.md", "report.ipynb", "report.html", FIGURES_FOLDER)


def prepare_folder(folder: Path, names: tuple[str, ...] = GENERATED) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        path = folder / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def run(params_file: str | os.PathLike, output_root: str | os.PathLike = "reports", overrides: dict | None = None,
        progress: bool = True, notebooks: Path = NOTEBOOKS, command: str | None = None) -> int:
    """The whole pipeline; returns the exit status (0 done, 1 a notebook failed or the result is invalid, 2 bad parameters)."""
    try:
        params = validate(params_file, overrides)
    except ParameterError as err:
        _say(f"error: {err}")
        return EXIT_BAD_PARAMETERS
    study_source, report_source = Path(notebooks) / "study.ipynb", Path(notebooks) / "report.ipynb"
    missing = [str(p) for p in (study_source, report_source) if not p.is_file()]
    if missing:
        _say(f"error: notebook(s) not found: {', '.join(missing)} (run from a checkout of the repository)")
        return EXIT_FAILED
    output_root = Path(output_root).resolve()
    folder = output_root / params.name
    prepare_folder(folder)
    result_file = folder / "result.json"
    problems = []
    with kernel_environment():
        _say(f"[1/2] study notebook -> {folder / 'study.ipynb'}")
        problems += _step(lambda: execute_notebook(study_source, folder / "study.ipynb", {
            "params_file": notebook_path(Path(params_file)), "output_dir": notebook_path(folder),
            "overrides": overrides or {}, "command": command}, progress))
        problems += _render(folder / "study.ipynb", folder / "study.html", with_code=True)
        if result_file.exists():
            _say(f"[2/2] report notebook -> {folder / 'report.ipynb'}")
            problems += _report_step(folder, report_source, progress)
        else:
            _say("no result.json: the report is skipped")
    index = write_index(output_root)
    _say(f"report folder: {folder}\nindex: {index}")
    if problems:
        _say(f"run failed: {len(problems)} problem(s), each reported above as 'error:'")
    return EXIT_FAILED if problems else EXIT_OK


def report_only(folder: str | os.PathLike, progress: bool = True) -> int:
    """Rebuild summary.md, the report notebook, report.html and the index from a folder's result.json.

    The report reads only the result file, so a GPU run's report can be rebuilt anywhere.
    """
    folder = Path(folder).resolve()
    result_file = folder / "result.json"
    if not result_file.is_file():
        _say(f"error: {result_file} does not exist")
        return EXIT_BAD_PARAMETERS
    prepare_folder(folder, REPORT_OUTPUTS)
    with kernel_environment():
        problems = _report_step(folder, NOTEBOOKS / "report.ipynb", progress)
    index = write_index(folder.parent)
    _say(f"report folder: {folder}\nindex: {index}")
    return EXIT_FAILED if problems else EXIT_OK


def _report_step(folder: Path, report_source: Path, progress: bool) -> list[str]:
    """summary.md, the report notebook and report.html from folder/result.json (inside kernel_environment)."""
    result_file = folder / "result.json"
    problems = _summary(result_file, folder / "summary.md")
    problems += _step(lambda: execute_notebook(report_source, folder / "report.ipynb", {
        "result_files": [notebook_path(result_file)], "figures_dir": notebook_path(folder / FIGURES_FOLDER)},
        progress))
    return problems + _render(folder / "report.ipynb", folder / "report.html", with_code=False)


def _step(action) -> list[str]:
    try:
        action()
    except NotebookFailure as failure:
        _say(f"error: {failure}")  # said at once: the report step that follows may take a while
        return [str(failure)]
    return []


def _summary(result_file: Path, target: Path) -> list[str]:
    from . import markdown, results

    try:
        _write_text(target, markdown.summary(results.read(str(result_file))))
    except Exception as err:  # a summary problem must not hide the run's own outcome
        problem = f"writing {target.name} failed: {type(err).__name__}: {err}"
        _say(f"error: {problem}")
        return [problem]
    return []


def _render(executed: Path, target: Path, with_code: bool) -> list[str]:
    if not executed.exists():
        return []
    try:
        render_html(executed, target, with_code)
    except Exception as err:  # a rendering problem must not hide the run's own outcome
        problem = f"rendering {target.name} failed: {type(err).__name__}: {err}"
        _say(f"error: {problem}")
        return [problem]
    return []


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m rollout_study", description="The rollout study's commands.")
    commands = top.add_subparsers(dest="command", required=True)
    run_cmd = commands.add_parser("run", help="run the study and report notebooks for one parameter file",
                                  description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    run_cmd.add_argument("params_file", nargs="?", default=None,
                         help="YAML parameter file (default: reference-tiny with CUDA, else cpu-smoke)")
    run_cmd.add_argument("--output-root", default="reports", help="folder of report folders (default: reports)")
    run_cmd.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                         help="override one parameter of the file (validated like the file); repeatable")
    run_cmd.add_argument("--quiet", action="store_true", help="no progress bars")
    report_cmd = commands.add_parser("report", help="rebuild a report folder's report from its result.json")
    report_cmd.add_argument("folder", help="a report folder holding result.json (e.g. reports/reference-tiny)")
    report_cmd.add_argument("--quiet", action="store_true", help="no progress bars")
    return top


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    if args.command == "report":
        return report_only(args.folder, progress=not args.quiet)
    try:
        overrides = parse_overrides(args.overrides)
    except ParameterError as err:
        _say(f"error: {err}")
        return EXIT_BAD_PARAMETERS
    params_file = args.params_file or default_params_file()
    if args.params_file is None:
        _say(f"no parameter file given: using {notebook_path(Path(params_file))}")
    return run(params_file, args.output_root, overrides, progress=not args.quiet,
               command="python -m rollout_study " + shlex.join(argv))
