"""A kept sweep held at one commit's code, so that the package can change while the sweep spans sessions.

A sweep kept in sweeps-in-progress/ counts only the points measured by the code that measures (its fingerprint,
rollout_study.environment.code_fingerprint): while it is kept, any change to that code would make every kept
point run again, so the code stood still for as long as a sweep took. A pin, sweeps-in-progress/<sweep>.pin,
holds the sweep at one commit instead:

    commit: <40 hex digits>
    code_sha256: <that commit's code fingerprint, 64 hex digits>

Its points count when that fingerprint measured them (tools/keep_sweep.py, tests/test_sweeps_in_progress.py), and
the device resumes it in that commit's tree, not the working tree's (`tools/h200-reports.sh resume` and `sweep`
with a pinned $SWEEP). `python3 tools/sweep_pin.py carry` (tools/device-files.sh runs it) writes each pinned
commit's tree, as `git archive` gives it, to .carry/tree-<its first 12 digits>.tar, for that call to carry. The
points name the commit they ran at, and `publish` checks each against that commit's fingerprint, as it checks
any result; the published sweep names its code as every report does.

Usage, from the repository root: python3 tools/sweep_pin.py carry
"""
from __future__ import annotations

import functools
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IN_PROGRESS = "sweeps-in-progress"
# What a resume in the pinned tree uses: the package and notebooks (the measuring code), the parameter files,
# the device scripts, the CUDA tests (TESTS=1) and the project file. Not reports/ (22 MB, and no input).
TREE = ("rollout_study", "notebooks", "params", "tools", "tests", "pyproject.toml")
FIELDS = {"commit": re.compile(r"[0-9a-f]{40}"), "code_sha256": re.compile(r"[0-9a-f]{64}")}


class PinError(Exception):
    pass


def pin_path(name: str, root: Path = ROOT) -> Path:
    return root / IN_PROGRESS / f"{name}.pin"


def read(name: str, root: Path = ROOT) -> dict | None:
    """sweeps-in-progress/<name>.pin as {"commit", "code_sha256"}; None where the sweep is not pinned."""
    path = pin_path(name, root)
    if not path.is_file():
        return None
    where, fields = f"{IN_PROGRESS}/{path.name}", {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, _, value = (part.strip() for part in line.partition(":"))
        if key not in FIELDS or key in fields or not FIELDS[key].fullmatch(value):
            raise PinError(f"{where}: {line.strip()!r} is not one of 'commit: <40 lowercase hex digits>' and "
                           f"'code_sha256: <64 lowercase hex digits>', each once")
        fields[key] = value
    missing = sorted(set(FIELDS) - set(fields))
    if missing:
        raise PinError(f"{where}: no {' and no '.join(missing)} line")
    return fields


def tree_name(commit: str) -> str:
    """The carried tree of `commit`, relative to the repository root (the device script names it the same way)."""
    return f".carry/tree-{commit[:12]}.tar"


def archive(commit: str) -> bytes:
    """`commit`'s TREE as a tar, from the history of the repository these tools live in."""
    present = [path for path in TREE
               if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}:{path}"],
                                 capture_output=True).returncode == 0]
    done = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", f"{commit}^{{commit}}", "--", *present],
                          capture_output=True, timeout=120)
    if done.returncode != 0 or not present:
        why = (done.stderr.decode(errors="replace").strip().splitlines() or ["none of its files"])[0]
        raise PinError(f"commit {commit[:12]}'s tree could not be read ({why}): a shallow clone lacks it")
    return done.stdout


# Run by the pinned commit's own Python, in its tree: its fingerprint of itself, and the point files its
# parameter file and point hashing name (the current code may hash parameters another way).
_ASK = """
import json, sys
from rollout_study.environment import code_fingerprint
from rollout_study.sweep import SweepSpec, point_hash
spec = SweepSpec.from_yaml(sys.argv[1])
print(json.dumps({"code_sha256": code_fingerprint(), "name": spec.name, "report": spec.report,
                  "files": [f"{slug}-{point_hash(params)}.json" for slug, params in spec.points()]}))
"""


@functools.lru_cache(maxsize=None)
def pinned_sweep(commit: str, name: str) -> dict:
    """What `commit`'s code says of params/<name>.yaml: {"code_sha256" (its own fingerprint), "name", "report",
    "files" (its points' result files, without points/)}. Each pin's tree is read once a process."""
    with tempfile.TemporaryDirectory() as tree:
        with tarfile.open(fileobj=io.BytesIO(archive(commit))) as tar:
            tar.extractall(tree, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        if not (Path(tree) / "params" / f"{name}.yaml").is_file():
            raise PinError(f"commit {commit[:12]} has no params/{name}.yaml")
        done = subprocess.run([sys.executable, "-c", _ASK, f"params/{name}.yaml"], cwd=tree, capture_output=True,
                              text=True, timeout=300, env={**os.environ, "PYTHONPATH": tree})
        if done.returncode != 0:
            raise PinError(f"commit {commit[:12]}'s code could not read params/{name}.yaml: "
                           f"{(done.stderr.strip().splitlines() or ['no message'])[-1]}")
        return json.loads(done.stdout.strip().splitlines()[-1])


def carry(root: Path = ROOT) -> list[str]:
    """Each pinned commit's tree into root's .carry/ (where missing); returns what was written or found."""
    said = []
    for path in sorted((root / IN_PROGRESS).glob("*.pin")):
        commit = read(path.stem, root)["commit"]
        target = root / tree_name(commit)
        if not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            staged = target.with_name(f".{target.name}.incoming")
            staged.write_bytes(archive(commit))
            os.replace(staged, target)
        said.append(f"{path.stem}: pinned to {commit[:12]}, carry {tree_name(commit)} "
                    f"({target.stat().st_size / 2**20:.1f} MiB) with .whl to resume it")
    return said


def main(argv: list[str]) -> int:
    if argv != ["carry"]:
        print(__doc__.rsplit("\n\n", 1)[-1].strip(), file=sys.stderr)
        return 2
    try:
        for line in carry():
            print(line)
    except (PinError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
