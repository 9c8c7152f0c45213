"""pipeline.py and `run`: the notebooks end to end on the CPU, every way users run them, and failures.

Every run writes into a temporary root, never into the repository's runs/ or reports/.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from result_fixture import make_invalid_result_dict
from rollout_study import environment, numa, pipeline
from rollout_study.environment import core_count
from rollout_study.param_values import ParameterError
from rollout_study.result import Result

REPO = Path(__file__).resolve().parent.parent


def _env(**extra) -> dict:
    # One BLAS thread: on a shared two-core machine OpenMP spin-waits make oversubscribed runs many times slower.
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **extra}


def _run(*args: str, cwd: Path = REPO, timeout: int = 900, **env) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), cwd=cwd, env=_env(**env), capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    done = _run(sys.executable, "-m", "rollout_study", "run", "params/cpu-smoke.yaml", "--output-root", str(root),
                "--quiet")
    folders = [p for p in root.iterdir() if p.is_dir()]
    return root, done, folders


def test_smoke_run_writes_one_complete_run_folder(smoke):
    root, done, folders = smoke
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(folders) == 1 and folders[0].name.startswith("cpu-smoke-")  # never named after a published report
    folder = folders[0]
    for name in ("study.ipynb", "result.json", "summary.md", "study.html", "report.ipynb", "report.html"):
        assert (folder / name).is_file(), name
    result = Result.read(folder / "result.json")
    assert result.is_valid and result.run_name == "cpu-smoke"
    assert result.metadata["workload"]["batch_sizes"] == [4, 2]  # the last batch is partial
    assert result.metadata["command"].startswith("python -m rollout_study run params/cpu-smoke.yaml")
    assert "cpu-smoke" in (root / "index.html").read_text(encoding="utf-8")
    # the run records which boot of which machine it ran on (a digest; None only where the OS does not say)
    boot = result.metadata["hardware"]["boot"]
    assert boot is None if environment.boot_digest() is None else re.fullmatch(r"[0-9a-f]{12}", boot)
    # and where its cores sat among the host's NUMA nodes (every one counted; no GPU, so no GPU's node)
    where = result.metadata["hardware"]["numa"]
    if numa.core_nodes():
        cores = core_count(result.metadata["threads"]["cpu_affinity"])
        assert where["gpu_node"] is None and sum(where["cores_by_node"].values()) == cores and where["nodes"] >= 1
    else:
        assert where is None


def test_executed_notebooks_carry_no_machine_paths_or_timestamps(smoke):
    root, _, (folder,) = smoke
    for name in ("study.ipynb", "report.ipynb", "report.html"):
        text = (folder / name).read_text(encoding="utf-8")
        # nor the .partial- folder the notebooks ran in, renamed to the folder after (the root itself is in the
        # recorded command: --output-root)
        assert str(folder) not in text and f"{root}{os.sep}." not in text and str(REPO) not in text, name
        assert "start_time" not in text and "end_time" not in text, name


def test_report_html_has_no_code_and_study_html_keeps_it(smoke):
    folder = smoke[2][0]
    page = (folder / "report.html").read_text(encoding="utf-8")
    # Figures linked, stored once in figures/ (not again in the notebook and its HTML), and each one there
    sources = re.findall(r'<img[^>]*\bsrc="([^"]+)"', page)
    assert sources and all(src.startswith("figures/") and (folder / src).is_file() for src in sources)
    assert sorted(sources) == sorted(f"figures/{p.name}" for p in (folder / "figures").glob("*.png"))
    assert not re.search(r'<img[^>]*\bsrc="data:', page) and "<table" in page
    assert "image/png" not in (folder / "report.ipynb").read_text(encoding="utf-8")
    assert "section_blocks(" not in page and "read_results(" not in page  # inputs excluded
    assert "Pretrained model:" not in page
    study = (folder / "study.html").read_text(encoding="utf-8")
    assert "run_study" in study and "IProgress" not in study and "ipywidgets" not in study
    for text in (page, study):
        # One small stylesheet, no script, nothing fetched: a page opens offline and weighs what its cells do
        # (nbconvert's lab page inlined 250 KB of JupyterLab's styles and loaded require.js from a CDN)
        assert text.startswith("<!DOCTYPE html>") and text.count("<body>") == 1 and "</html>" in text
        assert "<script" not in text and not re.search(r'\b(src|href)="(https?:)?//', text)
        assert 'class="jp-' not in text and len(re.findall(r"<style", text)) == text.count("</style>")
        assert sum(len(s) for s in re.findall(r"<style.*?</style>", text, re.S)) < 40_000
    assert ".highlight .k " in study and ".highlight .k " not in page  # code coloured where there is code


def test_rebuilding_a_report_changes_no_byte(smoke, tmp_path):
    """A folder holding only result.json gets its report back, and a second rebuild is byte-identical."""
    folder = tmp_path / "copied"
    folder.mkdir()
    shutil.copy(smoke[2][0] / "result.json", folder / "result.json")
    # the run's executed study notebook is kept as it is, its page drawn again (a stale one here)
    shutil.copy(smoke[2][0] / "study.ipynb", folder / "study.ipynb")
    (folder / "study.html").write_text("<p>a page of an older look</p>", encoding="utf-8")
    notebook = (folder / "study.ipynb").read_bytes()
    (tmp_path / "index.html").write_text("", encoding="utf-8")  # a root of report folders: its index is rebuilt
    first = _run(sys.executable, "-m", "rollout_study", "report", str(folder), "--quiet")
    assert first.returncode == 0, first.stderr[-3000:]
    assert (folder / "study.ipynb").read_bytes() == notebook
    study = (folder / "study.html").read_text(encoding="utf-8")
    assert study.startswith("<!DOCTYPE html>") and "run_study" in study and "older look" not in study
    snapshot = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert {Path("summary.md"), Path("report.ipynb"), Path("report.html")} <= set(snapshot)
    again = _run(sys.executable, "-m", "rollout_study", "report", str(folder), "--quiet")
    assert again.returncode == 0, again.stderr[-3000:]
    assert {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()} == snapshot
    assert "copied/report.html" in (tmp_path / "index.html").read_text(encoding="utf-8")
    missing = _run(sys.executable, "-m", "rollout_study", "report", str(tmp_path / "nothing"), "--quiet")
    assert missing.returncode == 2 and "holds neither result.json nor sweep.json" in missing.stderr


@pytest.mark.parametrize("name, content, fragment", [
    ("sweep.json", "{not json", "sweep.json: not valid JSON"),
    ("sweep.json", '{"points": []}', "sweep.json: not a sweep record: it needs a 'spec' mapping"),
    ("sweep.json", '{"spec": {"report": "sweep", "name": "s"}, "points": [{"slug": "p", "file": "points/p.json"}]}',
     "a point's result does not read"),
    ("result.json", '{"x": 1}', "result.json: not a result this version reads: missing field(s) calls"),
    ("result.json", "\udcff", "result.json: not a result this version reads: 'utf-8' codec")])
def test_report_reads_its_records_first_and_writes_nothing_on_bad_input(tmp_path, capsys, name, content, fragment):
    from rollout_study import cli

    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / name).write_text(content, encoding="utf-8", errors="surrogateescape")
    (folder / "points").mkdir()
    (folder / "points" / "p.json").write_text("[]", encoding="utf-8")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert cli.main(["report", str(folder), "--quiet"]) == cli.EXIT_BAD_INPUT
    assert fragment in capsys.readouterr().err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # no kernel, no index, no lock


def test_report_rebuilds_an_index_only_where_the_parent_is_a_root_of_reports(tmp_path, capsys, monkeypatch):
    """`report ~/x` must not write ~/index.html (nor a .lock): only runs/, reports/ or a folder with an index."""
    from rollout_study import cli

    folder = tmp_path / "x"
    folder.mkdir()
    (folder / "result.json").write_text(json.dumps(make_invalid_result_dict()), encoding="utf-8")
    monkeypatch.setattr(pipeline, "report_step", lambda work, progress: [])
    assert cli.main(["report", str(folder), "--quiet"]) == cli.EXIT_OK
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x"]
    (tmp_path / "index.html").write_text("", encoding="utf-8")
    assert cli.main(["report", str(folder), "--quiet"]) == cli.EXIT_OK
    assert "x/result.json" in (tmp_path / "index.html").read_text(encoding="utf-8")


def test_papermill_with_a_parameter_file_and_overrides_from_another_directory(tmp_path):
    out = tmp_path / "out"
    done = _run(sys.executable, "-m", "papermill", str(REPO / "notebooks/study.ipynb"), str(tmp_path / "run.ipynb"),
                "-f", str(REPO / "params/cpu-smoke.yaml"), "-p", "requests", "3", "-p", "cold_starts", "0",
                "-p", "output_dir", str(out), "--cwd", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Passed unknown parameter" not in done.stderr
    result = Result.read(out / "result.json")
    workload = result.metadata["workload"]
    assert (result.run_name, workload["requests"], workload["max_new_tokens"]) == ("cpu-smoke", 3, 8)
    assert "papermill" in result.metadata["command"] and "requests" in result.metadata["command"]


def test_papermill_refuses_a_misspelt_parameter_before_any_work(tmp_path):
    """papermill only warns about a name the parameters cell does not hold; the notebook stops on it."""
    (tmp_path / "typo.yaml").write_text("name: typo\ndevice: cpu\nbatchsize: 2\n", encoding="utf-8")
    runs = tmp_path / "runs"
    done = _run(sys.executable, "-m", "papermill", str(REPO / "notebooks/study.ipynb"), str(tmp_path / "run.ipynb"),
                "-f", str(tmp_path / "typo.yaml"), "-p", "requets", "4", cwd=tmp_path, ROLLOUT_STUDY_RUNS=str(runs))
    assert done.returncode != 0
    assert "unknown parameter(s) batchsize, requets; known: attn, batch_size" in done.stderr
    assert not runs.exists()  # refused before the run folder is made
    # an output_dir its result cannot be written into: refused before the study, not once it has run
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    done = _run(sys.executable, "-m", "papermill", str(REPO / "notebooks/study.ipynb"), str(tmp_path / "run.ipynb"),
                "-f", str(REPO / "params/cpu-smoke.yaml"), "-p", "output_dir", str(tmp_path / "a-file"), cwd=tmp_path)
    assert done.returncode != 0 and f"output_dir '{tmp_path / 'a-file'}': {tmp_path / 'a-file'} is not a folder" \
        in done.stderr, done.stderr[-2000:]


def test_report_notebooks_refuse_a_misspelt_parameter_or_a_value_of_another_kind(tmp_path):
    from rollout_study.present import notebook

    done = _run(sys.executable, "-m", "papermill", str(REPO / "notebooks/report.ipynb"), str(tmp_path / "r.ipynb"),
                "-p", "result_file", "x.json", cwd=tmp_path)
    assert done.returncode != 0 and "unknown parameter(s) result_file; known: figures_dir, result_files" \
        in done.stderr, done.stderr[-2000:]
    before = {"json"}
    expected = {"result_files": "list of text", "figures_dir": "text"}
    notebook.check_parameters({"json": json, "result_files": ["a.json"], "figures_dir": "f", "_": 1, "_i3": ""},
                              before, expected)
    for values, said in (({"result_files": "/", "figures_dir": "f"}, "result_files must be a list of texts, got '/'"),
                         ({"result_files": [], "figures_dir": " "}, "figures_dir must be a non-empty text"),
                         ({"result_files": [1], "figures_dir": "f"}, "result_files must be a list of texts")):
        with pytest.raises(ParameterError, match=said):
            notebook.check_parameters(values, set(), expected)


def test_nbconvert_execute_runs_the_defaults_anywhere(tmp_path):
    runs = tmp_path / "runs"
    done = _run(sys.executable, "-m", "jupyter", "nbconvert", "--execute", "--to", "notebook",
                "--output-dir", str(tmp_path), str(REPO / "notebooks/study.ipynb"), cwd=tmp_path,
                ROLLOUT_STUDY_RUNS=str(runs))
    assert done.returncode == 0, done.stderr[-3000:]
    [folder] = list(runs.iterdir())
    result = Result.read(folder / "result.json")
    assert result.run_name == "adhoc" and result.metadata["workload"]["requests"] == 8
    assert "nbconvert" in result.metadata["command"]


# -- failing cells ----------------------------------------------------------------------------
def _notebooks_with(tmp_path: Path, first_line: str, new_source: str) -> Path:
    """Copies of the notebooks where the study cell starting with `first_line` is replaced."""
    folder = tmp_path / "notebooks"
    folder.mkdir()
    study = nbformat.read(str(REPO / "notebooks/study.ipynb"), as_version=4)
    [cell] = [cell for cell in study.cells if cell.source.startswith(first_line)]
    cell.source = new_source
    nbformat.write(study, str(folder / "study.ipynb"))
    shutil.copy(REPO / "notebooks/report.ipynb", folder / "report.ipynb")
    return folder


def _study(tmp_path: Path, notebooks: Path) -> tuple[list[str], Path]:
    from rollout_study.cli_params import load_params

    folder = tmp_path / "run"
    folder.mkdir()
    params = load_params(REPO / "params/cpu-smoke.yaml", {"cold_starts": 0})
    with pipeline.kernel_environment():
        problems = pipeline.study_step(folder, params.to_dict(), "test", progress=False, notebooks=notebooks)
        if (folder / "result.json").exists():
            problems += pipeline.report_step(folder, progress=False, notebooks=notebooks)
    return problems, folder


def test_failing_cell_is_named_and_its_notebook_kept(tmp_path, capsys):
    notebooks = _notebooks_with(tmp_path, "from rollout_study.launch import", "raise ValueError('broken on purpose')")
    problems, folder = _study(tmp_path, notebooks)
    err = capsys.readouterr().err
    number = 1 + [c.source for c in nbformat.read(str(notebooks / "study.ipynb"), as_version=4).cells].index(
        "raise ValueError('broken on purpose')")
    assert len(problems) == 1 and f"study.ipynb failed at cell {number} (In [" in err
    assert "ValueError: broken on purpose" in err
    assert (folder / "study.ipynb").is_file() and (folder / "study.html").is_file()
    assert not (folder / "result.json").exists()


def test_invalid_result_fails_the_study_but_is_still_reported(tmp_path, capsys):
    fixture = tmp_path / "invalid.json"
    fixture.write_text(json.dumps(make_invalid_result_dict()), encoding="utf-8")
    notebooks = _notebooks_with(tmp_path, "from rollout_study.launch import",
                                f"from rollout_study.result import Result\n\nresult = Result.read({str(fixture)!r})")
    problems, folder = _study(tmp_path, notebooks)
    err = capsys.readouterr().err
    assert problems and "InvalidResult: the result is invalid" in err and "without parity" in err
    assert Result.read(folder / "result.json").valid is False
    assert "INVALID" in (folder / "report.html").read_text(encoding="utf-8")


def _failing_papermill(monkeypatch):
    """papermill as it fails at a cell: the executed notebook written (here the source, as is), then the error."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    def execute(source, executed, **kwargs):
        shutil.copy(source, executed)
        raise PapermillExecutionError(3, 1, "raise ValueError('broken')", "ValueError", "broken", [])

    monkeypatch.setattr(papermill, "execute_notebook", execute)


def _kept(err: str) -> str:
    [line] = [line for line in err.splitlines() if line.startswith("executed notebook kept for inspection: ")]
    return line.split(": ", 1)[1]


def test_a_failed_run_names_its_notebook_where_it_is_once_the_run_ends(tmp_path, capsys, monkeypatch):
    """The run's partial folder is renamed when it ends: the failure names the folder that follows."""
    from rollout_study import cli

    _failing_papermill(monkeypatch)
    assert cli.main(["run", "params/cpu-smoke.yaml", "--output-root", str(tmp_path), "--quiet"]) == cli.EXIT_FAILED
    err = capsys.readouterr().err
    assert _kept(err) == "study.ipynb in the run folder (renamed when the run ends: 'run folder:' below)"
    [folder] = [line.split(": ", 1)[1] for line in err.splitlines() if line.startswith("run folder: ")]
    assert (Path(folder) / "study.ipynb").is_file() and ".partial-" not in err.split("error:", 1)[1]


def test_a_failed_rebuild_keeps_the_notebook_its_failure_names(tmp_path, capsys, monkeypatch):
    from rollout_study import cli

    folder = tmp_path / "copied"
    folder.mkdir()
    (folder / "result.json").write_text(json.dumps(make_invalid_result_dict()), encoding="utf-8")
    _failing_papermill(monkeypatch)
    assert cli.main(["report", str(folder), "--quiet"]) == cli.EXIT_FAILED
    kept = Path(_kept(capsys.readouterr().err))
    assert kept.is_file() and kept.name == "report.ipynb" and kept.parent.parent == tmp_path
    assert sorted(p.name for p in folder.iterdir()) == ["result.json"]  # the folder itself unchanged


def test_a_cell_failure_names_the_notebook_by_its_repository_path_its_first_written_line_and_the_cell_it_ran_as():
    """A source the source notebook does not hold once (papermill's injected cell): numbered as it ran, from 1."""
    from papermill.exceptions import PapermillExecutionError

    executed = Path("/elsewhere/study.ipynb")
    error = PapermillExecutionError(3, 2, "\n   \n  # set up\nx = 1 / 0", "ZeroDivisionError", "division by zero", [])
    said = pipeline.describe_cell_failure(REPO / "notebooks" / "study.ipynb", executed, error,
                                          pipeline.kept_as(executed, "the run folder"))
    assert said == ("notebooks/study.ipynb failed at cell 4 of the executed notebook (In [2]): # set up\n"
                    "ZeroDivisionError: division by zero\n"
                    "executed notebook kept for inspection: study.ipynb in the run folder")
    assert pipeline.relative(executed) == str(executed)  # outside the repository: as it is


def test_a_notebook_that_never_reached_a_cell_is_named_with_its_error_and_where_its_notebook_would_be(
        tmp_path, monkeypatch):
    import papermill

    def execute(source, executed, **kwargs):
        raise RuntimeError("Kernel died before replying to kernel_info")

    monkeypatch.setattr(papermill, "execute_notebook", execute)
    executed = tmp_path / "study.ipynb"
    with pytest.raises(pipeline.NotebookFailure) as failure:
        pipeline.execute_notebook(REPO / "notebooks" / "study.ipynb", executed, {}, progress=False, cwd=tmp_path,
                                  kept=pipeline.kept_as(executed, "the run folder"))
    assert str(failure.value) == ("notebooks/study.ipynb could not run: RuntimeError: Kernel died before replying to "
                                  "kernel_info\nexecuted notebook (if any): study.ipynb in the run folder")


def test_the_study_step_runs_in_its_folder_and_names_a_checkpoint_folder_from_where_the_command_ran(
        tmp_path, monkeypatch):
    (tmp_path / "ckpt").mkdir()
    folder = tmp_path / "run"
    folder.mkdir()
    monkeypatch.chdir(tmp_path)
    ran = []
    monkeypatch.setattr(pipeline, "execute_notebook", lambda notebook, executed, parameters, progress, cwd, kept:
                        ran.append((notebook, executed, parameters, cwd, kept)))
    for model, seen in (("ckpt", str(tmp_path / "ckpt")), ("synthetic", "synthetic")):
        # no executed notebook here (execute_notebook replaced): no page to draw, no problem
        assert pipeline.study_step(folder, {"model": model, "requests": 2}, "python -m rollout_study", False,
                                   notebooks=tmp_path / "nb", folder_shown="the run folder") == []
        assert ran.pop() == (tmp_path / "nb" / "study.ipynb", folder / "study.ipynb",
                             {"model": seen, "requests": 2, "output_dir": ".", "command": "python -m rollout_study"},
                             folder, "study.ipynb in the run folder")


def test_a_report_step_starts_from_a_bare_folder_and_says_each_step_that_failed(tmp_path, monkeypatch, capsys):
    """Earlier outputs go first (a figure no longer drawn would read as part of the new report, a page as the
    notebook's that failed); a step that fails is a problem said, and the next step still runs."""
    from result_fixture import make_result

    folder = tmp_path / "run"
    (folder / "figures").mkdir(parents=True)
    (folder / "figures" / "a-figure-no-longer-drawn.png").write_bytes(b"stale")
    for name in ("summary.md", "report.html", "report.ipynb"):
        (folder / name).write_text("stale", encoding="utf-8")
    make_result().write(folder / "result.json")
    ran = []

    def execute(notebook, executed, parameters, progress, cwd, kept):
        ran.append((notebook, executed, parameters, cwd))
        raise pipeline.NotebookFailure("report.ipynb failed on purpose")

    monkeypatch.setattr(pipeline, "execute_notebook", execute)
    assert pipeline.report_step(folder, False, notebooks=tmp_path / "nb") == ["report.ipynb failed on purpose"]
    assert ran.pop() == (tmp_path / "nb" / "report.ipynb", folder / "report.ipynb",
                         {"result_files": ["result.json"], "figures_dir": "figures"}, folder)
    assert sorted(p.name for p in folder.iterdir()) == ["result.json", "summary.md"]
    assert (folder / "summary.md").read_text(encoding="utf-8").startswith("# fixture: synthetic model ")
    (folder / "result.json").unlink()  # nothing to summarize: said, and the notebook still runs
    capsys.readouterr()
    problems = pipeline.report_step(folder, False, notebooks=tmp_path / "nb")
    assert problems[0].startswith("writing summary.md failed: FileNotFoundError: ") and len(ran) == 1
    assert problems[1:] == ["report.ipynb failed on purpose"] and not (folder / "summary.md").exists()
    assert f"error: {problems[0]}" in capsys.readouterr().err


def test_scrub_leaves_nothing_that_changes_from_one_execution_to_the_next(tmp_path):
    """What papermill and nbclient write of an execution's time, place and widgets (a progress bar's state, with its
    random ids) goes; the parameters and outputs stay."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("x")])
    times = {"start_time": "2026-01-01T00:00:00", "end_time": "2026-01-01T00:01:00", "duration": 60.0}
    notebook.metadata.update(papermill={**times, "input_path": "/a/study.ipynb", "output_path": "/b/study.ipynb",
                                        "parameters": {"requests": 2}},
                             widgets={"application/vnd.jupyter.widget-state+json": {"state": {"9f3c": {}}}})
    for cell in notebook.cells:
        cell.metadata.update(papermill={**times, "exception": False, "status": "completed"},
                             execution={"iopub.status.busy": "2026-01-01T00:00:00"})
    executed = tmp_path / "executed.ipynb"
    nbformat.write(notebook, str(executed))
    pipeline.scrub(executed)
    scrubbed = nbformat.read(str(executed), as_version=4)
    assert scrubbed.metadata == {"papermill": {"parameters": {"requests": 2}}}
    assert [cell.id for cell in scrubbed.cells] == ["cell-0", "cell-1"]
    assert all(cell.metadata == {"papermill": {"exception": False, "status": "completed"}} for cell in scrubbed.cells)
    assert [cell.source for cell in scrubbed.cells] == ["x = 1", "x"]


# -- kernel -----------------------------------------------------------------------------------
def test_kernel_command_lines_that_run_this_interpreter():
    assert pipeline.runs_this_interpreter(["python", "-m", "ipykernel_launcher"])
    assert pipeline.runs_this_interpreter([sys.executable, "-m", "ipykernel_launcher"])
    assert not pipeline.runs_this_interpreter(["/nonexistent/python2.7", "-m", "ipykernel_launcher"])


def test_foreign_python3_kernelspec_is_shadowed(tmp_path, monkeypatch):
    foreign = tmp_path / "kernels" / "python3"
    foreign.mkdir(parents=True)
    (foreign / "kernel.json").write_text(json.dumps(
        {"argv": ["/nonexistent/python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
         "display_name": "other", "language": "python"}), encoding="utf-8")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")  # as a notebook server sets it
    assert pipeline.kernel_argv()[0] == "/nonexistent/python"
    with pipeline.kernel_environment():
        assert pipeline.kernel_argv()[0] == sys.executable
        assert os.environ["PYTHONPATH"].split(os.pathsep)[0] == str(REPO)
        assert os.environ["MPLBACKEND"] == "Agg"  # figures are files; some matplotlib builds refuse module://
    assert os.environ["JUPYTER_PATH"] == str(tmp_path) and "PYTHONPATH" not in os.environ
    assert os.environ["MPLBACKEND"] == "module://matplotlib_inline.backend_inline"


def test_source_notebooks_are_committed_without_outputs():
    for name in ("study.ipynb", "report.ipynb"):
        notebook = nbformat.read(str(REPO / "notebooks" / name), as_version=4)
        assert all(not c.get("outputs") and c.get("execution_count") is None
                   for c in notebook.cells if c.cell_type == "code"), name


def test_study_parameters_cell_holds_every_parameter():
    import dataclasses

    from rollout_study.params import StudyParams

    notebook = nbformat.read(str(REPO / "notebooks/study.ipynb"), as_version=4)
    [cell] = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
    namespace: dict = {}
    exec(cell.source, namespace)
    assert StudyParams.from_namespace(namespace) == StudyParams()
    # Run as the notebook runs it: only the parameters cell's own names since the names cell, none refused
    names = [c for c in notebook.cells if "_before_parameters =" in c.source]
    assert len(names) == 1 and notebook.cells.index(names[0]) < notebook.cells.index(cell)
    fresh: dict = {"__name__": "__main__", "_i1": "", "_1": None}
    exec(names[0].source, fresh)
    exec(cell.source, fresh)
    assert StudyParams.from_namespace(fresh, before=fresh["_before_parameters"]) == StudyParams()
    assert {f.name for f in dataclasses.fields(StudyParams)} <= set(namespace)
