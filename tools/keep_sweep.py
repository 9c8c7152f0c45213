"""Bring a sweep pack home from the device: an unfinished sweep into sweeps-in-progress/, a finished one into runs/.

Usage, from the repository root: python3 tools/keep_sweep.py PACK.tgz   (PACK: what `h200-reports.sh sweep-pack`
wrote, `$SWEEP-runs.tgz`)

A long sweep spans sessions, and only what is committed outlives one: runs/ is git-ignored, and a new session
starts from a fresh checkout. So the unfinished folder (sweep.json and points/, the raw results) is kept in
sweeps-in-progress/<sweep>/, tracked, and `h200-reports.sh resume` resumes it from there. Those points are not
results until the sweep finishes and is published: the finished folder goes to runs/ for
`python -m rollout_study publish`, after which sweeps-in-progress/<sweep>/ is removed.

A pack never replaces a kept folder that holds more points: an older pack (from an earlier call of the same
session, say) would otherwise throw measured points away.
"""
from __future__ import annotations

import json
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

IN_PROGRESS = "sweeps-in-progress"


class KeepError(Exception):
    pass


def measured_points(folder: Path) -> int:
    """Points of a sweep folder that have their result file (failed ones have none)."""
    with open(folder / "sweep.json", encoding="utf-8") as handle:
        record = json.load(handle)
    return sum(1 for entry in record.get("points", [])
               if entry.get("status") != "failed" and (folder / entry["file"]).is_file())


def sweep_name(folder: Path) -> str:
    """The sweep's name as its sweep.json records it, checked against the folder's name."""
    try:
        with open(folder / "sweep.json", encoding="utf-8") as handle:
            name = json.load(handle)["spec"]["name"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise KeepError(f"{folder.name}: not a sweep folder ({err})") from err
    if not (folder.name.startswith(f".{name}.partial-") or folder.name.startswith(f"{name}-")):
        raise KeepError(f"{folder.name}: holds sweep {name!r}, which its name does not say")
    return name


def keep(pack: Path, root: Path) -> list[str]:
    """Unpack `pack` into root's sweeps-in-progress/ (unfinished) and runs/ (finished); returns what was done."""
    done = []
    with tempfile.TemporaryDirectory() as unpacked:
        with tarfile.open(pack) as archive:
            archive.extractall(unpacked, filter="data")  # no path outside, no links out
        folders = sorted(p for p in Path(unpacked).iterdir() if p.is_dir())
        if not folders:
            raise KeepError(f"{pack}: holds no sweep folder")
        plans = []
        for folder in folders:  # every folder checked before anything is written
            name = sweep_name(folder)
            if folder.name.startswith("."):
                target = root / IN_PROGRESS / name
                if target.is_dir() and measured_points(target) > measured_points(folder):
                    raise KeepError(f"{target} holds {measured_points(target)} measured points, the pack "
                                    f"{measured_points(folder)}: an older pack; nothing kept")
            else:
                target = root / "runs" / folder.name
                if target.exists():
                    raise KeepError(f"{target} exists already; nothing kept")
            plans.append((folder, name, target))
        for folder, name, target in plans:
            target.parent.mkdir(parents=True, exist_ok=True)
            if folder.name.startswith("."):
                staged = target.parent / f".{name}.incoming"
                shutil.rmtree(staged, ignore_errors=True)
                shutil.copytree(folder, staged)
                shutil.rmtree(target, ignore_errors=True)
                staged.rename(target)
                done.append(f"kept {target} ({measured_points(target)} measured points): commit it; "
                            f"`h200-reports.sh resume` resumes it")
            else:
                shutil.move(str(folder), target)
                done.append(f"finished {target} ({measured_points(target)} measured points): "
                            f"`python -m rollout_study publish {target.relative_to(root)}`, then "
                            f"`git rm -r {IN_PROGRESS}/{name}`")
    return done


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        for line in keep(Path(argv[0]), Path.cwd()):
            print(line)
    except (KeepError, OSError, tarfile.TarError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
