"""A kept sweep pinned to one commit's code (tools/sweep_pin.py) counts the points of that code, whatever the
package is now, and the device script resumes it in that commit's tree."""
import importlib.util
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PINS = sorted((ROOT / "sweeps-in-progress").glob("*.pin"))


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


keep_sweep = _load("keep_sweep")
sweep_pin = sys.modules["sweep_pin"]  # the module keep_sweep imported: the one whose reading it is cached by


def _has_commit(commit: str) -> bool:
    return subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"],
                          capture_output=True).returncode == 0


def _pin_text(commit: str, code: str) -> str:
    return f"# why\ncommit: {commit}\n\ncode_sha256: {code}\n"


@pytest.mark.parametrize("pin", PINS, ids=[p.stem for p in PINS])
def test_the_device_script_reads_each_pin_as_the_tools_do(pin):
    # h200-reports.sh reads the pin with sed: the commit whose tree it runs in and the fingerprint it checks
    functions = subprocess.run(["sed", "-n", "/^pin_field()/,/^}/p", str(ROOT / "tools" / "h200-reports.sh")],
                               capture_output=True, text=True, check=True).stdout
    assert functions.startswith("pin_field()")
    read = {}
    for field in sweep_pin.FIELDS:
        read[field] = subprocess.run(["bash", "-c", f'{functions}\npin_field {field}'], cwd=ROOT, text=True,
                                     capture_output=True, env={"SWEEP": pin.stem, "PATH": "/usr/bin:/bin"}).stdout.strip()
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


@pytest.fixture(scope="module")
def pinned_kept():
    """A kept sweep with a pin whose commit this clone has, with its pin's fields; else skipped."""
    for pin in PINS:
        pinned = sweep_pin.read(pin.stem)
        pack = pin.with_suffix(".tgz")
        if pack.is_file() and _has_commit(pinned["commit"]):
            return pin.stem, pinned, pack
    pytest.skip("no kept sweep is pinned to a commit this clone has")


def _root_with_pin(tmp_path: Path, name: str, text: str) -> Path:
    root = tmp_path / "repo"
    (root / "sweeps-in-progress").mkdir(parents=True)
    (root / "tools").mkdir()
    shutil.copy(ROOT / "tools" / "device-wheels.txt", root / "tools")
    (root / "sweeps-in-progress" / f"{name}.pin").write_text(text)
    return root


def test_the_checks_hold_a_pinned_sweep_to_its_pin(pinned_kept, tmp_path):
    name, pinned, pack = pinned_kept
    folder = keep_sweep.kept_folder(pack, tmp_path / "kept")
    first = sorted((folder / "points").iterdir())[0]
    result = json.loads(first.read_text())
    result["metadata"]["git"]["code_sha256"] = "0" * 64
    first.write_text(json.dumps(result))
    root = _root_with_pin(tmp_path, name, _pin_text(pinned["commit"], pinned["code_sha256"]))
    found = keep_sweep.problems(folder, root)
    assert [line for line in found if "measured by code 00000000" in line] == [
        f"points/{first.name}: measured by code 00000000, the code is pinned to {pinned['code_sha256'][:8]}: it would "
        f"run again (revert sweeps-in-progress/{name}.pin, or drop the kept sweep knowingly)"]
    # a pin stating other code than its commit's: the pin is wrong, and every point is of other code
    wrong = _root_with_pin(tmp_path / "wrong", name, _pin_text(pinned["commit"], "1" * 64))
    found = keep_sweep.problems(keep_sweep.kept_folder(pack, tmp_path / "again"), wrong)
    assert found[0] == (f"sweeps-in-progress/{name}.pin: commit {pinned['commit'][:12]}'s code is "
                        f"{pinned['code_sha256'][:8]}, the pin says 11111111")
    assert sum("the code is pinned to 11111111" in line for line in found) == len(list((folder / "points").iterdir()))


def test_the_pinned_points_are_those_of_the_pinned_commits_parameter_file(pinned_kept, tmp_path):
    name, pinned, pack = pinned_kept
    folder = keep_sweep.kept_folder(pack, tmp_path / "kept")
    record = json.loads((folder / "sweep.json").read_text())
    record["points"][0]["file"] = "points/not-a-point-000000000000.json"
    (folder / "sweep.json").write_text(json.dumps(record))
    root = _root_with_pin(tmp_path, name, _pin_text(pinned["commit"], pinned["code_sha256"]))
    found = keep_sweep.problems(folder, root)
    at = f"params/{name}.yaml at {pinned['commit'][:12]}"
    assert f"points/not-a-point-000000000000.json: no longer a point of {at}" in found


def test_carry_writes_each_pinned_commits_tree_once(pinned_kept, tmp_path):
    name, pinned, _ = pinned_kept
    root = _root_with_pin(tmp_path, name, _pin_text(pinned["commit"], pinned["code_sha256"]))
    said = sweep_pin.carry(root)
    tree = root / sweep_pin.tree_name(pinned["commit"])
    assert len(said) == 1 and said[0].startswith(f"{name}: pinned to {pinned['commit'][:12]}, carry {tree.relative_to(root)}")
    with tarfile.open(tree) as archive:
        names = set(archive.getnames())
    # what the device's resume runs there: its script, parameter file and the measuring code
    assert {"tools/h200-reports.sh", "tools/device-env.sh", f"params/{name}.yaml",
            "rollout_study/environment.py", "rollout_study/sweep.py"} <= names
    assert not any(n.startswith("reports/") for n in names)
    written = tree.stat().st_mtime_ns
    sweep_pin.carry(root)
    assert tree.stat().st_mtime_ns == written and tree.read_bytes() == sweep_pin.archive(pinned["commit"])
