"""The GPU-only probes in tools/ refuse a machine without CUDA with one line, before any work, not a traceback."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for a machine without CUDA")
@pytest.mark.parametrize("probe, args", [("probe_batch_cliff", ["out.json"]), ("probe_profiler", ["out.json"]),
                                         ("probe_workspace", [])])
def test_a_gpu_probe_without_cuda_says_so_and_writes_nothing(tmp_path, probe, args):
    done = subprocess.run([sys.executable, str(ROOT / "tools" / f"{probe}.py"), *args], capture_output=True,
                          text=True, cwd=tmp_path, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 1 and "Traceback" not in done.stderr + done.stdout, done.stderr
    # its own line (torch may warn before it), no usage: the arguments were fine
    assert f"{probe} needs a CUDA device (it probes the GPU); none is available here" in done.stderr.splitlines()
    assert "usage:" not in done.stderr, done.stderr
    assert list(tmp_path.iterdir()) == []
