"""The device script's sweep steps run whole on the CPU, with the real package, as the two-GPU pair's session runs
them on one host (README, "Sweeps across sessions"): `sweep local` starts the sweep in the background, `continue`
holds until it finishes and packs it, tools/keep_sweep.py takes the pack; then the same points under another name
through `sweep ray` (a local Ray instance of CPUs), kept likewise, and `compare` reads the two. The other device
tests stand in for the study; this one is what tells that the steps and the package still fit together."""
import json
import os
import re
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


PAIR_RAY = """# sweep-cpu's points through Ray, as sweep-h200-pair-ray2 is sweep-h200-pair's
name: sweep-cpu-ray2
subset_of: sweep-cpu.yaml
repeat_alone: 1
sweep:
  batch:
    - {batch_size: 1, requests: 1}
    - {batch_size: 2, requests: 2}
"""


def test_a_cpu_pair_runs_through_the_device_scripts_steps_as_the_two_gpu_pair_does(tmp_path, short_tmp):
    # README's pair on one host: `sweep local`, `continue` until it finishes, its pack kept; then the same points
    # under another name through `sweep ray` (a local Ray instance of CPUs), `continue`, kept; then `compare`
    tree = tmp_path / "tree"
    for name in ("rollout_study", "params", "notebooks"):  # copies: a run writes beside the package it imports
        shutil.copytree(ROOT / name, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
    (tree / "params" / "sweep-cpu-ray2.yaml").write_text(PAIR_RAY)
    (tree / "tools").mkdir()
    for name in ("keep_sweep.py", "device-wheels.txt"):
        shutil.copy(ROOT / "tools" / name, tree / "tools")
    install_wheels(tmp_path)  # the image's packages are this machine's: nothing to install
    env = {"TMPDIR": short_tmp,
           "PATH": f"{commands(tmp_path / 'bin', **{'nvidia-smi': NVIDIA_SMI})}:{os.environ['PATH']}"}
    kept = {}
    for sweep, executor in (("sweep-cpu", "local"), ("sweep-cpu-ray2", "ray")):
        started = script(tmp_path, "sweep", executor, SWEEP=sweep, **env)
        assert started.returncode == 0, started.stdout + started.stderr
        held = script(tmp_path, "continue", "240", timeout=300, SWEEP=sweep, **env)
        assert held.returncode == 0, held.stdout + held.stderr
        assert "for SWEEP-DONE: logged" in held.stdout and f"{sweep}: finished" in held.stdout
        # the log's last lines, as continue shows them, are the sweep's own
        log = (tmp_path / "sweep.log").read_text().splitlines()
        assert log[-1] == "SWEEP-DONE" and log[-2].startswith("sweep folder: "), log[-5:]

        took = subprocess.run([sys.executable, "tools/keep_sweep.py", str(tmp_path / f"{sweep}-runs.tgz")],
                              cwd=tree, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(tree)})
        assert took.returncode == 0, took.stdout + took.stderr
        finished = [p for p in (tree / "runs").iterdir() if re.fullmatch(rf"{sweep}-\d{{8}}-\d{{6}}", p.name)]
        assert len(finished) == 1 and (finished[0] / "report.html").is_file()
        assert f"finished runs/{finished[0].name}" in took.stdout and "git rm" not in took.stdout
        assert json.loads((finished[0] / "sweep.json").read_text())["wall"]["executor"] == executor
        kept[executor] = finished[0]

    compared = subprocess.run([sys.executable, "-m", "rollout_study", "compare", str(kept["local"]), str(kept["ray"])],
                              cwd=tree, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(tree)})
    assert compared.returncode == 0, compared.stdout + compared.stderr  # the same points, both wall times
    said = compared.stdout
    assert "same points: yes (2 and 2)" in said and "tokens: every call matches" in said, said
    assert re.search(r"^wall time A / B: \d+\.\d+x$", said, re.M), said
