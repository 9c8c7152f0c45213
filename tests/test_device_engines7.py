"""tools/h200-reports.sh's engines7 runs (inner-engines7, the background half of `engines7`, and
engines7-foreground) run whole in a tree of their own (STATE_DIR in place of the device's /tmp) with stand-ins on
PATH: a python3 whose `-m pytest` prints a given CUDA-test log and whose `-m rollout_study` notes its arguments and
leaves a new run folder, exiting with the status a test gives that study (or, where a test says so, crashes in an
unfinished one); the rest the real interpreter. Each run's marker says it ended; what failed is said last, and the
step's status is a failure's, as is that of a `hold` on the last marker (the background step's status reaches no
call)."""
import os
import subprocess
import sys
import time
from pathlib import Path

from device_tree import archive_paths, script, with_stand_ins

PYTHON3 = """case "$1 $2" in
  "-m rollout_study")
    echo "$*" >> {tmp}/events
    name=$(basename "$4" .yaml) n=$(ls -d runs/"$name"-2* 2>/dev/null | wc -l)  # a new folder each call
    if [ -e {tmp}/crash-$name ]; then mkdir -p "runs/.$name.partial-x$n"; exit 134; fi  # in its unfinished one
    [ -e {tmp}/lost-$name ] && exit 137  # killed before its folder was made
    mkdir -p "runs/$name-20261207-00000$n" && echo "$name" > "runs/$name-20261207-00000$n/study.txt"
    exit "$(cat {tmp}/status-$name 2>/dev/null || echo 0)" ;;
  "-m pytest")
    echo "$*" >> {tmp}/events; cat {tmp}/tests.log; exit 0 ;;
esac
exec {python} "$@"
"""
PASSED = "tests/test_cuda.py::test_graph_capture PASSED\n==== 6 passed in 12.30s ====\n"
FAILED = "tests/test_cuda.py::test_graph_capture FAILED\n==== 1 failed, 5 passed in 12.30s ====\n"
TESTS = "-m pytest -m cuda -v tests/test_cuda.py -p no:cacheprovider"
TINY = "-m rollout_study run params/reference-tiny-all.yaml --quiet"
STUDY = "-m rollout_study run params/reference-tiny.yaml --quiet"
SWEEP = "-m rollout_study sweep params/sweep-cpu.yaml --quiet"


def _engines7(tmp_path: Path, step: str = "inner-engines7", tests: str = PASSED,
              **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """STEP in tmp_path/tree, whose code and parameter files are this checkout's, packing into STATE_DIR's out/ as
    `engines7` has its background step do: what it said, and what it ran (the stand-ins' calls, in order)."""
    (tmp_path / "tests.log").write_text(tests)
    return with_stand_ins(tmp_path, step, {"python3": PYTHON3.format(tmp=tmp_path, python=sys.executable)},
                          PACK=str(tmp_path / "out"), **env)


def test_every_run_ends_with_its_marker_and_the_step_passes_where_none_failed(tmp_path):
    done, ran = _engines7(tmp_path, SMOL_RUNS="reference-tiny sweep-cpu")
    assert done.returncode == 0, done.stdout + done.stderr
    assert ran == [TESTS, TINY, STUDY, SWEEP]
    assert done.stdout.endswith("REFERENCE-TINY-DONE\nSWEEP-CPU-DONE\nENGINES7-DONE\n"), done.stdout
    assert "TINY-DONE" in done.stdout and "failed" not in done.stdout
    assert archive_paths(tmp_path / "out" / "sweep-cpu.tgz")[0] == "sweep-cpu-20261207-000000"


def test_a_failed_run_is_said_before_the_last_marker_and_fails_the_step_after_the_runs_that_follow_it(tmp_path):
    (tmp_path / "status-reference-tiny-all").write_text("1")
    (tmp_path / "status-sweep-cpu").write_text("1")  # a failed point
    done, ran = _engines7(tmp_path, SMOL_RUNS="reference-tiny sweep-cpu")
    assert done.returncode == 1, done.stdout + done.stderr
    assert ran == [TESTS, TINY, STUDY, SWEEP]  # the runs after a failed one still run
    assert done.stdout.endswith(
        "SWEEP-CPU-DONE\nfailed: reference-tiny-all sweep-cpu (a run's folder, where it made one, is packed)\n"
        "ENGINES7-DONE\n"), done.stdout
    assert ("reference-tiny-all exited 1 (said above); its run folder is packed\nfailed: reference-tiny-all\n"
            "TINY-DONE\n") in done.stdout
    assert "failed: sweep-cpu\nSWEEP-CPU-DONE\n" in done.stdout and "\nREFERENCE-TINY-DONE\n" in done.stdout
    assert archive_paths(tmp_path / "out" / "reference-tiny-all.tgz")  # its folder comes back, it says why it failed
    assert archive_paths(tmp_path / "out" / "reference-tiny.tgz")


def test_failed_cuda_tests_run_no_study_and_fail_the_step(tmp_path):
    done, ran = _engines7(tmp_path, tests=FAILED, SMOL_RUNS="reference-tiny")
    assert done.returncode == 1, done.stdout + done.stderr
    assert ran == [TESTS]
    assert done.stdout.endswith("CUDA tests failed: no study runs\nfailed: the CUDA tests "
                                "(a run's folder, where it made one, is packed)\nENGINES7-DONE\n"), done.stdout
    # SMOL_ONLY=1: no tests, the studies alone
    done, ran = _engines7(tmp_path, tests=FAILED, SMOL_RUNS="reference-tiny", SMOL_ONLY="1")
    assert done.returncode == 0 and ran == [STUDY], done.stdout + done.stderr


def test_the_foreground_step_fails_with_its_tiny_run_after_listing_what_it_brings_back(tmp_path):
    done, ran = _engines7(tmp_path, "engines7-foreground")
    assert done.returncode == 0 and ran == [TESTS, TINY], done.stdout + done.stderr
    assert (tmp_path / "reference-tiny-all.tgz").is_file()  # delivered into OUT as it was made
    (tmp_path / "status-reference-tiny-all").write_text("2")
    (tmp_path / "reference-tiny-all.tgz").unlink()  # this call's, not the last one's, is listed
    done, ran = _engines7(tmp_path, "engines7-foreground")
    assert done.returncode == 1 and ran == [TESTS, TINY], done.stdout + done.stderr
    assert ("reference-tiny-all exited 2 (said above); its run folder is packed\nfailed: reference-tiny-all\n"
            "TINY-DONE\n") in done.stdout
    assert archive_paths(tmp_path / "reference-tiny-all.tgz")[0] == "reference-tiny-all-20261207-000001"
    said = done.stdout.split("failed: reference-tiny-all (a run's folder, where it made one, is packed)\n"
                             "ENGINES7-DONE\n", 1)
    assert len(said) == 2 and "reference-tiny-all.tgz" in said[1] and "cuda-tests.txt" in said[1], done.stdout


def test_the_foreground_step_brings_back_the_unfinished_folder_of_a_tiny_run_that_crashed(tmp_path):
    (tmp_path / "crash-reference-tiny-all").touch()
    done, ran = _engines7(tmp_path, "engines7-foreground")
    assert done.returncode == 1 and ran == [TESTS, TINY], done.stdout + done.stderr
    assert "packed as reference-tiny-all.partial.tgz\nfailed: reference-tiny-all\nTINY-DONE\n" in done.stdout
    # delivered into OUT as it was made, as the finished run's pack would be
    assert archive_paths(tmp_path / "reference-tiny-all.partial.tgz") == [".reference-tiny-all.partial-x0"]


def test_the_foreground_step_brings_back_no_earlier_calls_pack_where_its_run_made_none(tmp_path):
    # A warm machine: an earlier call's packs of the tiny run, its finished folder's and a crash's, are in /tmp/out
    (tmp_path / "out").mkdir()
    for name in ("reference-tiny-all.tgz", "reference-tiny-all.partial.tgz"):
        (tmp_path / "out" / name).write_text("an earlier call's")
        os.utime(tmp_path / "out" / name, (time.time() - 600,) * 2)
    (tmp_path / "lost-reference-tiny-all").touch()
    done, ran = _engines7(tmp_path, "engines7-foreground")
    assert done.returncode == 1 and ran == [TESTS, TINY], done.stdout + done.stderr
    assert "reference-tiny-all left no new run folder (it exited 137); nothing packed" in done.stdout
    assert (tmp_path / "cuda-tests.txt").is_file()  # this call's
    assert not list(tmp_path.glob("reference-tiny-all*.tgz")), done.stdout
    # where it finishes, its own pack comes back, and not the earlier crash's
    (tmp_path / "lost-reference-tiny-all").unlink()
    done, ran = _engines7(tmp_path, "engines7-foreground")
    assert done.returncode == 0 and archive_paths(tmp_path / "reference-tiny-all.tgz"), done.stdout + done.stderr
    assert not (tmp_path / "reference-tiny-all.partial.tgz").exists()


def test_a_hold_fails_after_its_fetch_where_the_step_said_its_markers_run_failed(tmp_path):
    # The background step's own exit 1 reaches no call: `hold` reads its verdict, the line before the marker
    out = tmp_path / "call"
    out.mkdir()
    for status, verdict in (("0", 0), ("1", 1)):
        (tmp_path / "status-reference-tiny-all").write_text(status)
        done, _ = _engines7(tmp_path, SMOL_RUNS="none")
        (tmp_path / "i11g.log").write_text(done.stdout)  # as `background` logs it
        held = script(tmp_path, "hold", "ENGINES7-DONE", "5", OUT=str(out))
        assert held.returncode == verdict, held.stdout + held.stderr
        said = ("error: the step that logged ENGINES7-DONE says failed: reference-tiny-all (a run's folder, "
                "where it made one, is packed)\n")
        assert (said in held.stdout) == bool(verdict), held.stdout
        assert (out / "reference-tiny-all.tgz").is_file()  # fetched, failed or not
        (out / "reference-tiny-all.tgz").unlink()
    # the tiny run's own marker, its failure just before
    held = script(tmp_path, "hold", "TINY-DONE", "5", OUT=str(out))
    assert held.returncode == 1 and "held 0 s for TINY-DONE: logged" in held.stdout, held.stdout
    assert "error: the step that logged TINY-DONE says failed: reference-tiny-all\n" in held.stdout, held.stdout
    # each marker its own run's verdict: an earlier run's failure is not a later marker's (REFERENCE-TINY-DONE
    # passes after the tiny run failed), nor is REFERENCE-TINY-DONE's TINY-DONE's (and the other way round)
    for tiny, reference in (("1", "0"), ("0", "1")):
        (tmp_path / "status-reference-tiny-all").write_text(tiny)
        (tmp_path / "status-reference-tiny").write_text(reference)
        (tmp_path / "status-sweep-cpu").write_text("1")
        done, _ = _engines7(tmp_path, SMOL_RUNS="reference-tiny sweep-cpu")
        (tmp_path / "i11g.log").write_text(done.stdout)
        for marker, name, verdict in (("TINY-DONE", "reference-tiny-all", int(tiny)),
                                      ("REFERENCE-TINY-DONE", "reference-tiny", int(reference)),
                                      ("SWEEP-CPU-DONE", "sweep-cpu", 1)):
            held = script(tmp_path, "hold", marker, "5", OUT=str(out))
            assert held.returncode == verdict and f"held 0 s for {marker}: logged" in held.stdout, held.stdout
            assert (f"says failed: {name}\n" in held.stdout) == bool(verdict), held.stdout
    # SMOL_ONLY=1 logs no TINY-DONE: REFERENCE-TINY-DONE is not it (no step runs here, so said at once)
    done, _ = _engines7(tmp_path, SMOL_RUNS="reference-tiny", SMOL_ONLY="1")
    (tmp_path / "i11g.log").write_text(done.stdout)
    held = script(tmp_path, "hold", "TINY-DONE", "5", OUT=str(out))
    assert held.returncode == 1 and "no log has TINY-DONE" in held.stdout, held.stdout
    # failed CUDA tests: no run, and the verdict names them
    done, _ = _engines7(tmp_path, tests=FAILED, SMOL_RUNS="none")
    (tmp_path / "i11g.log").write_text(done.stdout)
    held = script(tmp_path, "hold", "ENGINES7-DONE", "5", OUT=str(out))
    assert held.returncode == 1 and "says failed: the CUDA tests (a run's" in held.stdout, held.stdout
