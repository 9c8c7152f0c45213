"""A kept sweep held at one commit's code, so that the package can change while the sweep spans sessions.

A sweep kept in sweeps-in-progress/ counts only the points measured by the code that measures (its fingerprint,
rollout_study.environment.code_fingerprint): while it is kept, any change to that code would make every kept
point run again, so the code stood still for as long as a sweep took. A pin, sweeps-in-progress/<sweep>.pin,
holds the sweep at one commit instead:

    commit: <40 hex digits>
    code_sha256: <that commit's code fingerprint, 64 hex digits>

Its points count when that fingerprint measured them (tools/keep_sweep.py, tests/test_sweeps_in_progress.py), and
the device resumes it in that commit's tree, not the working tree's (`tools/h200-reports.sh resume` and `sweep` with
a pinned $SWEEP). `python3 tools/sweep_pin.py carry` (tools/device-files.sh runs it) writes each pinned commit's
TREE (its rollout_study/, notebooks/, params/, tools/, tests/ and pyproject.toml, through `git archive`) to
.carry/tree-<its first 12 digits>.tar, for that call to carry, and removes the trees there no pin names (a finished
sweep's). The points name the commit they ran at, and `publish` checks each against that commit's fingerprint, as it
checks any result; the published sweep names its code as every report does.

Usage, from the repository root: python3 tools/sweep_pin.py carry | field NAME commit|code_sha256
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


def archive(commit: str, repo: Path = ROOT) -> bytes:
    """`commit`'s TREE as a tar, from the history of the repository at `repo`."""
    def git(*args, **kwargs):
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, timeout=120, **kwargs)

    try:
        if git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
            shallow = git("rev-parse", "--is-shallow-repository").stdout.strip() == b"true"
            raise PinError(f"commit {commit[:12]} is not in the repository at {repo}"
                           + (" (a shallow clone: fetch that commit)" if shallow else ""))
        present = [path for path in TREE if git("cat-file", "-e", f"{commit}:{path}").returncode == 0]
        if "rollout_study" not in present:
            raise PinError(f"commit {commit[:12]} has no rollout_study/: no code of this study")
        done = git("archive", "--format=tar", f"{commit}^{{commit}}", "--", *present)
    except subprocess.TimeoutExpired as err:
        raise PinError(f"git took over {err.timeout:.0f} s reading commit {commit[:12]}") from err
    if done.returncode != 0:
        why = (done.stderr.decode(errors="replace").strip().splitlines() or ["no message"])[0]
        raise PinError(f"commit {commit[:12]}'s tree could not be read ({why})")
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
def pinned_sweep(commit: str, name: str, repo: Path = ROOT) -> dict:
    """What `commit`'s code (in the repository at `repo`) says of params/<name>.yaml: {"code_sha256" (its own
    fingerprint), "name", "report", "files" (its points' result files, without points/)}. Read once a process."""
    with tempfile.TemporaryDirectory() as tree:
        with tarfile.open(fileobj=io.BytesIO(archive(commit, repo))) as tar:
            tar.extractall(tree, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        if not (Path(tree) / "params" / f"{name}.yaml").is_file():
            raise PinError(f"commit {commit[:12]} has no params/{name}.yaml")
        try:
            done = subprocess.run([sys.executable, "-c", _ASK, f"params/{name}.yaml"], cwd=tree, capture_output=True,
                                  text=True, timeout=300, env={**os.environ, "PYTHONPATH": tree})
            if done.returncode != 0:
                raise PinError(f"commit {commit[:12]}'s code could not read params/{name}.yaml: "
                               f"{(done.stderr.strip().splitlines() or ['no message'])[-1]}")
            return json.loads(done.stdout.strip().splitlines()[-1])
        except subprocess.TimeoutExpired as err:
            raise PinError(f"commit {commit[:12]}'s code took over {err.timeout:.0f} s "
                           f"reading params/{name}.yaml") from err
        except (IndexError, ValueError) as err:  # no output, or not the JSON line asked for
            raise PinError(f"commit {commit[:12]}'s code said nothing readable of params/{name}.yaml") from err


def carry(root: Path = ROOT) -> list[str]:
    """Each pinned commit's tree into root's .carry/ (written again where it differs), and the trees no pin names
    removed; returns what it did."""
    said, pinned = [], set()
    for path in sorted((root / IN_PROGRESS).glob("*.pin")):
        commit = read(path.stem, root)["commit"]
        target, tree = root / tree_name(commit), archive(commit, root)
        pinned.add(target)
        if not (target.is_file() and target.read_bytes() == tree):
            target.parent.mkdir(parents=True, exist_ok=True)
            staged = target.with_name(f".{target.name}.incoming")
            staged.write_bytes(tree)
            os.replace(staged, target)
        said.append(f"{path.stem}: pinned to {commit[:12]}, carry {tree_name(commit)} "
                    f"({len(tree) / 2**20:.1f} MiB) with .whl (or its parts) to resume it")
    # A tree whose sweep finished would only mislead: device-files.sh sizes the parts beside the largest tree here
    for stale in sorted(set(root.glob(tree_name("*"))) - pinned):
        stale.unlink()
        said.append(f"{stale.relative_to(root)} removed: no pin names its commit")
    return said


def main(argv: list[str]) -> int:
    """`carry`, or `field NAME FIELD`: the pin's FIELD, nothing where NAME is not pinned (the device script's
    reading, so that it reads a pin as these tools do, and refuses one they refuse)."""
    try:
        if argv == ["carry"]:
            for line in carry():
                print(line)
            return 0
        if len(argv) == 3 and argv[0] == "field" and argv[2] in FIELDS:
            pinned = read(argv[1])
            print(pinned[argv[2]] if pinned else "")
            return 0
    except (PinError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(__doc__.rsplit("\n\n", 1)[-1].strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
