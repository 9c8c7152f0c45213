"""Probe: does clearing cuBLAS's workspaces break a CUDA graph captured before, and does capturing after a
clear (the workspace then allocated in the graph's private pool) protect it?

torch.compile's CUDA graph trees (hf-compile: mode "reduce-overhead") call
`torch._C._cuda_clearCublasWorkspaces()` before and after each warm-up and recording. A graph captured
earlier on a stream whose workspace came from the default pool still holds that workspace's address;
once freed and released (empty_cache: continuous batching's reset calls it), a replay whose GEMMs use
the workspace writes to unmapped memory. Each mode runs in a child process (an illegal access poisons
the CUDA context for good) and prints whether the replay after the clear gave the same output.

    python tools/probe_workspace.py       # unprotected, unprotected-junk, then protected-junk
"""
from __future__ import annotations

import subprocess
import sys

SHAPES = [(64, 8192, 2048), (64, 1536, 576), (64, 2048, 128256)]  # the 1B down_proj, SmolLM2's, the 1B lm_head


def child(mode: str) -> None:
    import torch

    torch.manual_seed(0)
    pairs = [(torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")) for m, k, n in SHAPES]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up on the capture stream: its workspace comes from the default pool
        for a, b in pairs:
            a @ b
    torch.cuda.current_stream().wait_stream(stream)
    if mode.startswith("protected"):
        torch._C._cuda_clearCublasWorkspaces()  # the capture allocates a new one, in the graph's pool
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=torch.cuda.graph_pool_handle(), stream=stream):
        outs = [a @ b for a, b in pairs]
    graph.replay()
    torch.cuda.synchronize()
    before = [o.clone() for o in outs]
    torch._C._cuda_clearCublasWorkspaces()  # what CUDA graph trees do
    torch.cuda.empty_cache()  # what continuous batching's reset does
    # Over the freed memory: a replay that still writes to the old workspace corrupts these (with no junk the
    # memory stays unmapped, and such a replay is an illegal address)
    junk = [torch.full((8 * 2**20,), float("nan"), device="cuda") for _ in range(64)] if mode.endswith("junk") else []
    graph.replay()
    torch.cuda.synchronize()
    same = all(torch.equal(o, b) for o, b in zip(outs, before))
    intact = all(bool(t.isnan().all()) for t in junk)
    print(f"{mode}: replay after the clear {'gave the same output' if same else 'gave OTHER output'}"
          + (f", junk {'intact' if intact else 'CORRUPTED'}" if junk else ""), flush=True)


def main() -> None:
    if len(sys.argv) > 1:
        child(sys.argv[1])
        return
    import torch

    if not torch.cuda.is_available():  # each child would fail alike, three tracebacks deep
        sys.exit("probe_workspace needs a CUDA device (it probes the GPU); none is available here")
    for mode in ("unprotected", "unprotected-junk", "protected-junk"):
        done = subprocess.run([sys.executable, __file__, mode], capture_output=True, text=True, timeout=300)
        lines = (done.stdout + done.stderr).strip().splitlines()
        print(f"{mode}: exit {done.returncode}; " + " | ".join(lines[-3:] if done.returncode else lines[-1:]),
              flush=True)


if __name__ == "__main__":
    main()
