"""A kept sweep pinned to one commit's code (tools/sweep_pin.py) counts the points of that code, whatever the
package is now, and the device script resumes it in that commit's tree."""
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from device_tree import functions as device_functions
from device_tree import in_bash
from device_tree import install_wheels
from device_tree import script as device_script
from tool_module import load

ROOT = Path(__file__).resolve().parent.parent
PINS = sorted((ROOT / "sweeps-in-progress").glob("*.pin"))


keep_sweep = load("keep_sweep")
sweep_pin = sys.modules["sweep_pin"]  # the module keep_sweep imported: the one whose reading it is cached by


def _has_commit(commit: str) -> bool:
    return subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"],
                          capture_output=True).returncode == 0


def _pin_text(commit: str, code: str) -> str:
    return f"# why\ncommit: {commit}\n\ncode_sha256: {code}\n"


@pytest.mark.parametrize("pin", PINS, ids=[p.stem for p in PINS])
def test_the_device_script_reads_each_pin_as_the_tools_do(pin):
    # h200-reports.sh reads the pin through `sweep_pin.py field`: the commit whose tree it runs in and the
    # fingerprint it checks
    functions = device_functions("pin_field")
    assert functions.startswith("pin_field()")
    read = {}
    for field in sweep_pin.FIELDS:
        read[field] = subprocess.run(["bash", "-c", f'{functions}\npin_field {field}'], cwd=ROOT, text=True,
                                     capture_output=True,
                                     env={"SWEEP": pin.stem, "PATH": "/usr/bin:/bin"}).stdout.strip()
    assert read == sweep_pin.read(pin.stem)


@pytest.mark.parametrize("pin", PINS, ids=[p.stem for p in PINS])
def test_each_pin_states_its_commits_own_code(pin):
    pinned = sweep_pin.read(pin.stem)
    if not _has_commit(pinned["commit"]):
        pytest.skip("a shallow clone lacks the pinned commit")
    asked = sweep_pin.pinned_sweep(pinned["commit"], pin.stem)
    assert asked["code_sha256"] == pinned["code_sha256"]
    assert asked["name"] == pin.stem and asked["files"]


@pytest.mark.parametrize("text, why", [
    ("commit: abc\ncode_sha256: " + "a" * 64, "'commit: abc' is not one of"),
    ("commit: " + "A" * 40 + "\ncode_sha256: " + "a" * 64, "40 lowercase hex digits"),
    ("commit: " + "a" * 12 + "\ncode_sha256: " + "a" * 64, "40 lowercase hex digits"),  # abbreviated
    ("commit: " + "a" * 41 + "\ncode_sha256: " + "a" * 64, "40 lowercase hex digits"),
    ("commit: " + "a" * 40, "no code_sha256 line"),
    ("commit: " + "a" * 40 + "\ncommit: " + "b" * 40 + "\ncode_sha256: " + "a" * 64, "each once"),
    ("branch: main", "'branch: main' is not one of"),
])
def test_a_malformed_pin_is_refused_naming_its_file_and_form(tmp_path, text, why):
    (tmp_path / "sweeps-in-progress").mkdir()
    (tmp_path / "sweeps-in-progress" / "sw.pin").write_text(text)
    with pytest.raises(sweep_pin.PinError, match=why) as raised:
        sweep_pin.read("sw", tmp_path)
    assert "sweeps-in-progress/sw.pin" in str(raised.value)
    assert sweep_pin.read("other", tmp_path) is None  # no pin: not pinned
    with pytest.raises(keep_sweep.KeepError, match=why):
        keep_sweep.held_code("sw", tmp_path)


def _folder(parent: Path, name: str, fingerprints: list[str]) -> Path:
    folder = parent / f".{name}.partial-abc"
    (folder / "points").mkdir(parents=True)
    entries = []
    for index, fingerprint in enumerate(fingerprints):
        file = f"points/p{index}.json"
        (folder / file).write_text(json.dumps({"metadata": {"git": {"code_sha256": fingerprint}}}))
        entries.append({"order": index, "file": file, "status": "valid"})
    (folder / "sweep.json").write_text(json.dumps({"spec": {"name": name}, "points": entries}))
    return folder


def test_keep_counts_a_pinned_sweep_by_the_pinned_code(tmp_path):
    root = tmp_path / "repo"
    (root / "sweeps-in-progress").mkdir(parents=True)
    (root / "sweeps-in-progress" / "sw.pin").write_text(_pin_text("f" * 40, "c" * 64))
    folder = _folder(tmp_path / "device", "sw", ["c" * 64, "c" * 64, "d" * 64])
    pack = tmp_path / "pack.tgz"
    with tarfile.open(pack, "w:gz") as archive:
        archive.add(folder, arcname=folder.name)
    said = keep_sweep.keep(pack, root, check=lambda f, r: [])  # no fingerprint given: the sweep's own
    assert said == ["kept sweeps-in-progress/sw.tgz (2 points measured by its pinned code cccccccc): commit it; "
                    "`h200-reports.sh resume` resumes it"]
    (root / "sweeps-in-progress" / "sw.pin").unlink()  # unpinned, this package's code measured none of them
    with pytest.raises(keep_sweep.KeepError, match="no point measured by this code"):
        keep_sweep.keep(pack, root, check=lambda f, r: [])


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


def _published_point() -> dict:
    return json.loads(next((ROOT / "reports" / "sweep-h200-tiny" / "points").glob("*.json")).read_text())


@pytest.fixture(scope="module")
def pinned_repo(tmp_path_factory):
    """A repository whose commit A holds the package that measured a published point (from this repository's
    history: its fingerprint is the point's) with params/sweep-cpu.yaml at 3 new tokens; its working tree has 5
    (this repository's has 4): only A's own file names A's points. Pinned to A."""
    from rollout_study.sweep import SweepSpec, point_hash

    measured = _published_point()["metadata"]["git"]
    if not _has_commit(measured["commit"]):
        pytest.skip("a shallow clone lacks the commit that measured the published points")
    repo = tmp_path_factory.mktemp("pinned") / "repo"
    repo.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", measured["commit"], "rollout_study",
                              "notebooks"], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(repo, filter="data")
    (repo / "tools").mkdir()
    shutil.copy(ROOT / "tools" / "device-wheels.txt", repo / "tools")
    (repo / "params").mkdir()
    text = (ROOT / "params" / "sweep-cpu.yaml").read_text()
    assert "\nmax_new_tokens: 4\n" in text
    (repo / "params" / "sweep-cpu.yaml").write_text(text.replace("\nmax_new_tokens: 4\n", "\nmax_new_tokens: 3\n"))
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "A")
    commit = _git(repo, "rev-parse", "HEAD")
    (repo / "params" / "sweep-cpu.yaml").write_text(text.replace("\nmax_new_tokens: 4\n", "\nmax_new_tokens: 5\n"))
    # the working tree's points, as this repository's code names them: none of them is A's
    elsewhere = [f"{slug}-{point_hash(params)}.json"
                 for slug, params in SweepSpec.from_yaml(str(repo / "params" / "sweep-cpu.yaml")).points()]
    (repo / "sweeps-in-progress").mkdir()
    pinned = {"commit": commit, "code_sha256": measured["code_sha256"]}
    (repo / "sweeps-in-progress" / "sweep-cpu.pin").write_text(_pin_text(pinned["commit"], pinned["code_sha256"]))
    files = sweep_pin.pinned_sweep(commit, "sweep-cpu", repo)["files"]  # A's points, as A's code names them
    assert len(files) == 2 and not set(files) & set(elsewhere)
    return repo, pinned, files, elsewhere


def _kept(parent: Path, files: list[str], fingerprint: str) -> Path:
    """A kept sweep-cpu folder listing `files`, the first on disk: a published point's result with its code's
    fingerprint set to `fingerprint`."""
    folder = parent / ".sweep-cpu.partial-kept"
    (folder / "points").mkdir(parents=True)
    real = _published_point()
    real["metadata"]["git"]["code_sha256"] = fingerprint
    (folder / "points" / files[0]).write_text(json.dumps(real))
    entries = [{"order": index, "file": f"points/{file}", "status": "valid"} for index, file in enumerate(files)]
    (folder / "sweep.json").write_text(json.dumps({"spec": {"name": "sweep-cpu", "report": "sweep"},
                                                   "points": entries}))
    return folder


def test_a_pinned_sweep_is_held_to_its_commits_parameter_file_and_code(pinned_repo, tmp_path):
    repo, pinned, files, elsewhere = pinned_repo
    assert keep_sweep.problems(_kept(tmp_path / "a", files, pinned["code_sha256"]), repo) == []
    # points the pinned file does not name: the working tree's
    found = keep_sweep.problems(_kept(tmp_path / "b", files + elsewhere, pinned["code_sha256"]), repo)
    assert found == [f"points/{file}: no longer a point of params/sweep-cpu.yaml at {pinned['commit'][:12]}"
                     for file in sorted(elsewhere)]
    # a point of other code
    found = keep_sweep.problems(_kept(tmp_path / "c", files, "0" * 64), repo)
    assert [line for line in found if "measured by code 00000000" in line] == [
        f"points/{files[0]}: measured by code 00000000, the code is pinned to {pinned['code_sha256'][:8]}: "
        f"it would run again (revert sweeps-in-progress/sweep-cpu.pin, or drop the kept sweep knowingly)"]


def test_keep_says_how_many_of_the_pinned_sweeps_points_are_left(pinned_repo, tmp_path):
    repo, pinned, files, _ = pinned_repo
    root = tmp_path / "repo"
    shutil.copytree(repo, root)
    folder = _kept(tmp_path / "device", files, pinned["code_sha256"])  # of two listed, one on disk
    pack = tmp_path / "pack.tgz"
    with tarfile.open(pack, "w:gz") as archive:
        archive.add(folder, arcname=folder.name)
    said = keep_sweep.keep(pack, root)
    assert said == [f"kept sweeps-in-progress/sweep-cpu.tgz (1 point measured by its pinned code "
                    f"{pinned['code_sha256'][:8]}; 1 of the sweep's 2 points left): commit it; "
                    "`h200-reports.sh resume` resumes it"]
    # where the pinned commit cannot be read, the count is not known and not said
    (root / "sweeps-in-progress" / "sweep-cpu.pin").write_text(_pin_text("e" * 40, pinned["code_sha256"]))
    assert keep_sweep.points_left(folder, pinned["code_sha256"], root) is None
    (root / "sweeps-in-progress" / "sweep-cpu.tgz").unlink()
    assert keep_sweep.keep(pack, root, check=lambda f, r: [])[0].startswith(
        f"kept sweeps-in-progress/sweep-cpu.tgz (1 point measured by its pinned code {pinned['code_sha256'][:8]}): ")


def test_points_left_counts_what_the_resume_runs(tmp_path):
    """Unpinned: the working tree's parameter file names the points. A point whose result records a failure runs
    again (sweep.kept_on_resume), a failed one has no result (a file left there is not one), a repeat is no point."""
    from rollout_study.sweep import SweepSpec, point_hash

    root = tmp_path / "repo"
    (root / "params").mkdir(parents=True)
    shutil.copy(ROOT / "params" / "sweep-cpu.yaml", root / "params")
    files = [f"{slug}-{point_hash(params)}.json"
             for slug, params in SweepSpec.from_yaml(str(root / "params" / "sweep-cpu.yaml")).points()]
    assert len(files) == 2

    def kept(name: str, second: str | None, failures: list) -> Path:
        folder = _kept(tmp_path / name, files, "f" * 64)
        real = json.loads((folder / "points" / files[0]).read_text())
        (folder / "points" / files[1]).write_text(json.dumps({**real, "failures": failures}))
        (folder / "repeats").mkdir()
        (folder / "repeats" / files[0]).write_text(json.dumps(real))
        record = json.loads((folder / "sweep.json").read_text())
        record["points"][1]["status"] = second
        record["repeats"] = {"points": [{"order": 0, "file": f"repeats/{files[0]}", "status": "valid"}]}
        (folder / "sweep.json").write_text(json.dumps(record))
        return folder

    done = kept("done", "valid", [])
    assert keep_sweep.measured_points(done, "f" * 64) == 3
    assert keep_sweep.points_left(done, "f" * 64, root) == keep_sweep.Left(0, 2, 0)
    oom = [{"engine": "graph", "policy": "reuse", "cycle": 0, "phase": "steady", "error": "OutOfMemoryError: CUDA"}]
    again = kept("again", "invalid", oom)
    assert keep_sweep.measured_points(again, "f" * 64) == 3
    assert keep_sweep.points_left(again, "f" * 64, root) == keep_sweep.Left(1, 2, 1)
    failed = kept("failed", "failed", [])
    assert keep_sweep.measured_points(failed, "f" * 64) == 2
    assert keep_sweep.points_left(failed, "f" * 64, root) == keep_sweep.Left(1, 2, 0)
    unread = kept("unread", "valid", [])  # of this code, and no result the resume reads: it runs again
    (unread / "points" / files[1]).write_text(json.dumps({"metadata": {"git": {"code_sha256": "f" * 64}}}))
    assert keep_sweep.points_left(unread, "f" * 64, root) == keep_sweep.Left(1, 2, 1)
    pack = tmp_path / "again.tgz"  # keep() says it: points and repeats apart, the point to run again
    with tarfile.open(pack, "w:gz") as archive:
        archive.add(again, arcname=again.name)
    assert keep_sweep.keep(pack, root, check=lambda f, r: [], fingerprint="f" * 64) == [
        "kept sweeps-in-progress/sweep-cpu.tgz (2 points and 1 repeat measured by this code; 1 of the sweep's 2 "
        "points left (1 of them measured, recording a failure: run again)): commit it; `h200-reports.sh resume` "
        "resumes it"]
    assert keep_sweep._counted(3, 1, "this code", keep_sweep.Left(1, 1, 0)) == (
        "2 points and 1 repeat measured by this code; 1 of the sweep's 1 point left")
    assert keep_sweep._counted(3, 1, "this code", keep_sweep.Left(0, 2, 0)) == (
        "2 points and 1 repeat measured by this code; none of the sweep's 2 points left (its repeats, if it has "
        "any, run next)")
    (root / "params" / "sweep-cpu.yaml").unlink()  # no parameter file: not known
    assert keep_sweep.points_left(done, "f" * 64, root) is None


def test_a_pin_stating_other_code_than_its_commits_is_found(pinned_repo, tmp_path):
    repo, pinned, files, _ = pinned_repo
    wrong = tmp_path / "repo"
    shutil.copytree(repo, wrong)
    (wrong / "sweeps-in-progress" / "sweep-cpu.pin").write_text(_pin_text(pinned["commit"], "1" * 64))
    found = keep_sweep.problems(_kept(tmp_path / "kept", files, pinned["code_sha256"]), wrong)
    assert found[0] == (f"sweeps-in-progress/sweep-cpu.pin: commit {pinned['commit'][:12]}'s code is "
                        f"{pinned['code_sha256'][:8]}, the pin says 11111111")
    assert "the code is pinned to 11111111" in found[1]
    (wrong / "sweeps-in-progress" / "sweep-cpu.pin").write_text(_pin_text("e" * 40, pinned["code_sha256"]))
    assert keep_sweep.problems(_kept(tmp_path / "again", files, pinned["code_sha256"]), wrong) == [
        f"sweeps-in-progress/sweep-cpu.pin: commit eeeeeeeeeeee is not in the repository at {wrong}"]


# A stand-in for a commit's sweep module: it reads params/NAME.yaml (refusing one that says "broken") and says a
# word on stdout before the answer, as a library's warning may
STUB_SWEEP = """
class SweepSpec:
    name, report = "sw", "sweep"

    @classmethod
    def from_yaml(cls, path):
        if "broken" in open(path).read():
            raise ValueError("no sweep: section")
        print("a word before the answer")
        return cls()

    def points(self):
        return [("p", None)]


def point_hash(params):
    return "h"
"""


def test_a_pinned_commit_is_asked_by_its_own_code_and_what_it_lacks_or_cannot_read_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONSAFEPATH", "1")  # the commit's package found by the child's PYTHONPATH, not its cwd
    repo = tmp_path / "repo"
    (repo / "params").mkdir(parents=True)
    (repo / "params" / "sw.yaml").write_text("name: sw\n")

    def commit(message: str) -> str:
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", message)
        return _git(repo, "rev-parse", "HEAD")

    _git(repo, "init", "-q")
    bare = commit("no package")
    with pytest.raises(sweep_pin.PinError, match=f"commit {bare[:12]} has no rollout_study/"):
        sweep_pin.archive(bare, repo)
    (repo / "rollout_study").mkdir()
    (repo / "rollout_study" / "__init__.py").write_text("")
    (repo / "rollout_study" / "environment.py").write_text(f"def code_fingerprint():\n    return {'c' * 64!r}\n")
    (repo / "rollout_study" / "sweep.py").write_text(STUB_SWEEP)
    code = commit("stand-in code")
    assert sweep_pin.pinned_sweep(code, "sw", repo) == {"code_sha256": "c" * 64, "name": "sw", "report": "sweep",
                                                        "files": ["p-h.json"]}
    with pytest.raises(sweep_pin.PinError, match=f"commit {code[:12]} has no params/other.yaml"):
        sweep_pin.pinned_sweep(code, "other", repo)
    (repo / "params" / "sw.yaml").write_text("name: sw\nbroken: true\n")
    broken = commit("a file its code cannot read")
    with pytest.raises(sweep_pin.PinError, match=f"commit {broken[:12]}'s code could not read params/sw.yaml: "
                                                 "ValueError: no sweep: section"):
        sweep_pin.pinned_sweep(broken, "sw", repo)


def test_the_command_says_how_it_is_used(capsys):
    assert sweep_pin.main([]) == 2 and sweep_pin.main(["field", "sw", "branch"]) == 2
    assert "python3 tools/sweep_pin.py carry | field NAME commit|code_sha256" in capsys.readouterr().err


def test_carry_writes_each_pinned_commits_tree_and_keeps_it_current(pinned_repo):
    repo, pinned, *_ = pinned_repo
    said = sweep_pin.carry(repo)
    tree = repo / sweep_pin.tree_name(pinned["commit"])
    assert said == [f"sweep-cpu: pinned to {pinned['commit'][:12]}, carry .carry/tree-{pinned['commit'][:12]}.tar "
                    f"({tree.stat().st_size / 2**20:.1f} MiB) with .whl (or its parts) to resume it"]
    with tarfile.open(tree) as archive:
        assert "max_new_tokens: 3" in archive.extractfile("params/sweep-cpu.yaml").read().decode()
        assert "rollout_study/environment.py" in archive.getnames()
        # what of TREE the commit holds (its tools: the pinned tree runs its own device script)
        assert {name.split("/")[0] for name in archive.getnames()} == {"rollout_study", "notebooks", "params", "tools"}
    written = tree.stat().st_mtime_ns
    sweep_pin.carry(repo)
    assert tree.stat().st_mtime_ns == written  # the same tree: left as it was
    tree.write_bytes(b"stale")
    sweep_pin.carry(repo)
    assert tree.read_bytes() == sweep_pin.archive(pinned["commit"], repo)
    # a tree no pin names (its sweep finished and its pin went) is removed, and said; other carried files stay
    old, part = repo / sweep_pin.tree_name("f" * 40), repo / ".carry" / "smol.partaa"
    old.write_bytes(b"old tree")
    part.write_bytes(b"part")
    said = sweep_pin.carry(repo)
    assert said[-1] == ".carry/tree-ffffffffffff.tar removed: no pin names its commit"
    assert not old.exists() and tree.is_file() and part.is_file()


def test_the_device_script_runs_a_pinned_sweep_in_the_pinned_tree(tmp_path):
    # h200-reports.sh's background() (tools/device-functions.sh), with PINNED: the step runs in the carried tree,
    # with its package and the pinned commit named, this tree's runs/ and the published subsets KEEP_FROM names
    # (reports/NAME: the pinned tree has an older one or none); refused where the tree is missing or holds other code
    functions = device_functions("pin_field", "running", "keep_from_folders", "pinned_tree", "background")
    device, commit, step = tmp_path / "device", "c" * 40, "inner-pin-test"
    (device / "tools").mkdir(parents=True)
    shutil.copy(ROOT / "tools" / "sweep_pin.py", device / "tools")
    (device / "runs" / ".sw.partial-x").mkdir(parents=True)
    (device / "reports" / "sub").mkdir(parents=True)
    (device / "reports" / "sub" / "sweep.json").write_text("{}")
    (device / "sweeps-in-progress").mkdir()
    stub = tmp_path / "stub"
    (stub / "rollout_study").mkdir(parents=True)
    (stub / "rollout_study" / "__init__.py").write_text("")
    (stub / "rollout_study" / "environment.py").write_text("def code_fingerprint():\n    return '" + "f" * 64 + "'\n")
    (stub / "tools").mkdir()
    (stub / "tools" / "h200-reports.sh").write_text(
        'echo "$1 $ROLLOUT_STUDY_COMMIT $(python3 -c "import rollout_study; print(rollout_study.__file__)") '
        '$(ls -A runs) $(ls reports/sub)" > seen.txt\nsleep 120\n')  # runs on: background() must return at once
    work = tmp_path / f"work-{step}"  # STATE_DIR's, not the machine's /tmp

    def background(pin_code: str) -> subprocess.CompletedProcess:
        (device / "sweeps-in-progress" / "sw.pin").write_text(_pin_text(commit, pin_code))
        return in_bash(functions, f'PINNED={commit} background "$PWD/log" {step}', tmp_path, cwd=device, timeout=30,
                       SWEEP="sw", PATH=os.environ["PATH"], ROLLOUT_STUDY_COMMIT="a" * 40,
                       KEEP_FROM="runs/.sw.partial-x reports/sub")

    (device / "sweeps-in-progress" / "sw.pin").write_text("commit:\t" + commit + "\ncode_sha256: short\n")
    malformed = subprocess.run(["bash", "-c", f"{functions}\npin_field commit"], cwd=device, capture_output=True,
                               text=True, env={"SWEEP": "sw", "PATH": os.environ["PATH"]})
    assert malformed.returncode == 1 and "sweeps-in-progress/sw.pin: 'code_sha256: short'" in malformed.stderr
    try:
        missing = background("f" * 64)
        assert missing.returncode == 1 and f"carry .carry/tree-{commit[:12]}.tar" in missing.stdout
        (device / ".carry").mkdir()
        with tarfile.open(device / ".carry" / f"tree-{commit[:12]}.tar", "w") as archive:
            archive.add(stub, arcname=".")
        Path(f"{work}.pid").write_text("999999999\n")  # the records of an earlier step, ended
        Path(f"{work}.sweep").write_text("sw\n")
        other = background("e" * 64)
        assert other.returncode == 1 and "holds code ffffffff, the pin says eeeeeeee" in other.stdout
        # a failed start leaves no record for `continue` to hold on
        assert not Path(f"{work}.pid").exists() and not Path(f"{work}.sweep").exists()
        ran = background("f" * 64)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert (work / "seen.txt").read_text().split() == [step, commit, str(work / "rollout_study" / "__init__.py"),
                                                           ".sw.partial-x", "sweep.json"]
        assert Path(f"{work}.sweep").read_text() == "sw\n"  # which sweep it runs (continue asks)
    finally:
        pid = Path(f"{work}.pid")
        if pid.exists():  # the step, still sleeping: its process group (setsid)
            subprocess.run(["kill", "--", f"-{pid.read_text().strip()}"], capture_output=True)


def test_the_sweep_and_resume_steps_start_a_pinned_sweep_in_its_pinned_tree(tmp_path):
    # Both hand the pin's commit to background(): without the carried tree they refuse, never run here
    tree, sweep = tmp_path / "tree", "sweep-cpu"
    (tree / "params").mkdir(parents=True)
    shutil.copy(ROOT / "params" / f"{sweep}.yaml", tree / "params")
    (tree / "rollout_study").symlink_to(ROOT / "rollout_study")  # needs_model reads the file with the package
    (tree / "sweeps-in-progress").mkdir()
    (tree / "sweeps-in-progress" / f"{sweep}.pin").write_text(_pin_text("c" * 40, "f" * 64))
    install_wheels(tmp_path)
    for args in (("sweep", "local"), ("resume",)):
        done = device_script(tmp_path, *args, SWEEP=sweep, FRESH="1")
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert f"error: {sweep} is pinned to cccccccccccc: carry .carry/tree-cccccccccccc.tar" in done.stdout, args


def test_the_device_script_runs_no_pinned_sweep_in_this_tree(tmp_path):
    # inner-sweep started in the working tree (by hand, or by a step that reaches it there): a pinned sweep would
    # run there at this tree's code and parameter file, so it is refused (sweep and resume run it in the pinned tree)
    pins = tmp_path / "tree" / "sweeps-in-progress"
    pins.mkdir(parents=True)
    (pins / "sw.pin").write_text(_pin_text("c" * 40, "f" * 64))
    done = device_script(tmp_path, "inner-sweep", "local", SWEEP="sw")
    assert done.returncode == 1
    assert "error: sw is pinned to cccccccccccc (sweeps-in-progress/sw.pin)" in done.stdout
