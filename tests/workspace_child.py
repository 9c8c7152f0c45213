"""Child process of the cuBLAS-workspace test in test_cuda.py (an illegal address poisons a CUDA context for
good, so each case runs in a process of its own). Prints one JSON line.

    python tests/workspace_child.py protected|unprotected

The graph engine captures the 1B shape at batch 64; then what torch.compile's CUDA graph trees (hf-compile)
do between two of its calls in a sweep point: every cuBLAS workspace freed. A tensor of the workspace's size
is then allocated on the capture stream and filled with NaN: the allocator's best fit hands it the block
just freed, if that block was the default pool's. The engine replays. `unprotected` captures as the engine
did before it owned its workspace (the graphs keep the warmup's, from the default pool): where its GEMMs
use the workspace, the replay writes into the NaN tensor.
"""
from __future__ import annotations

import json
import os
import sys

import torch

from rollout_study import models
from rollout_study.engines import static_runner
from rollout_study.engines.graph import GraphEngine
from rollout_study.params import StudyParams
from rollout_study.timing import CallClock
from rollout_study.workload import random_workload

BATCH, PROMPT, NEW = 64, 32, 16
WORKSPACE = 32 * 2**20  # torch's default cuBLAS workspace from Hopper on (CUBLAS_WORKSPACE_CONFIG unset)


def active_blocks(stream, size: int) -> list[int]:
    """Addresses of the live blocks of `size` bytes allocated on `stream`, in the default pool."""
    return [block.get("address") for segment in torch.cuda.memory_snapshot()
            if segment.get("stream") == stream.cuda_stream and tuple(segment.get("segment_pool_id", ())) == (0, 0)
            for block in segment.get("blocks", []) if block.get("state") == "active_allocated"
            and block.get("size") == size]


def main(mode: str) -> None:
    if torch.cuda.get_device_capability()[0] < 9 or "CUBLAS_WORKSPACE_CONFIG" in os.environ:
        print(json.dumps({"skip": "the workspace size is torch's default from Hopper on"}), flush=True)
        return
    if mode == "unprotected":
        static_runner.own_cublas_workspace = lambda: None
    params = StudyParams.from_dict({"device": "cuda", "model": "synthetic-llama-3.2-1b", "dtype": "float32"})
    loaded = models.load(params, "cuda", "float32")
    workload = random_workload(BATCH, BATCH, PROMPT, params.shape()["vocab"], seed=3)
    engine = GraphEngine(loaded.model, "cuda", "recapture", PROMPT, NEW)
    stream, size = static_runner.side_stream(torch.device("cuda", torch.cuda.current_device())), WORKSPACE

    def call():
        clock = CallClock("cuda").start()
        out = engine(workload.batches, clock)
        clock.stop()
        return out.to_cpu()

    first = call()
    held = active_blocks(stream, size)  # the workspace the graphs were captured with, where it is the default pool's
    torch._C._cuda_clearCublasWorkspaces()
    with torch.cuda.stream(stream):
        junk = torch.full((size // 4,), float("nan"), device="cuda")
    torch.cuda.synchronize()
    again = call()
    torch.cuda.synchronize()
    print(json.dumps({"mode": mode, "captures": [first.captures, again.captures],
                      "workspace_in_default_pool": len(held), "junk_on_that_block": junk.data_ptr() in held,
                      "same_tokens": all(torch.equal(a, b) for a, b in zip(first.sequences, again.sequences)),
                      "junk_written": int((~junk.isnan()).sum())}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
