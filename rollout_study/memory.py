"""Allocator statistics per phase (CUDA only; the CPU allocator keeps no such counters)."""
from __future__ import annotations

import torch


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def snapshot(device: torch.device) -> dict[str, int | None]:
    if device.type != "cuda":
        return {"allocated": None, "reserved": None, "peak_allocated": None}
    return {
        "allocated": int(torch.cuda.memory_allocated(device)),
        "reserved": int(torch.cuda.memory_reserved(device)),
        "peak_allocated": int(torch.cuda.max_memory_allocated(device)),
    }
