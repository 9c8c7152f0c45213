"""The sweep runner's guards: one sweep at a time per folder (a lock), a point whose name is too long for a file
name, a point past its time, and a sweep stopped before any point. Fake points and fake processes: fast."""
import errno
import fcntl
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from checkpoint_fixture import fake_checkpoint
from result_fixture import make_invalid_result, make_result_dict, sweep_point
from rollout_study import cli, launch, pipeline, publish, repeats, sweep, sweep_lock
from rollout_study.launch import LaunchError
from rollout_study.param_values import ParameterError
from rollout_study.params import StudyParams
from rollout_study.record import Failure
from rollout_study.result import Result
from rollout_study.sweep_lock import LOCK_FILE, SweepLockedError, locked

REPO = Path(__file__).resolve().parent.parent
CPU = REPO / "params" / "sweep-cpu.yaml"
MEASURED = sweep_point(1, 4, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (5, 10.0, 1, 1)})


def _spec(**values) -> sweep.SweepSpec:
    """params/sweep-cpu.yaml's two points, with no repeat, and `values` over its keys."""
    return sweep.SweepSpec.from_dict({**sweep.SweepSpec.from_yaml(str(CPU)).to_dict(), "repeat_alone": 0, **values})


def _failing(params):
    raise RuntimeError("out of memory (simulated)")


def _files(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _holder(folder: Path) -> subprocess.Popen:
    """Another process holding `folder`'s sweep lock until its standard input closes."""
    code = ("import sys\nfrom rollout_study.sweep_lock import locked\nwith locked(sys.argv[1]):\n"
            "    print('held', flush=True)\n    sys.stdin.read()\n")
    process = subprocess.Popen([sys.executable, "-c", code, str(folder)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert process.stdout.readline() == "held\n"
    return process


def _held_elsewhere(folder: Path) -> bool:
    """Whether the folder's lock is held: tried through an open file of its own, as another process would."""
    probe = os.open(folder / LOCK_FILE, os.O_RDWR)
    try:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(probe)


def test_a_second_sweep_into_a_locked_folder_is_refused_naming_the_holder_and_writes_nothing(
        tmp_path, capsys, monkeypatch):
    # Two sweeps into one folder once both ran a point, and one's failure deleted the other's valid result
    spec, folder = _spec(), tmp_path / "sweep"
    sweep.run_local(spec, folder, progress=False, launcher=_failing)  # a sweep folder to resume
    file = tmp_path / "sweep-cpu.yaml"
    file.write_text(yaml.safe_dump(spec.to_dict()), encoding="utf-8")
    launched, reported = [], []
    monkeypatch.setattr(launch, "fresh_process", lambda params, mode: launched.append(params.name) or MEASURED)
    monkeypatch.setattr(pipeline, "sweep_report_step",
                        lambda folder, report, progress, **shown: reported.append(_held_elsewhere(folder)) or [])
    holder = _holder(folder)
    try:
        before = _files(folder)
        assert cli.main(["sweep", str(file), "--into", str(folder), "--quiet"]) == cli.EXIT_BAD_INPUT
        assert f"sweep folder {folder.resolve()} is in use by another sweep (pid {holder.pid} on host " in \
            capsys.readouterr().err
        with pytest.raises(SweepLockedError, match=f"pid {holder.pid} on host .*-c"):
            sweep.run_local(spec, folder, progress=False, launcher=lambda params: launched.append(params) or MEASURED)
        assert launched == reported == [] and _files(folder) == before
    finally:
        holder.stdin.close()
        holder.wait(30)
    assert not (folder / LOCK_FILE).exists()  # its holder removed it as it ended

    def point(params, mode):  # held while the points run (and the report), against any other process
        launched.append(_held_elsewhere(folder.resolve()))
        return MEASURED

    monkeypatch.setattr(launch, "fresh_process", point)
    cli.main(["sweep", str(file), "--into", str(folder), "--quiet"])
    assert launched == [True, True] and reported == [True] and not (folder / LOCK_FILE).exists()
    runs = tmp_path / "runs"  # a new run's folder is renamed while locked: the lock file goes with it, then away
    monkeypatch.setattr(launch, "fresh_process", lambda params, mode: MEASURED)
    cli.main(["sweep", str(file), "--output-root", str(runs), "--quiet"])
    (done,) = [p for p in runs.iterdir() if p.is_dir()]
    assert reported == [True, True] and not done.name.startswith(".") and not (done / LOCK_FILE).exists()


def test_a_sweep_folders_report_is_rebuilt_under_its_lock(tmp_path, capsys, monkeypatch):
    # `report` copies the folder, builds, swaps the copy in: a sweep writing meanwhile lost what it wrote
    spec, folder = _spec(), tmp_path / "sweep"
    sweep.run_local(spec, folder, progress=False, launcher=_failing)
    built = []
    monkeypatch.setattr(pipeline, "sweep_report_step", lambda work, report, progress, **shown: built.append(
        (_held_elsewhere(folder), (work / LOCK_FILE).exists())) or [])
    holder = _holder(folder)
    try:
        before = _files(folder)
        assert cli.main(["report", str(folder), "--quiet"]) == cli.EXIT_BAD_INPUT
        assert f"is in use by another sweep (pid {holder.pid} on host " in capsys.readouterr().err
        assert built == [] and _files(folder) == before
    finally:
        holder.stdin.close()
        holder.wait(30)
    assert cli.main(["report", str(folder), "--quiet"]) == 0
    # held while it built (against any other process), the lock file neither copied into the report nor left
    assert built == [(True, False)] and not (folder / LOCK_FILE).exists()
    assert not list(tmp_path.glob(".sweep.rebuild-*"))


@pytest.mark.parametrize("spec, said", [({"name": "other", "report": "sweep"}, "holds sweep 'other', not 'sweep-cpu'"),
                                        ({"name": "sweep-cpu", "report": "hazards"},
                                         "holds sweep 'sweep-cpu' with report 'hazards', not 'sweep'")])
def test_a_resume_into_a_folder_of_another_sweep_or_report_is_refused_before_any_point(
        tmp_path, capsys, monkeypatch, spec, said):
    # Points of another report's folder would be read by the wrong notebook, and its record overwritten
    folder = tmp_path / "sweep"
    folder.mkdir()
    (folder / sweep.SWEEP_FILE).write_text(json.dumps({"spec": spec, "points": []}), encoding="utf-8")
    monkeypatch.setattr(launch, "fresh_process", lambda params, mode: pytest.fail("a point ran"))
    before = _files(folder)
    assert cli.main(["sweep", str(CPU), "--into", str(folder), "--quiet"]) == cli.EXIT_BAD_INPUT
    assert said in capsys.readouterr().err and _files(folder) == before


def test_an_address_without_the_ray_executor_is_refused_before_any_folder(tmp_path, capsys, monkeypatch):
    # Else the sweep runs locally, the cluster it names never asked, and the device and prompt checks skipped
    monkeypatch.setattr(launch, "fresh_process", lambda params, mode: pytest.fail("a point ran"))
    monkeypatch.setattr(pipeline, "sweep_report_step", lambda *args, **kwargs: pytest.fail("a report was built"))
    runs = tmp_path / "runs"
    assert cli.main(["sweep", str(CPU), "--address", "127.0.0.1:6379", "--output-root", str(runs),
                     "--quiet"]) == cli.EXIT_BAD_INPUT
    assert "--address needs --executor ray" in capsys.readouterr().err and not runs.exists()


def test_a_resumed_partial_folder_gets_its_final_name_when_the_sweep_ends(tmp_path, monkeypatch):
    # An interrupted new run leaves its hidden partial folder: resumed into, it must end as a named run, as a run
    # that was never interrupted does, not stay hidden from the runs index
    runs = tmp_path / "runs"
    partial = publish.start_run(runs, "sweep-cpu")
    sweep.run_local(_spec(), partial, progress=False, launcher=_failing)
    monkeypatch.setattr(launch, "fresh_process", lambda params, mode: MEASURED)
    monkeypatch.setattr(pipeline, "sweep_report_step", lambda *args, **kwargs: [])
    cli.main(["sweep", str(CPU), "--into", str(partial), "--quiet"])
    (done,) = [p for p in runs.iterdir() if p.is_dir()]
    assert not partial.exists() and done.name.startswith("sweep-cpu-") and (done / sweep.SWEEP_FILE).is_file()


def test_a_lock_left_by_a_crash_is_taken_over_and_a_held_one_ends_with_its_sweep_however_it_ends(tmp_path):
    folder = tmp_path / "sweep"
    holder = _holder(folder)
    holder.kill()  # SIGKILL: no clean-up ran; the file stays, naming a process that is gone
    holder.wait(30)
    assert f'"pid": {holder.pid}' in (folder / LOCK_FILE).read_text(encoding="utf-8")
    record = sweep.run_local(_spec(), folder, progress=False, launcher=lambda params: MEASURED)
    assert len(record["points"]) == 2 and not (folder / LOCK_FILE).exists()

    def interrupted(params):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sweep.run_local(_spec(), folder, progress=False, launcher=interrupted)
    assert not (folder / LOCK_FILE).exists()
    moved = tmp_path / "moved"
    with locked(folder) as lock:  # the command's lock, and run_local's within it, are one
        sweep.run_local(_spec(), folder, progress=False, launcher=_failing)
        assert _held_elsewhere(folder)
        folder.rename(moved)  # as the command renames a finished run's folder
        lock.moved(moved)
    assert not (moved / LOCK_FILE).exists()


def test_a_lock_file_left_by_a_crash_is_rewritten_whole_naming_its_new_holder(tmp_path):
    # the old holder's text is longer than the new one's: written over it, its tail made the file unreadable
    folder = tmp_path / "sweep"
    folder.mkdir()
    (folder / LOCK_FILE).write_text(json.dumps({"pid": 1, "command": "x" * 5000}), encoding="utf-8")
    with locked(folder):
        assert json.loads((folder / LOCK_FILE).read_text(encoding="utf-8"))["pid"] == os.getpid()


def test_a_lock_held_before_its_holder_wrote_its_name_is_refused_as_such(tmp_path):
    folder = tmp_path / "sweep"
    folder.mkdir()
    other = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT)  # flocked, still empty: as just after _take's open
    try:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(SweepLockedError, match=r"in use by another sweep \(its holder not recorded yet\)"):
            with locked(folder):
                pass
    finally:
        os.close(other)


def test_a_lock_ends_by_removing_its_own_file_never_a_newer_holders(tmp_path):
    folder = tmp_path / "sweep"
    folder.mkdir()
    first = sweep_lock._take(folder)
    (folder / LOCK_FILE).unlink()  # as a hand or a crash's clean-up would: the next sweep makes a new file
    second = sweep_lock._take(folder)
    first.release()
    assert (folder / LOCK_FILE).exists() and _held_elsewhere(folder)  # the newer sweep's lock stands
    second.release()
    assert not (folder / LOCK_FILE).exists()


def test_a_lock_file_removed_between_open_and_flock_is_not_the_one_held(tmp_path, monkeypatch):
    # its holder ended in between: a flock on the removed file would lock nothing another sweep can see
    folder = tmp_path / "sweep"
    folder.mkdir()
    flock, calls = fcntl.flock, []

    def holder_ends_first(fd, operation):
        calls.append(fd)
        if len(calls) == 1:
            (folder / LOCK_FILE).unlink()
        flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", holder_ends_first)
    lock = sweep_lock._take(folder)
    monkeypatch.setattr(fcntl, "flock", flock)
    try:
        assert len(calls) == 2 and _held_elsewhere(folder)
    finally:
        lock.release()


def test_a_point_whose_name_is_too_long_for_a_file_name_is_recorded_under_a_cut_one(tmp_path):
    # A local checkpoint path of 4 x 60 characters once made a 283-character name, and the sweep stopped
    checkpoint = tmp_path.joinpath(*(c * 60 for c in "abcd"))
    fake_checkpoint(checkpoint)
    spec = _spec(sweep={"model": [str(checkpoint), "synthetic"]})
    record = sweep.run_local(spec, tmp_path / "sweep", progress=False, launcher=lambda params: MEASURED)
    long, short = sorted(record["points"], key=lambda entry: entry["order"])
    name = Path(long["file"]).name
    assert long["status"] == short["status"] == "valid" and len(long["slug"]) > 240
    assert len(name.encode()) == sweep.FILE_SLUG_BYTES + len("-123456789012.json")
    assert name.endswith(f"-{long['hash']}.json") and long["slug"].startswith(name[:sweep.FILE_SLUG_BYTES])
    assert short["file"] == f"points/{short['slug']}-{short['hash']}.json"
    assert [result is not None for _, result in sweep.load(tmp_path / "sweep")[1]] == [True, True]


def test_no_point_of_a_parameter_file_or_a_published_sweep_moves_its_file():
    # A result's file name is its key on resume, in --keep-from and in the published sweeps
    for path in sorted((REPO / "params").glob("*.yaml")):
        if "sweep" not in (yaml.safe_load(path.read_text(encoding="utf-8")) or {}):
            continue
        for slug, params in sweep.SweepSpec.from_yaml(str(path)).points():
            digest = sweep.point_hash(params)
            assert sweep.point_file(sweep.POINTS_FOLDER, slug, digest) == f"points/{slug}-{digest}.json", path
    published = sorted(REPO.glob("reports/*/sweep.json"))
    assert published
    for path in published:
        record = json.loads(path.read_text(encoding="utf-8"))
        for entry in record["points"]:
            assert sweep.point_file(entry["file"].split("/")[0], entry["slug"], entry["hash"]) == entry["file"]
        for entry in (record.get("repeats") or {}).get("points", []):  # a second run alone has its own name
            assert repeats.alone_file(entry["slug"], entry["hash"], entry.get("run", 1)) == entry["file"], path


def test_a_result_that_cannot_be_written_is_its_points_failure_and_the_sweep_goes_on(tmp_path, monkeypatch):
    write = Result.write

    def full_disk(result, path):
        if "batch_size=1" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device")
        return write(result, path)

    monkeypatch.setattr(Result, "write", full_disk)
    record = sweep.run_local(_spec(), tmp_path, progress=False, launcher=lambda params: MEASURED)
    failed, done = sorted(record["points"], key=lambda entry: entry["order"])
    assert failed["status"] == "failed" and done["status"] == "valid"
    assert failed["error"] == (f"its result could not be written to {failed['file']}: OSError: [Errno 28] No space "
                               "left on device")
    # A file name the file system refuses (a repeat's, named by repeats.py) is no result to keep: it runs
    params = _spec().points()[0][1]
    assert sweep.kept_status(tmp_path, "repeats/" + "x" * 300 + ".json", params) is None


def test_a_point_that_lost_parity_is_recorded_invalid_and_one_that_failed_leaves_no_older_result(tmp_path):
    entry = {"slug": "p", "file": "points/p.json"}
    sweep.settle(tmp_path, entry, make_invalid_result())
    assert entry["status"] == "invalid" and (tmp_path / "points" / "p.json").is_file()
    # Run again, the point fails: its older result must go, or a resume or a publish would take it for this run's
    sweep.settle(tmp_path, entry, error=RuntimeError("out of memory (simulated)"))
    assert entry["status"] == "failed" and not (tmp_path / "points" / "p.json").exists()


@pytest.mark.parametrize("value", [0, -5, "1h", True, float("inf"), float("nan"), [60]])
def test_point_timeout_s_must_be_a_positive_number_of_seconds(value):
    with pytest.raises(ParameterError, match=r"sweep: point_timeout_s must be a number of seconds > 0 and <= "
                                             r"2,000,000 \(.*\), got"):
        _spec(point_timeout_s=value)


def test_a_bad_point_timeout_s_is_refused_before_any_work_and_one_left_out_is_not_recorded(tmp_path, capsys):
    bad, runs = tmp_path / "bad.yaml", tmp_path / "runs"
    bad.write_text(CPU.read_text(encoding="utf-8") + "point_timeout_s: 0\n", encoding="utf-8")
    assert cli.main(["sweep", str(bad), "--output-root", str(runs)]) == cli.EXIT_BAD_INPUT
    assert "point_timeout_s must be a number of seconds > 0" in capsys.readouterr().err and not runs.exists()
    assert "point_timeout_s" not in _spec().to_dict()  # so every sweep.json written so far reads back the same
    timed = _spec(point_timeout_s=90)
    assert timed.to_dict()["point_timeout_s"] == 90 and sweep.SweepSpec.from_dict(timed.to_dict()) == timed
    for path in sorted(REPO.glob("reports/*/sweep.json")):
        recorded = json.loads(path.read_text(encoding="utf-8"))["spec"]
        assert sweep.SweepSpec.from_dict(recorded, source=str(path)).to_dict() == recorded


def _gone(pid: int, wait_s: float = 10.0) -> bool:
    """Whether process `pid` ended (a zombie no reaper collected counts) within `wait_s`; killed if not."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    os.kill(pid, 9)
    return False


# Stands for `python -m rollout_study.launch`: the first point hangs in a process it started, the second fails
FAKE_INTERPRETER = """#!/bin/sh
request=$(cat)
case "$request" in
  *batch_size=1-requests=1*) sleep 60 & echo $! > "$GRANDCHILD.tmp"; mv "$GRANDCHILD.tmp" "$GRANDCHILD"; wait ;;
  *) echo "no study here" >&2; exit 3 ;;
esac
"""


def test_a_point_past_its_time_is_killed_with_what_it_started_and_the_sweep_goes_on(tmp_path, monkeypatch):
    fake = tmp_path / "python"
    fake.write_text(FAKE_INTERPRETER, encoding="utf-8")
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    monkeypatch.setenv("GRANDCHILD", str(tmp_path / "grandchild.pid"))
    began = time.monotonic()
    record = sweep.run_local(_spec(point_timeout_s=1), tmp_path / "sweep", progress=False)
    hung, failed = sorted(record["points"], key=lambda entry: entry["order"])
    assert (hung["status"], hung["launcher"]) == ("failed", "fresh")
    assert hung["error"].startswith("fresh process timed out after 1 s and was killed with the processes it started")
    assert failed["error"].startswith("fresh process exited 3: no study here")  # the sweep went on
    assert _gone(int((tmp_path / "grandchild.pid").read_text())) and time.monotonic() - began < 20


def test_a_fork_server_point_past_its_time_is_killed_with_what_it_started(tmp_path, monkeypatch):
    # The study's first act is asking nvidia-smi for the clocks: this one hangs, a process of the point's own
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "nvidia-smi").write_text('#!/bin/sh\necho $$ > "$GRANDCHILD.tmp"\nmv "$GRANDCHILD.tmp" "$GRANDCHILD"\n'
                                      'exec sleep 60\n', encoding="utf-8")
    (tools / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    started = tmp_path / "grandchild.pid"
    monkeypatch.setenv("GRANDCHILD", str(started))
    params = StudyParams.from_dict({"device": "cpu", "max_new_tokens": 2, "requests": 1, "batch_size": 1,
                                    "iterations": 1, "cycles": 1, "control_cycles": 0, "cold_starts": 0,
                                    "profile": False, "instrument": False, "engines": ["eager"]})
    for timeout_s in (2, 4, 8):  # 2 s is ample to reach nvidia-smi, on a host not loaded (it imports the caller's main)
        with pytest.raises(LaunchError, match=rf"^fork-server child timed out after {timeout_s} s and was killed "):
            launch.point_launcher("fork-server", timeout_s=timeout_s)(params)
        if started.exists():
            break
    assert _gone(int(started.read_text()))


def test_a_sweep_that_stops_before_any_point_removes_its_empty_folder_and_offers_no_resume(
        tmp_path, capsys, monkeypatch):
    from rollout_study import sweep_ray

    if importlib.util.find_spec("ray") is None:
        pytest.skip("the command refuses --executor ray without the ray package")

    def unreachable(spec, folder, address=None, progress=True):
        raise ConnectionError("could not connect to the Ray cluster (simulated)")

    monkeypatch.setattr(sweep_ray, "run_ray", unreachable)
    runs = tmp_path / "runs"
    assert cli.main(["sweep", str(CPU), "--executor", "ray", "--output-root", str(runs), "--quiet"]) == \
        cli.EXIT_BAD_INPUT  # an OSError, as ray.init's is
    err = capsys.readouterr().err
    assert "the sweep stopped before any point was recorded; nothing to resume" in err and "--into" not in err
    assert list(runs.iterdir()) == []

    def after_a_point(spec, folder, address=None, progress=True):
        (folder / sweep.SWEEP_FILE).write_text("{}", encoding="utf-8")
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_ray, "run_ray", after_a_point)
    with pytest.raises(KeyboardInterrupt):
        cli.main(["sweep", str(CPU), "--executor", "ray", "--output-root", str(runs), "--quiet"])
    (kept,) = runs.iterdir()
    assert f"interrupted; finished points are kept in {kept} (resume with --into)" in capsys.readouterr().err
    assert sorted(p.name for p in kept.iterdir()) == [sweep.SWEEP_FILE]  # and its lock gone


def test_a_local_sweep_asking_for_a_device_this_host_lacks_is_refused_before_any_folder(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has the device the file asks for")
    cuda = tmp_path / "cuda.yaml"
    cuda.write_text("name: cuda-sweep\nreport: sweep\nsweep:\n  batch_size: [1, 2]\ndevice: cuda\n", encoding="utf-8")
    runs = tmp_path / "runs"
    assert cli.main(["sweep", str(cuda), "--output-root", str(runs), "--quiet"]) == cli.EXIT_BAD_INPUT
    assert "cuda" in capsys.readouterr().err and not runs.exists()
    if importlib.util.find_spec("ray") is not None:  # Ray's own local instance is this host too
        assert cli.main(["sweep", str(cuda), "--executor", "ray", "--output-root", str(runs), "--quiet"]) == \
            cli.EXIT_BAD_INPUT
        assert "cuda" in capsys.readouterr().err and not runs.exists()


def test_a_ray_task_takes_its_preferred_slot_else_the_next_free_one(tmp_path, monkeypatch):
    from rollout_study.sweep_ray import _free_slot

    monkeypatch.setenv("ROLLOUT_STUDY_SLOTS", str(tmp_path))
    shares = [[0, 1], [2, 3], [4, 5]]
    first, held = _free_slot(shares, [1])
    second, other = _free_slot(shares, [None, 1])  # 1 is held: the first free one
    third, last = _free_slot(shares, [len(shares), 7])  # out of range, the first past the end too: ignored
    assert (first, second, third) == (1, 0, 2) and _free_slot(shares) == (None, None)
    assert _free_slot([]) == (None, None)
    held.close()  # a point's end frees its slot
    again, handle = _free_slot(shares)
    assert again == 1
    for open_handle in (other, last, handle):
        open_handle.close()
    # a sweep that cuts the cores otherwise holds cores 1 and 2: both slots they fall in are taken
    other_cut, held = _free_slot([[1, 2]])
    assert other_cut == 0 and _free_slot(shares[:2]) == (None, None)
    slot, handle = _free_slot(shares)
    assert slot == 2
    held.close(), handle.close()
    # slots without cores (too few for every GPU) are still told apart, by their own locks
    (a, one), (b, two) = _free_slot([[], []]), _free_slot([[], []])
    assert (a, b) == (0, 1) and _free_slot([[], []]) == (None, None)
    one.close(), two.close()
    # a lock folder that cannot be made (here under a file; a /tmp this user cannot write): unpinned, not failed
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    monkeypatch.setenv("ROLLOUT_STUDY_SLOTS", str(tmp_path / "a-file"))
    assert _free_slot(shares) == (None, None)


def test_a_cluster_address_nothing_answers_at_is_refused_before_any_folder(tmp_path, capsys):
    import socket

    if importlib.util.find_spec("ray") is None:
        pytest.skip("the command refuses --executor ray without the ray package")
    with socket.socket() as probe:  # a port nothing listens on: bound, then closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    runs = tmp_path / "runs"
    for address, said in ((f"127.0.0.1:{port}", "nothing answers there"), ("no-port", "expected HOST:PORT")):
        assert cli.main(["sweep", str(CPU), "--executor", "ray", "--address", address, "--output-root", str(runs),
                         "--quiet"]) == cli.EXIT_BAD_INPUT
        assert said in capsys.readouterr().err and not runs.exists()


def test_a_failed_sweep_report_names_its_notebook_where_it_is_once_the_sweep_ends(tmp_path, capsys, monkeypatch):
    import shutil

    import papermill
    from papermill.exceptions import PapermillExecutionError

    real = sweep.run_local

    def no_study(spec, folder, progress=True, launcher=None):  # every point fails at once: no study runs
        return real(spec, folder, progress, launcher=lambda params: 1 / 0)

    def execute(source, executed, **kwargs):
        shutil.copy(source, executed)
        raise PapermillExecutionError(3, 1, "raise ValueError('broken')", "ValueError", "broken", [])

    monkeypatch.setattr(sweep, "run_local", no_study)
    monkeypatch.setattr(papermill, "execute_notebook", execute)
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\nreport: sweep\ndevice: cpu\nsweep:\n  batch_size: [1, 2]\n", encoding="utf-8")
    assert cli.main(["sweep", str(spec), "--output-root", str(tmp_path / "runs"), "--quiet"]) == cli.EXIT_FAILED
    err = capsys.readouterr().err
    kept = {line.split(": ", 1)[1] for line in err.splitlines()  # said when it fails, and again at the end
            if line.startswith("executed notebook kept for inspection: ")}
    assert kept == {"sweep.ipynb in the sweep folder (renamed when the sweep ends: 'sweep folder:' below)"}
    [folder] = [line.split(": ", 1)[1] for line in err.splitlines() if line.startswith("sweep folder: ")]
    assert (Path(folder) / "sweep.ipynb").is_file() and ".partial-" not in folder


# -- the launcher's own rules (launch.py), with its processes faked -------------------------------------
def test_a_studys_cold_starts_run_each_measured_variant_alone_and_one_that_failed_makes_it_invalid(monkeypatch):
    from rollout_study import protocol

    started = []

    def fresh(params, mode):
        started.append((params.engines, params.cold_starts, mode))
        if list(params.engines) == ["graph"]:
            raise LaunchError("fresh process exited -9: out of memory (simulated)")
        return Result.from_dict(make_result_dict())

    monkeypatch.setattr(protocol, "run_in_process", lambda *args, **kwargs: Result.from_dict(make_result_dict()))
    monkeypatch.setattr(launch, "fresh_process", fresh)
    params = StudyParams.from_dict({"device": "cpu", "engines": ["eager", "graph"],
                                    "policy": ["reuse", "version-only"], "cold_starts": 2})
    result = launch.run_study(params)
    # version-only shows a hazard: its first call is no cost anyone pays, so it has no cold start
    assert [(run.process, run.variant, run.valid) for run in result.cold_starts] == [
        (0, "eager", True), (0, "graph[reuse]", False), (1, "eager", True), (1, "graph[reuse]", False)]
    assert {(cold, mode) for _, cold, mode in started} == {(0, "first_only")}  # alone, starting none of its own
    assert not result.valid


def test_a_profiling_processs_own_failures_join_the_study_and_make_it_invalid(monkeypatch):
    from rollout_study import protocol

    profiled = Result.from_dict(make_result_dict(cuda_graph=True))
    # its measured phases are not the study's: only what failed in profiling counts
    profiled.failures = [Failure("graph", "reuse", None, "profile", "CUPTI unavailable (simulated)"),
                         Failure("eager", None, 0, "steady", "the profiling process's own steady phase")]
    monkeypatch.setattr(protocol, "run_in_process",
                        lambda *args, **kwargs: Result.from_dict(make_result_dict(cuda_graph=True)))
    monkeypatch.setattr(launch, "fresh_process", lambda params, mode: profiled)
    result = launch.run_study(StudyParams.from_dict({"device": "cpu", "profile": True, "cold_starts": 0}))
    assert [failure.error for failure in result.failures] == ["CUPTI unavailable (simulated)"] and not result.valid


def test_a_fresh_process_that_exits_0_without_a_result_is_a_launch_error(tmp_path, monkeypatch):
    # A cold start catches LaunchError alone: anything else (the JSON of nothing) would end the whole study
    interpreter = tmp_path / "python"
    interpreter.write_text("#!/bin/sh\ncat > /dev/null\necho 'nothing measured (simulated)' >&2\n", encoding="utf-8")
    interpreter.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(interpreter))
    with pytest.raises(LaunchError, match=r"fresh process exited 0: nothing measured \(simulated\)"):
        launch.fresh_process(StudyParams.from_dict({"device": "cpu"}), mode="first_only")
