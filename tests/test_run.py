"""run.py: `python -m rollout_study run` end to end on CPU through papermill, and its failure paths.

Every run writes into a temporary output root, never into the committed reports/.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from result_fixture import make_invalid_result
from rollout_study import report, results, run
from rollout_study.params import ParameterError

REPO = Path(__file__).resolve().parent.parent


def _env() -> dict:
    # One BLAS thread: on a shared two-core machine OpenMP spin-waits make oversubscribed runs many times slower.
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def _cli(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rollout_study", *args], cwd=REPO, env=_env(), capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    root = tmp_path_factory.mktemp("reports")
    done = _cli("run", "params/cpu-smoke.yaml", "--output-root", str(root), "--quiet")
    return root, done


def test_smoke_run_succeeds(smoke):
    root, done = smoke
    assert done.returncode == 0, done.stderr[-3000:]
    folder = root / "cpu-smoke"
    for name in ("study.ipynb", "result.json", "summary.md", "study.html", "report.ipynb", "report.html"):
        assert (folder / name).is_file(), name
    assert "| graph[reuse] | 0 | steady |" in (folder / "summary.md").read_text(encoding="utf-8")
    result = results.read(str(folder / "result.json"))
    assert result["valid"] and result["metadata"]["run_name"] == "cpu-smoke"
    assert result["metadata"]["workload"]["batch_sizes"] == [4, 2]  # the last batch is partial


def test_figures_are_pngs_at_most_one_folder_deep(smoke):
    folder = smoke[0] / "cpu-smoke"
    pngs = [p.relative_to(folder) for p in folder.rglob("*.png")]
    assert len(pngs) == len(report.FIGURES)
    assert all(len(p.parts) <= 2 for p in pngs)


def test_report_html_has_tables_labels_and_no_code(smoke):
    page = (smoke[0] / "cpu-smoke" / "report.html").read_text(encoding="utf-8")
    assert "Synthetic model: tiny-llama" in page
    assert report.NO_GRAPH_NOTE in page
    for caption in ("Latency per phase", "Targets of the issues", "Break-even rollouts per update", "Cold starts", "Training updates",
                    "Metadata", "median ms", "<table"):
        assert caption in page, caption
    assert "data:image/png;base64" in page
    assert "report.show(" not in page and "read_results(" not in page  # inputs excluded
    assert "Pretrained model:" not in page


def test_study_html_keeps_the_code(smoke):
    page = (smoke[0] / "cpu-smoke" / "study.html").read_text(encoding="utf-8")
    assert "run_study" in page and "valid: True" in page


def test_index_lists_the_report(smoke):
    page = (smoke[0] / "index.html").read_text(encoding="utf-8")
    assert "cpu-smoke/report.html" in page and "Synthetic model runs" in page
    assert "CPU: " in page and ">valid<" in page


# -- refused parameters -----------------------------------------------------------------------
def test_unknown_key_exits_2_naming_it_and_writes_nothing(tmp_path):
    params = tmp_path / "broken.yaml"
    params.write_text("requests: 6\nrequestz: 3\n", encoding="utf-8")
    done = _cli("run", str(params), "--output-root", str(tmp_path / "out"), timeout=120)
    assert done.returncode == 2
    assert "unknown parameter(s) requestz" in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("text, overrides, key", [
    ("requests: 0\n", [], "requests must be"),
    ("requests: 6\n", ["--set", "iterations=0"], "iterations must be"),
    ("requests: 6\n", ["--set", "colour=red"], "unknown parameter(s) colour"),
    ("name: ../escape\n", [], "name '../escape'"),
])
def test_out_of_range_values_exit_2_naming_the_key(tmp_path, capsys, text, overrides, key):
    params = tmp_path / "broken.yaml"
    params.write_text(text, encoding="utf-8")
    status = run.main(["run", str(params), "--output-root", str(tmp_path / "out"), *overrides])
    assert status == 2
    assert key in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_overrides_keep_their_types():
    assert run.parse_overrides(["iterations=3", "lr=0.5", "engines=[eager]", "profile=false"]) == {
        "iterations": 3, "lr": 0.5, "engines": ["eager"], "profile": False}
    with pytest.raises(ParameterError, match="key=value"):
        run.parse_override("iterations")
    assert run.load_params(REPO / "params/cpu-smoke.yaml", {"iterations": 5}).iterations == 5


def test_parameter_files_validate():
    tiny = run.load_params(REPO / "params/reference-tiny.yaml")
    assert (tiny.requests, tiny.batch_size, tiny.prompt_len, tiny.max_new_tokens, tiny.iterations, tiny.cycles,
            tiny.policy, tiny.cold_starts, tiny.name) == (8, 4, 32, 32, 10, 2, "both", 3, "reference-tiny")
    smoke = run.load_params(REPO / "params/cpu-smoke.yaml")
    assert smoke.device == "cpu" and smoke.requests % smoke.batch_size != 0


# -- failing cells ----------------------------------------------------------------------------
def _notebooks_with(tmp_path: Path, replace_first_line: str, new_source: str) -> Path:
    """Copies of the notebooks where the study cell starting with `replace_first_line` is replaced."""
    folder = tmp_path / "notebooks"
    folder.mkdir()
    study = nbformat.read(str(REPO / "notebooks/study.ipynb"), as_version=4)
    cells = [cell for cell in study.cells if cell.source.startswith(replace_first_line)]
    assert len(cells) == 1
    cells[0].source = new_source
    nbformat.write(study, str(folder / "study.ipynb"))
    (folder / "report.ipynb").write_text((REPO / "notebooks/report.ipynb").read_text(encoding="utf-8"),
                                         encoding="utf-8")
    return folder


def test_failing_cell_is_named_and_its_notebook_kept(tmp_path, capsys):
    notebooks = _notebooks_with(tmp_path, "from rollout_study.study import", "raise ValueError('broken on purpose')")
    status = run.run(REPO / "params/cpu-smoke.yaml", tmp_path / "out", progress=False, notebooks=notebooks)
    err = capsys.readouterr().err
    assert status == 1
    number = 1 + [c.source for c in nbformat.read(str(notebooks / "study.ipynb"), as_version=4).cells].index(
        "raise ValueError('broken on purpose')")
    assert f"study.ipynb failed at cell {number} (In [" in err
    assert "raise ValueError('broken on purpose')" in err and "ValueError: broken on purpose" in err
    folder = tmp_path / "out" / "cpu-smoke"
    assert (folder / "study.ipynb").is_file() and (folder / "study.html").is_file()
    assert not (folder / "result.json").exists() and not (folder / "report.html").exists()
    assert "cpu-smoke" in (tmp_path / "out" / "index.html").read_text(encoding="utf-8")


def test_invalid_result_fails_the_study_but_is_still_reported(tmp_path, capsys):
    fixture = tmp_path / "invalid.json"
    fixture.write_text(json.dumps(make_invalid_result()), encoding="utf-8")
    notebooks = _notebooks_with(tmp_path, "from rollout_study.study import",
                                f"import json\n\nresult = json.load(open({str(fixture)!r}))")
    status = run.run(REPO / "params/cpu-smoke.yaml", tmp_path / "out", progress=False, notebooks=notebooks)
    err = capsys.readouterr().err
    assert status == 1
    assert "InvalidResult" in err and "parity failed on 1 call(s)" in err and 'if not result["valid"]:' in err
    folder = tmp_path / "out" / "cpu-smoke"
    assert results.read(str(folder / "result.json"))["valid"] is False
    page = (folder / "report.html").read_text(encoding="utf-8")
    assert "INVALID run" in page and "reference_token" in page
    assert ">INVALID<" in (tmp_path / "out" / "index.html").read_text(encoding="utf-8")


# -- kernel -----------------------------------------------------------------------------------
def test_kernel_command_lines_that_run_this_interpreter():
    assert run.runs_this_interpreter(["python", "-m", "ipykernel_launcher"])
    assert run.runs_this_interpreter([sys.executable, "-m", "ipykernel_launcher"])
    assert not run.runs_this_interpreter(["/nonexistent/python2.7", "-m", "ipykernel_launcher"])


def test_foreign_python3_kernelspec_is_shadowed(tmp_path, monkeypatch):
    foreign = tmp_path / "kernels" / "python3"
    foreign.mkdir(parents=True)
    (foreign / "kernel.json").write_text(json.dumps(
        {"argv": ["/nonexistent/python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
         "display_name": "other", "language": "python"}), encoding="utf-8")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert run.kernel_argv()[0] == "/nonexistent/python"
    with run.kernel_environment():
        assert run.kernel_argv()[0] == sys.executable
        assert os.environ["PYTHONPATH"].split(os.pathsep)[0] == str(REPO)
    assert os.environ["JUPYTER_PATH"] == str(tmp_path) and "PYTHONPATH" not in os.environ


def test_report_is_rebuilt_from_a_result_file_alone(smoke, tmp_path):
    """A report folder holding only result.json (a GPU run, say) gets its report back without running the study."""
    import shutil

    folder = tmp_path / "copied"
    folder.mkdir()
    shutil.copy(smoke[0] / "cpu-smoke" / "result.json", folder / "result.json")
    done = _cli("report", str(folder), "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("summary.md", "report.ipynb", "report.html"):
        assert (folder / name).is_file(), name
    assert "Synthetic model: tiny-llama" in (folder / "report.html").read_text(encoding="utf-8")
    assert "copied/report.html" in (tmp_path / "index.html").read_text(encoding="utf-8")
    missing = _cli("report", str(tmp_path / "nothing-here"), "--quiet")
    assert missing.returncode == 2 and "result.json does not exist" in missing.stderr


def test_source_notebook_cites_public_practice():
    text = (Path(__file__).resolve().parent.parent / "notebooks" / "report.ipynb").read_text(encoding="utf-8")
    assert "NVIDIA-NeMo/RL#2895" in text and "sgl-project/sglang#10088" in text


def test_main_job_default_follows_cuda(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert run.default_params_file().name == "cpu-smoke.yaml"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert run.default_params_file().name == "reference-tiny.yaml"


def test_readme_main_command_runs_the_default():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    import re

    command = re.search(r"<!-- main-command -->\s*```sh\n(.+?)\n```", readme, re.S).group(1)
    assert command.strip().endswith("python3 -m rollout_study run")
