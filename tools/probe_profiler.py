"""Probe: does the profiler's kernel tracing lengthen the kernels it times inside a CUDA graph replay?

On the H200 (smollm2-buckets, FP32) the same kernels summed 3.3% more time in the graph engine's
replays than in generate(), from about 0.1 us more per launch for small elementwise kernels; and the
profiled graph call took 117 ms (5.4%) longer than its unprofiled steady median, about 0.17 us per
kernel. If tracing adds a fixed cost to each kernel's recorded duration when kernels run back to
back, graph engines' summed kernel time is inflated against generate()'s, whose kernels run with
host gaps between them. This probe times the same kernels four ways:

  replay        a graph of N kernels, no profiler, CUDA events: replay time / N is an upper bound on
                a kernel's true time in a replay (it includes the gaps between kernels)
  graph         the same replays under the profiler: the kernels' recorded durations / N
  eager-dense   the same kernels launched from the host without waiting (queued back to back)
  eager-sparse  launched one at a time, the host waiting for each (as a host-bound generate() runs)

If `graph` per kernel exceeds `replay` per kernel, the profiler lengthens what it records inside a
replay. Run on the device: TEARDOWN_CUPTI=1 python tools/probe_profiler.py OUT.json
"""
from __future__ import annotations

import json
import statistics
import sys
import time

import torch

sys.path.insert(0, ".")
from rollout_study.timing import device_totals  # noqa: E402  (the study's own kernel sums)

N = 2000  # kernels per sequence
REPLAYS = 20


def kernels(kind: str):
    """One step function launching one kernel of `kind` per call, on fixed buffers."""
    device = "cuda"
    if kind == "add":  # a small elementwise kernel, about a microsecond
        x = torch.zeros(16384, device=device)
        return lambda: x.add_(1.0)
    if kind == "gemv":  # SmolLM2's q projection at batch 4 in FP32
        a, w, out = (torch.randn(4, 576, device=device), torch.randn(576, 576, device=device),
                     torch.empty(4, 576, device=device))
        return lambda: torch.mm(a, w, out=out)
    if kind == "softmax":
        x, out = torch.randn(36, 297, device=device), torch.empty(36, 297, device=device)
        return lambda: torch.softmax(x, dim=-1, out=out)
    raise ValueError(kind)


def traced(fn) -> dict:
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        begin = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        wall = time.perf_counter() - begin
    totals = device_totals(prof.profiler.kineto_results.events())
    return {"wall_ms": wall * 1e3, "kernel_ms": totals["kernel_ms"], "kernels": totals["kernels"]}


def probe(kind: str) -> dict:
    step = kernels(kind)
    for _ in range(50):
        step()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(N):
            step()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    replay_us = []
    for _ in range(REPLAYS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        replay_us.append(start.elapsed_time(end) * 1e3 / N)

    def dense():
        for _ in range(N):
            step()

    def sparse():
        for _ in range(N):
            step()
            torch.cuda.synchronize()

    under = {"graph": traced(graph.replay), "eager-dense": traced(dense), "eager-sparse": traced(sparse)}
    out = {"kind": kind, "n": N, "replay_us_per_kernel": statistics.median(replay_us),
           "replay_us_per_kernel_min": min(replay_us)}
    for name, seen in under.items():
        out[name] = {**seen, "us_per_kernel": 1e3 * seen["kernel_ms"] / max(seen["kernels"], 1)}
    out["graph_over_replay"] = out["graph"]["us_per_kernel"] / out["replay_us_per_kernel"]
    out["graph_over_eager_sparse"] = out["graph"]["us_per_kernel"] / out["eager-sparse"]["us_per_kernel"]
    return out


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "probes": [probe(kind) for kind in ("add", "gemv", "softmax")]}
    text = json.dumps(results, indent=1)
    print(text)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w", encoding="utf-8") as handle:
            handle.write(text)
    for p in results["probes"]:
        print(f"{p['kind']:8s} replay {p['replay_us_per_kernel']:.3f} us/kernel (no profiler); traced: graph "
              f"{p['graph']['us_per_kernel']:.3f}, eager dense {p['eager-dense']['us_per_kernel']:.3f}, "
              f"eager sparse {p['eager-sparse']['us_per_kernel']:.3f}; graph/replay {p['graph_over_replay']:.3f}")


if __name__ == "__main__":
    main()
