"""The device's memory bandwidth, measured: the divisor of the weight-streaming floor (floors.py).

A datasheet figure is a peak no kernel reaches; a device-to-device copy of a large buffer is what
a streaming kernel gets on this device, at these clocks. The copy reads every byte once and writes
it once, so bandwidth = 2 x buffer bytes / time. The buffer is far larger than any cache (1 GiB),
a few warmup copies come first (the first also pays CUDA's lazy set-up), and the fastest sample is
the one the floor uses: the floor is a lower bound, so it takes the most the device delivered.

It runs in the profiling process before the model loads (protocol.py), never in the process whose
calls are measured: 2 GiB of copies there would heat the device and grow the allocator's cache.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

GIB = 1024 ** 3
BUFFER_BYTES = GIB
WARMUP = 3
REPEATS = 10

Timer = Callable[[Callable[[], object]], float]  # runs its argument once; returns seconds


def event_timer(fn) -> float:
    """Seconds of one run of `fn` on the current CUDA stream, between two CUDA events."""
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    fn()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / 1e3


def host_timer(device: torch.device) -> Timer:
    """Seconds of one run of `fn` between two synchronized host clock readings."""
    def timer(fn) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        begin = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - begin
    return timer


def copy_bandwidth(device: str | torch.device, buffer_bytes: int = BUFFER_BYTES, warmup: int = WARMUP,
                   repeats: int = REPEATS, timer: Timer | None = None) -> dict:
    """Copy a buffer of `buffer_bytes` into another on `device`, `warmup` times unrecorded, then `repeats`
    timed; the record says how it was measured and keeps every sample."""
    device = torch.device(device)
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    cuda = device.type == "cuda"
    timer = timer or (event_timer if cuda else host_timer(device))
    source = torch.empty(buffer_bytes, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    try:
        def copy():
            target.copy_(source)
        for _ in range(warmup):
            timer(copy)
        seconds = [timer(copy) for _ in range(repeats)]
    finally:
        del source, target
        if cuda:
            torch.cuda.empty_cache()  # the profiled calls that follow get the allocator as it was
    moved = 2 * buffer_bytes  # every byte read once and written once
    rates = [moved / s / 1e9 for s in seconds]
    return {
        "method": (f"device-to-device copy of a {buffer_bytes / GIB:g} GiB buffer, bytes read + written over "
                   f"time, timed with {'CUDA events' if cuda else 'a synchronized host clock'}; {warmup} warmup "
                   f"copies, then the fastest of {repeats}"),
        "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "buffer_bytes": buffer_bytes, "bytes_per_copy": moved, "warmup": warmup,
        "samples_ms": [s * 1e3 for s in seconds],
        "best_gb_per_s": max(rates), "median_gb_per_s": statistics.median(rates),
        "gb_per_s": max(rates), "statistic": "best",
    }


def measure(device: torch.device) -> dict | None:
    """The bandwidth record of a study's profiling process: CUDA only; a failure is recorded, not raised,
    because the floor is an aside and must not cost the run its profiles."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    try:
        return copy_bandwidth(device)
    except Exception as err:  # out of memory on a full device, say
        return {"error": f"{type(err).__name__}: {err}"}
