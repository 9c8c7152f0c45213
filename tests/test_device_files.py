"""tools/device-files.sh's parts: a wheel here whole, in parts that no longer fit a call (the working tree grew) or
that a larger cut would carry in fewer calls, is cut again from them, with no download; parts that still fit stay as
they are (a machine holding parts of an old cut cannot join them with a new one); parts that do not add up to the
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
    script = (f"set -euo pipefail\nplatforms=()\n{functions('cut_fits', 'parts', source='device-files.sh')}\n"
              f"PART={part}\nparts fake fake-pkg==1.0")  # under the script's own shell options
    return subprocess.run(["bash", "-c", script], cwd=tree, capture_output=True, text=True, timeout=60,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin"})


def _carry(tree: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted((tree / ".carry").glob("fake.part*"))}


def test_parts_are_cut_again_where_they_no_longer_fit_or_fewer_calls_would_carry_them_and_else_left_alone(tmp_path):
    wheel = os.urandom(10_000)
    carry = tmp_path / ".carry"
    carry.mkdir()
    for i, start in enumerate(range(0, len(wheel), 4096)):  # an earlier cut, of 4096 bytes
        (carry / f"fake.parta{'abc'[i]}").write_bytes(wheel[start:start + 4096])
    checksum = f"{hashlib.sha256(wheel).hexdigest()}  {WHEEL}\n"
    (carry / "fake.sha256").write_text(checksum)

    def cut(part: int) -> str:
        done = _parts(tmp_path, part)
        assert done.returncode == 0, done.stdout + done.stderr
        assert b"".join(p.read_bytes() for p in sorted(carry.glob("fake.part*"))) == wheel
        assert (carry / "fake.sha256").read_text() == checksum
        return done.stdout

    assert "fake: its parts cut again" in cut(4000)  # three parts either way; 4096 bytes no longer fit
    assert _carry(tmp_path) == {"fake.partaa": 4000, "fake.partab": 4000, "fake.partac": 2000}
    cut(3000)
    assert _carry(tmp_path) == {"fake.partaa": 3000, "fake.partab": 3000, "fake.partac": 3000, "fake.partad": 1000}
    times = {p.name: p.stat().st_mtime_ns for p in carry.iterdir()}
    assert cut(3000) == "" and {p.name: p.stat().st_mtime_ns for p in carry.iterdir()} == times
    cut(3500)  # room again: three calls, not four
    assert _carry(tmp_path) == {"fake.partaa": 3500, "fake.partab": 3500, "fake.partac": 3000}
    times = {p.name: p.stat().st_mtime_ns for p in carry.iterdir()}
    assert cut(3600) == "" and {p.name: p.stat().st_mtime_ns for p in carry.iterdir()} == times  # still three
    checksum = checksum.rstrip("\n")  # a checksum file edited by hand, without its last newline: read all the same
    (carry / "fake.sha256").write_text(checksum)
    assert cut(3600) == ""

    # parts that do not add up to the checksum are not cut again: the wheel is fetched (here that fails)
    (carry / "fake.partac").write_bytes(b"x" * 3000)
    assert not (tmp_path / "downloads").exists()  # until now
    broken = _parts(tmp_path, 3600)
    assert broken.returncode != 0 and "download" in (tmp_path / "downloads").read_text()
    assert (carry / "fake.partac").read_bytes() == b"x" * 3000  # a failed download keeps the parts there were
