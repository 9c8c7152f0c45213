"""Child process of the cuBLAS-workspace test in test_cuda.py (an illegal address poisons a CUDA context for
good, so each case runs in a process of its own). Prints one JSON line.

    python tests/workspace_child.py protected|unprotected

The graph engine captures the 1B shape at batch 64, then what hf-compile and hf-continuous do between two
of its calls in a sweep point is done here: every cuBLAS workspace freed (torch.compile's CUDA graph trees)
and the allocator's cache emptied (continuous batching's reset). Fresh allocations filled with NaN then
take over the freed memory, and the engine replays. `unprotected` captures as the engine did before it
owned its workspace (the graph keeps the warmup's workspace, from the default pool).
"""
from __future__ import annotations

import json
import sys

import torch

from rollout_study import models
from rollout_study.engines import static_runner
from rollout_study.engines.graph import GraphEngine
from rollout_study.params import StudyParams
from rollout_study.timing import CallClock
from rollout_study.workload import random_workload

BATCH, PROMPT, NEW = 64, 32, 16


def main(mode: str) -> None:
    if mode == "unprotected":
        static_runner.own_cublas_workspace = lambda: None
    params = StudyParams.from_dict({"device": "cuda", "model": "synthetic-llama-3.2-1b", "dtype": "float32"})
    loaded = models.load(params, "cuda", "float32")
    workload = random_workload(BATCH, BATCH, PROMPT, params.shape()["vocab"], seed=3)
    engine = GraphEngine(loaded.model, "cuda", "recapture", PROMPT, NEW)

    def call():
        clock = CallClock("cuda").start()
        out = engine(workload.batches, clock)
        clock.stop()
        return out.to_cpu()

    first = call()
    torch._C._cuda_clearCublasWorkspaces()
    torch.cuda.empty_cache()
    junk = [torch.full((8 * 2**20,), float("nan"), device="cuda") for _ in range(64)]  # 2 GiB, 32 MiB each
    again = call()
    torch.cuda.synchronize()
    print(json.dumps({"mode": mode, "captures": [first.captures, again.captures],
                      "same_tokens": all(torch.equal(a, b) for a, b in zip(first.sequences, again.sequences)),
                      "junk_intact": all(bool(t.isnan().all()) for t in junk)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
