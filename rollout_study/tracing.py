"""What the profiler's kernel tracing does to the kernels it records inside a CUDA graph replay.

Summed kernel time compares engines whose kernels run differently: the graph engines' back to back
inside replays, generate()'s one by one with host gaps between them. On the H200 the same kernels
recorded about 0.1 us more per launch in the graph engine's replays than in generate() (SmolLM2,
256 new tokens), and profiled graph calls took 0.15-0.36 us more wall per kernel than unprofiled
ones (cycle-0 steady profiles). If tracing lengthens what it records when kernels run back to back,
the graph engines' kernel sums carry the instrument's cost. So the profiling process measures it, as
it measures the bandwidth (before the model loads, never in the process whose calls are timed): one
graph of `STEPS` steps of one small operation, replayed without the profiler (CUDA events: replay
time over the kernels bounds a kernel's true time in a replay from above, the gaps between kernels
included) and under it (the recorded durations, summed as every profile is, over the kernels
recorded). Recorded kernels that outlast every unprofiled replay show the tracing's own cost; ones
that fit cannot rule out a cost smaller than the gaps (unprofiled time per kernel minus recorded).
Then the same steps launched one at a time, each waited for (`alone`): kernels with host gaps between
them, as a host-bound generate() leaves them.

On the H200 (tools/probe_profiler.py, commit 2f35927) the recorded durations fit within the unprofiled
replays (add 1.005 us per kernel against 0.985, GEMV 4.654 against 4.726, softmax 1.971 against 2.129)
while the profiled replays' wall grew to 3.3-6.7 us per kernel: tracing widened the gaps, not the
kernels. Launched one at a time the same kernels were recorded at 0.888, 4.447 and 1.849 us: 0.12-0.21
us (5-13%) less than in a replay. A kernel sum of a graph engine against generate()'s carries that
difference for such kernels, whether the time is the kernel's or the trace's; every report now says
how large it was in its own profiling process.
"""
from __future__ import annotations

import statistics

import torch

from .bandwidth import event_timer
from .timing import profile_call

STEPS = 2000  # steps of one operation per graph
REPLAYS = 20
PROFILED = 3  # profiled replays per kind, each in a session of its own
KINDS = ("add", "gemv", "softmax")


def step_function(kind: str, device: torch.device):
    """One operation of `kind` per call, on fixed buffers (so a graph can replay it)."""
    if kind == "add":  # a small elementwise kernel, about a microsecond on an H200
        x = torch.zeros(16384, device=device)
        return lambda: x.add_(1.0)
    if kind == "gemv":  # SmolLM2's q projection at batch 4, FP32, laid out as F.linear lays it out
        a, w = torch.randn(4, 576, device=device), torch.randn(576, 576, device=device)
        out = torch.empty(4, 576, device=device)
        return lambda: torch.mm(a, w.t(), out=out)
    if kind == "softmax":  # one decode step's attention weights: batch 4 x 9 heads over 297 keys
        x, out = torch.randn(36, 297, device=device), torch.empty(36, 297, device=device)
        return lambda: torch.softmax(x, dim=-1, out=out)
    raise ValueError(f"kind: {kind!r}; one of {', '.join(KINDS)}")


def captured(step, device: torch.device, steps: int = STEPS) -> torch.cuda.CUDAGraph:
    """A graph of `steps` calls of `step`, warmed up and captured on one side stream (as the engines capture)."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(3):
            step()
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(steps):
            step()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize(device)
    return graph


def one_at_a_time(step, device: torch.device, steps: int = STEPS):
    """`steps` calls of `step` from the host, each waited for: the kernels run alone, with host gaps between
    them, as a host-bound generate() leaves them (it does not wait for each; its host is simply slower than
    its small kernels)."""
    def launches():
        for _ in range(steps):
            step()
            torch.cuda.synchronize(device)
    return launches


def measure(device: str | torch.device, kinds: tuple[str, ...] = KINDS) -> list[dict] | None:
    """The profiling process's record, one entry per kind of kernel (None without CUDA).

    Every kind's unprofiled replays come before any profiler session, so none of them follows one;
    then one throwaway session (the process's first pays CUPTI's set-up), then PROFILED replays of
    each kind, each its own session. A failure is recorded, not raised: the profiles this qualifies
    are still worth having."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    # Each graph keeps its step (whose buffers it reads and writes): a graph replayed after its
    # buffers were freed, and their memory released by a later capture's empty_cache, wrote to
    # memory no longer mapped (an illegal address on the H200, and every later CUDA call failed).
    graphs, steps, records = {}, {}, {}
    for kind in kinds:
        try:
            steps[kind] = step_function(kind, device)
            graph = captured(steps[kind], device)
            records[kind] = {"replay_us": [event_timer(graph.replay) * 1e6 for _ in range(REPLAYS)]}
            graphs[kind] = graph
        except Exception as error:  # noqa: BLE001
            records[kind] = {"error": f"{type(error).__name__}: {error}"}
    try:
        if graphs:
            profile_call(next(iter(graphs.values())).replay, device)  # the throwaway session
        for kind in graphs:
            records[kind]["seen"] = [profile_call(graphs[kind].replay, device) for _ in range(PROFILED)]
        for kind in graphs:  # a failure here costs the comparison with kernels alone, not the replays' record
            try:
                records[kind]["alone"] = [profile_call(one_at_a_time(steps[kind], device), device)
                                          for _ in range(PROFILED)]
            except Exception as error:  # noqa: BLE001
                records[kind]["alone_error"] = f"{type(error).__name__}: {error}"
        graphs.clear()
        steps.clear()
        torch.cuda.empty_cache()  # the graphs' pools go back before the model loads, as the bandwidth's buffers do
    except Exception as error:  # noqa: BLE001
        for kind in graphs:
            records[kind] = {"error": f"{type(error).__name__}: {error}"}
    return [record_of(kind, records[kind]) for kind in kinds]


def record_of(kind: str, measured: dict, steps: int = STEPS) -> dict:
    """Per kernel, both ways: a step may launch more than one kernel (a matrix product with a split-K
    reduction), so both times are divided by the kernels the profiler recorded in a replay."""
    if "error" in measured:
        return {"kind": kind, "error": measured["error"]}
    counts = sorted({seen["kernels"] for seen in measured["seen"]})
    if len(counts) != 1 or counts[0] == 0 or counts[0] % steps:
        return {"kind": kind, "error": f"the profiler recorded {' or '.join(map(str, counts))} kernels in replays "
                                       f"of {steps} steps (expected the same positive multiple of it in each)"}
    kernels = counts[0]
    replay = [us / kernels for us in measured["replay_us"]]
    recorded = [1e3 * seen["kernel_ms"] / kernels for seen in measured["seen"]]
    # The profiled replay's own wall: recorded durations that sum past it overlap or are stretched by
    # the tracing; a wall above the unprofiled replays' says the tracing slowed the replay itself.
    profiled_wall = [1e3 * seen["wall_ms"] / kernels for seen in measured["seen"]]
    # The same kernels launched one at a time, recorded by the same profiler: what a kernel sum of
    # generate() counts for them, against what a replay's counts (each over the kernels recorded there).
    alone_counts = {seen["kernels"] for seen in measured.get("alone", [])}
    alone = ([1e3 * seen["kernel_ms"] / seen["kernels"] for seen in measured["alone"]]
             if alone_counts == {kernels} else None)
    return {"kind": kind, "steps": steps, "kernels": kernels, "kernels_per_step": kernels // steps,
            "names": [k["name"] for k in measured["seen"][0].get("top_kernels", [])],
            "replay_us_per_kernel": statistics.median(replay), "replay_us_per_kernel_samples": replay,
            "recorded_us_per_kernel": statistics.median(recorded), "recorded_us_per_kernel_samples": recorded,
            "excess_us_per_kernel": statistics.median(recorded) - statistics.median(replay),
            "profiled_wall_us_per_kernel": statistics.median(profiled_wall),
            "alone_us_per_kernel": statistics.median(alone) if alone else None,
            "alone_us_per_kernel_samples": alone,
            **({"alone_error": measured["alone_error"]} if "alone_error" in measured else {}),
            "method": f"a graph of {steps} {kind} steps: its replay's time between CUDA events ({len(replay)} "
                      f"replays, no profiler) and the kernels' durations the profiler recorded ({len(recorded)} "
                      "replays, one session each, after a throwaway session), each over the kernels recorded; "
                      f"alone: the {steps} steps launched one at a time, each waited for ({len(recorded)} sessions)"}
