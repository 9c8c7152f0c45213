"""The device script (tools/h200-reports.sh) run whole from a tree of its own: its tools alone, with STATE_DIR in
place of the device's /tmp where the script reads its steps' records, logs and work copies."""
from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ("h200-reports.sh", "device-env.sh", "device-functions.sh", "sweep_pin.py")


def functions(*names: str, source: str = "device-functions.sh") -> str:
    """The named functions of tools/SOURCE, whole, to run in bash on their own."""
    text = ""
    for name in names:
        found = subprocess.run(["sed", "-n", f"/^{name}()/,/^}}/p", str(ROOT / "tools" / source)],
                               capture_output=True, text=True, check=True).stdout
        assert found.startswith(f"{name}()"), f"tools/{source} lost {name}()"
        text += found
    return text


def in_bash(functions: str, script: str, state: Path, cwd: Path | None = None, timeout: int = 60,
            **env: str) -> subprocess.CompletedProcess:
    """The functions (what `functions()` read), then `script`, in bash in `cwd`, with `state` in place of the
    device's /tmp and the system's commands alone on PATH unless `env` says otherwise."""
    return subprocess.run(["bash", "-c", f"{functions}\n{script}"], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={"STATE_DIR": str(state), "PATH": "/usr/bin:/bin", **env})


def script(tmp_path: Path, step: str, *args: str, timeout: int = 60,
           **env: str | None) -> subprocess.CompletedProcess:
    """`bash tools/h200-reports.sh STEP ARGS` in tmp_path/tree (what a test puts there beside the tools stays); a
    variable given as None is left unset (STATE_DIR=None: the device's /tmp)."""
    tree = tmp_path / "tree"
    (tree / "tools").mkdir(parents=True, exist_ok=True)
    for name in TOOLS:
        shutil.copy(ROOT / "tools" / name, tree / "tools")
    env = {"PATH": os.environ["PATH"], "OUT": str(tmp_path), "HOME": str(tmp_path), "STATE_DIR": str(tmp_path),
           "ROLLOUT_STUDY_COMMIT": "a" * 40, **env}
    return subprocess.run(["bash", "tools/h200-reports.sh", step, *args], cwd=tree, capture_output=True, text=True,
                          timeout=timeout, env={name: value for name, value in env.items() if value is not None})


def commands(folder: Path, **bodies: str) -> str:
    """Each command a shell script of its body in `folder` (made), to put first on PATH in place of the real one
    (a study, pip, tar, nvidia-smi): `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, body in bodies.items():
        (folder / name).write_text(f"#!/bin/sh\n{body}\n")
        (folder / name).chmod(0o755)
    return str(folder)


def with_stand_ins(tmp_path: Path, step: str, stand_ins: dict[str, str],
                   **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """`script` STEP in tmp_path/tree, whose code, parameter files and sweep gate are this checkout's, with the
    `stand_ins` (command: body, written again each call) first on PATH: what it said, and the lines the stand-ins
    wrote to tmp_path/events as it ran (their calls, in order)."""
    tree, bin_dir = tmp_path / "tree", tmp_path / "bin"
    if not (tree / "params").exists():
        (tree / "tools").mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "tools" / "sweep-gate.sh", tree / "tools")
        for name in ("rollout_study", "params"):
            (tree / name).symlink_to(ROOT / name)
    commands(bin_dir, **stand_ins)
    events = tmp_path / "events"
    events.unlink(missing_ok=True)
    done = script(tmp_path, step, PATH=f"{bin_dir}:{os.environ['PATH']}", **env)
    return done, events.read_text().splitlines() if events.exists() else []


def install_wheels(state: Path) -> None:
    """The mark tools/device-env.sh leaves where it installed the carried wheels (wheels_installed reads it), in
    STATE_DIR `state`: a machine that got its .whl call."""
    (state / "site").mkdir(exist_ok=True)
    (state / "site" / ".wheels-installed").touch()


def archive_paths(archive: Path) -> list[str]:
    """What an archive the device script packed holds: its paths, sorted, a folder's without its trailing slash."""
    with tarfile.open(archive) as tar:
        return sorted(tar.getnames())
