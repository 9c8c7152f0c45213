"""The device script's sweep steps run whole on the CPU, with the real package: `sweep local` (or `sweep ray`, a
local Ray instance of CPUs) starts the sweep in the background, `continue` holds until it finishes and packs it, and
tools/keep_sweep.py takes the pack, as a session on the GPU machine does them (README, "Sweeps across sessions"; the
pair's two steps on one host). The other device tests stand in for the study; this one is what tells that the
steps and the package still fit together."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from device_tree import commands, install_wheels, script

ROOT = Path(__file__).resolve().parents[1]
NVIDIA_SMI = 'case "$*" in *-L*) echo "GPU 0: NVIDIA H200 (UUID: x)";; *) echo "NVIDIA H200, 580.00, 1980, 30";; esac'


@pytest.fixture
def short_tmp():
    """A temporary folder of a short path: Ray's sockets go under it, and a socket's path has at most 107 bytes
    (pytest's tmp_path, with Ray's session folder under it, passed that)."""
    folder = tempfile.mkdtemp(prefix="rehearsal-", dir="/tmp")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("executor", ["local", "ray"])
def test_a_cpu_sweep_runs_through_the_device_scripts_steps_and_its_pack_is_kept(tmp_path, short_tmp, executor):
    tree = tmp_path / "tree"
    for name in ("rollout_study", "params", "notebooks"):  # copies: a run writes beside the package it imports
        shutil.copytree(ROOT / name, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
    (tree / "tools").mkdir()
    for name in ("keep_sweep.py", "device-wheels.txt"):
        shutil.copy(ROOT / "tools" / name, tree / "tools")
    install_wheels(tmp_path)  # the image's packages are this machine's: nothing to install
    env = {"SWEEP": "sweep-cpu", "TMPDIR": short_tmp,
           "PATH": f"{commands(tmp_path / 'bin', **{'nvidia-smi': NVIDIA_SMI})}:{os.environ['PATH']}"}

    started = script(tmp_path, "sweep", executor, **env)
    assert started.returncode == 0, started.stdout + started.stderr
    held = script(tmp_path, "continue", "240", timeout=300, **env)
    assert held.returncode == 0, held.stdout + held.stderr
    assert "held" in held.stdout and "for SWEEP-DONE: logged" in held.stdout
    assert "sweep-cpu: finished" in held.stdout
    # the log's last lines, as continue shows them, are the sweep's own
    log = (tmp_path / "sweep.log").read_text().splitlines()
    assert log[-1] == "SWEEP-DONE" and log[-2].startswith("sweep folder: "), log[-5:]

    kept = subprocess.run([sys.executable, "tools/keep_sweep.py", str(tmp_path / "sweep-cpu-runs.tgz")], cwd=tree,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(tree)})
    assert kept.returncode == 0, kept.stdout + kept.stderr
    finished = [p for p in (tree / "runs").iterdir() if p.name.startswith("sweep-cpu-")]
    assert len(finished) == 1 and (finished[0] / "sweep.json").is_file() and (finished[0] / "report.html").is_file()
    assert f"finished runs/{finished[0].name}" in kept.stdout and "git rm" not in kept.stdout
    assert json.loads((finished[0] / "sweep.json").read_text())["wall"]["executor"] == executor
