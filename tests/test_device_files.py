"""tools/device-files.sh's parts. A wheel here whole, in parts that no longer fit a call (the working tree grew) or
that a larger cut would carry in fewer calls, is cut again from them, with no download; parts that still fit stay as
they are (a machine holding parts of an old cut cannot join them with a new one); parts that do not add up to the
checksum are fetched again, and a failed fetch keeps them. `.whl/` travels as a tar in parts only where it no longer
fits beside the tree."""
import hashlib
import os
import subprocess
from pathlib import Path

from device_tree import commands, functions

WHEEL = "fake_pkg-1.0-py3-none-any.whl"


def _parts(tree: Path, part: int) -> subprocess.CompletedProcess:
    """`parts` with PART bytes, in `tree`, where python3 (pip's download, the one way to fetch a wheel) only says it
    was called, and fails."""
    bin_dir = commands(tree / "bin", python3=f'echo "$@" >> {tree}/downloads\nexit 1')
    defined = functions('cut_fits', 'parts', 'cut_anew', source='device-files.sh')
    # under the script's own shell options
    script = f"set -euo pipefail\nplatforms=()\n{defined}\nPART={part}\nparts fake fake-pkg==1.0"
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


def test_a_wheel_is_fetched_where_no_parts_are_here_or_theirs_is_another_version(tmp_path):
    fresh = _parts(tmp_path, 3000)  # a fresh checkout: nothing in .carry/
    assert fresh.returncode != 0 and "download" in (tmp_path / "downloads").read_text()
    (tmp_path / "downloads").unlink()
    # parts that add up to the wheel their checksum file names, of another version: fetched, not cut again
    wheel, carry = os.urandom(5000), tmp_path / ".carry"
    carry.mkdir()
    (carry / "fake.partaa").write_bytes(wheel)
    (carry / "fake.sha256").write_text(f"{hashlib.sha256(wheel).hexdigest()}  fake_pkg-0.9-py3-none-any.whl\n")
    older = _parts(tmp_path, 3000)
    assert older.returncode != 0 and "download" in (tmp_path / "downloads").read_text()
    assert [p.name for p in carry.glob("fake.part*")] == ["fake.partaa"]  # kept, as a failed fetch keeps them


def _whl_parts(tree: Path, tree_kib: int, part: int, pinned_kib: int = 0) -> subprocess.CompletedProcess:
    """`whl_parts` in `tree`, beside a working tree of TREE_KIB and a pinned tree of PINNED_KIB, with parts of PART
    bytes."""
    size_kib = next(line for line in (Path(__file__).parent.parent / "tools" / "device-files.sh").read_text()
                    .splitlines() if line.startswith("size_kib()"))
    defined = functions('cut_fits', 'cut_anew', 'whl_parts', source='device-files.sh')
    script = (f"set -euo pipefail\n{size_kib}\n{defined}\n"
              f"LIMIT_KIB=1024 tree_kib={tree_kib} pinned_kib={pinned_kib} PART={part}\nwhl_parts")
    return subprocess.run(["bash", "-c", script], cwd=tree, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"})


def test_the_wheels_travel_in_parts_only_where_they_no_longer_fit_beside_the_tree_and_join_into_the_same_wheels(
        tmp_path):
    whl = tmp_path / ".whl"
    whl.mkdir()
    wheels = {f"w{i}-1.0-py3-none-any.whl": os.urandom(60_000 + i) for i in range(3)}  # 180 kB in all
    for name, data in wheels.items():
        (whl / name).write_bytes(data)
    carry = tmp_path / ".carry"

    def made(tree_kib: int, part: int = 70_000, pinned_kib: int = 0) -> dict[str, int]:
        done = _whl_parts(tmp_path, tree_kib, part, pinned_kib)
        assert done.returncode == 0, done.stdout + done.stderr
        return {p.name: p.stat().st_mtime_ns for p in sorted(carry.glob("whl.*"))} if carry.exists() else {}

    assert made(tree_kib=100) == {}  # 100 KiB of tree and about 180 of wheels: under the limit, carried as they are
    cut = made(tree_kib=900)
    assert sorted(cut) == ["whl.partaa", "whl.partab", "whl.partac", "whl.sha256"]
    joined = b"".join((carry / name).read_bytes() for name in sorted(cut) if ".part" in name)
    assert hashlib.sha256(joined).hexdigest() == (carry / "whl.sha256").read_text().split()[0]
    (tmp_path / "joined.tar").write_bytes(joined)  # as tools/device-env.sh joins and unpacks them
    (tmp_path / "there").mkdir()
    subprocess.run(["tar", "xf", str(tmp_path / "joined.tar"), "-C", str(tmp_path / "there")], check=True)
    assert {p.name: p.read_bytes() for p in (tmp_path / "there" / ".whl").iterdir()} == wheels

    for part in carry.glob("whl.*"):  # an old time, so parts written again would show (timestamps are coarse)
        os.utime(part, (1_000_000, 1_000_000))
    cut = {name: 1_000_000 * 10**9 for name in cut}
    os.utime(whl / "w0-1.0-py3-none-any.whl", (1, 1))  # the same wheels, touched: the same tar, the parts kept
    assert made(tree_kib=900) == cut
    assert made(tree_kib=900, part=60_000) != cut and len(list(carry.glob("whl.part*"))) == 4  # no longer fit
    (whl / "w1-1.0-py3-none-any.whl").write_bytes(b"another version")
    again = made(tree_kib=900, part=60_000)
    joined = b"".join((carry / name).read_bytes() for name in sorted(again) if ".part" in name)
    assert hashlib.sha256(joined).hexdigest() == (carry / "whl.sha256").read_text().split()[0]
    assert b"another version" in joined
    assert made(tree_kib=100) == {}  # room again: the parts go, so no call carries the wheels twice
    assert "whl.sha256" in made(tree_kib=100, pinned_kib=900)  # the pinned tree travels in the wheels' call too
    (carry / "whl.sha256").unlink()  # parts that add up to the tar, beside no checksum: cut again, with one
    assert "whl.sha256" in made(tree_kib=100, pinned_kib=900)
    # at the limit is over it (as device-files.sh says of a call): cut
    whl_kib = int(subprocess.run(["du", "-ck", str(whl)], capture_output=True, text=True,
                                 check=True).stdout.splitlines()[-1].split()[0])
    assert made(tree_kib=100) == {} and "whl.sha256" in made(tree_kib=1024 - whl_kib)
