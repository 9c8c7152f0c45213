"""tools/probe_rest.py refuses variants or a device it cannot run, naming --variants or --device and what it takes,
before any child starts, and writes nothing."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

PROBE = Path(__file__).resolve().parents[1] / "tools" / "probe_rest.py"


def _probe(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PROBE), str(tmp_path / "out.json"), *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(PROBE.parents[1])})


def test_an_unknown_variant_is_refused_with_those_it_takes(tmp_path):
    done = _probe(tmp_path, "--variants", "as-is,pinned-twice", "--device", "cpu")
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines()[-1] == ("--variants: unknown ['pinned-twice']; allowed: as-is, unchecked, "
                                            "pinned, on-device, one-batch")
    assert list(tmp_path.iterdir()) == []


def test_pinned_without_cuda_is_refused_before_any_variant_runs(tmp_path):
    done = _probe(tmp_path, "--variants", "as-is,pinned", "--device", "cpu")
    assert done.returncode == 1 and "as-is:" not in done.stdout, done.stdout + done.stderr  # no variant ran
    said = ("--variants: pinned needs CUDA (page-locked memory), not --device cpu; "
            "allowed without it: as-is, unchecked, on-device, one-batch")
    assert done.stderr.splitlines()[-1] == said
    assert list(tmp_path.iterdir()) == []


def test_a_device_the_study_cannot_take_is_refused_before_any_variant_runs(tmp_path):
    # an index would pass a prefix check and fail in every child, which StudyParams refuses
    indexed = _probe(tmp_path, "--variants", "as-is", "--device", "cuda:7")
    assert indexed.returncode == 2 and "as-is:" not in indexed.stdout
    said = indexed.stderr.splitlines()[-1]  # argparse words the rest (quotes, a suggestion) by Python version
    assert "argument --device: invalid choice: 'cuda:7'" in said and "cpu" in said
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is here: --device cuda runs")
def test_cuda_without_cuda_is_refused_before_any_variant_runs(tmp_path):
    absent = _probe(tmp_path, "--variants", "as-is")  # the default, cuda
    assert absent.returncode == 1 and "as-is:" not in absent.stdout, absent.stdout + absent.stderr
    assert absent.stderr.splitlines()[-1] == "--device: cuda, but no CUDA device is here; allowed here: cpu"
    assert list(tmp_path.iterdir()) == []
