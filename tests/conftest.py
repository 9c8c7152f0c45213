import os
import sys
import tempfile

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# The dequantized SmolLM2 copy (model_cache.py) goes to the temporary folder, not the home folder,
# and one copy serves every test session of this machine.
os.environ.setdefault("ROLLOUT_STUDY_CACHE", os.path.join(tempfile.gettempdir(), "rollout-study-test-cache"))
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


def pytest_runtest_logreport(report):
    """With ROLLOUT_STUDY_EAGER_FAILURES set (tools/device-functions.sh's cuda_tests sets it), a failure's
    traceback is written the moment the test fails. An abort later in the session ends pytest before its summary,
    and every traceback with it: on the H200 on 2026-12-02 a CUDA test failed and the process aborted two tests
    later, in a destructor, leaving only the word FAILED."""
    if report.failed and os.environ.get("ROLLOUT_STUDY_EAGER_FAILURES"):
        sys.stderr.write(f"\n--- {report.nodeid} failed ({report.when}) ---\n{report.longreprtext}\n")
        sys.stderr.flush()


@pytest.fixture
def tiny():
    """The synthetic tiny Llama of the reference workload, FP32 on the CPU."""
    from rollout_study import models
    from rollout_study.params import StudyParams

    def make(**overrides):
        params = StudyParams.from_dict({"device": "cpu", **overrides})
        return params, models.load(params, "cpu", "float32")

    return make


@pytest.fixture
def call_parts():
    """One CPU call of an engine on a workload; returns its breakdown (ms per part)."""
    from rollout_study.timing import CallClock

    def parts(engine, workload) -> dict:
        clock = CallClock("cpu").start()
        engine(workload.batches, clock)
        return clock.stop()[1]

    return parts
