"""How fast this process's host dispatches the work a host-bound engine does: a fixed loop of tiny CPU
tensor operations, timed at a run's start and at its end.

generate() on a small model, hf-compile and hf-continuous spend most of a call launching operators from
the host; the graph engines replay. Two machines of the same lent H200 kind (same CPU name and cores), an
hour apart, ran the tiny model's generate() steady calls in 48-63 ms and in 79-92 ms, and graph-compiled's
compilation in 15.6 s and 24.1 s, while the graph's replays did not move. The code differed only in the
garbage collection before each call (outside the timed region, and off during it), and host speed was
not measured then: a slower host is the likely cause, not yet a measured one. A sweep spread over
sessions mixes machines, so every result now says how fast its host ran (the sweep report gives it per
point, beside the spread of each point's generate() calls: present/host.py).
"""
from __future__ import annotations

import gc
import statistics
import time

import torch

OPS = 5000  # per repeat: long enough to time (about 10 ms), short enough to cost nothing
REPEATS = 5


def measure() -> dict:
    """Microseconds per tiny CPU tensor operation (an add into a preallocated one-element tensor: the
    dispatcher's work and nothing else), the median of REPEATS loops, and each loop's figure."""
    a, b, out = torch.ones(1), torch.ones(1), torch.empty(1)
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(OPS // 10):  # warm: the first calls resolve the dispatch
            torch.add(a, b, out=out)
        samples = []
        for _ in range(REPEATS):
            begin = time.perf_counter()
            for _ in range(OPS):
                torch.add(a, b, out=out)
            samples.append((time.perf_counter() - begin) / OPS * 1e6)
    finally:
        if enabled:
            gc.enable()
    return {"dispatch_us": statistics.median(samples), "samples_us": samples,
            "method": f"median of {REPEATS} loops of {OPS} torch.add(a, b, out=out) on one-element CPU tensors"}
