"""tools/device-files.sh's parts: a wheel already here whole but cut to another size (the working tree grew, so the
part a call can carry shrank) is cut again from the parts here, with no download, and left alone once cut right; parts that do not add up to the
checksum are fetched again, and a failed fetch keeps them."""
import hashlib
import os
import subprocess
from pathlib import Path

from device_tree import functions

WHEEL = "fake_pkg-1.0-py3-none-any.whl"


def _parts(tree: Path, part: int) -> subprocess.CompletedProcess:
    """`parts` with PART bytes, in `tree`, where python3 (pip's download, the one way to fetch a wheel) only says it
    was called, and fails."""
    bin_dir = tree / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python3").write_text(f"#!/bin/sh\necho \"$@\" >> {tree}/downloads\nexit 1\n")
    (bin_dir / "python3").chmod(0o755)
    script = f"{functions('cut_as_part', 'parts', source='device-files.sh')}\nPART={part}\nparts fake fake-pkg==1.0"
    return subprocess.run(["bash", "-c", script], cwd=tree, capture_output=True, text=True, timeout=60,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin"})


def _carry(tree: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted((tree / ".carry").glob("fake.part*"))}


def test_parts_are_cut_again_to_the_part_size_from_the_wheel_here_and_then_left_alone(tmp_path):
    wheel = os.urandom(10_000)
    carry = tmp_path / ".carry"
    carry.mkdir()
    for i, start in enumerate(range(0, len(wheel), 4096)):  # cut as 4096-byte parts were
        (carry / f"fake.parta{'abc'[i]}").write_bytes(wheel[start:start + 4096])
    checksum = f"{hashlib.sha256(wheel).hexdigest()}  {WHEEL}\n"
    (carry / "fake.sha256").write_text(checksum)

    same_count = _parts(tmp_path, 4000)  # three parts either way, of other sizes
    assert same_count.returncode == 0, same_count.stdout + same_count.stderr
    assert _carry(tmp_path) == {"fake.partaa": 4000, "fake.partab": 4000, "fake.partac": 2000}
    done = _parts(tmp_path, 3000)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _carry(tmp_path) == {"fake.partaa": 3000, "fake.partab": 3000, "fake.partac": 3000, "fake.partad": 1000}
    assert b"".join(p.read_bytes() for p in sorted(carry.glob("fake.part*"))) == wheel
    assert (carry / "fake.sha256").read_text() == checksum

    times = {p.name: p.stat().st_mtime_ns for p in carry.iterdir()}
    again = _parts(tmp_path, 3000)
    assert again.returncode == 0 and {p.name: p.stat().st_mtime_ns for p in carry.iterdir()} == times

    # parts that do not add up to the checksum are not cut again: the wheel is fetched (here that fails)
    (carry / "fake.partad").write_bytes(b"x" * 1000)
    assert not (tmp_path / "downloads").exists()  # until now
    broken = _parts(tmp_path, 3000)
    assert broken.returncode != 0 and "download" in (tmp_path / "downloads").read_text()
    assert (carry / "fake.partad").read_bytes() == b"x" * 1000  # a failed download keeps the parts there were
