"""torch.compile's own accounting inside one engine call: compile and CUDA-graph recording time, and counters.

Dynamo runs callbacks around every compilation (trigger DYNAMO) and, since torch 2.7, around
every CUDA-graph recording of inductor's cudagraph trees (trigger CUDAGRAPH_RECORDING). A
`CompileWatch` listens to them only while an engine call runs, so compilations of other code in
the process are not charged to it. Each interval starts and ends with a device synchronization,
as `CallClock.part` does: GPU work queued before a compilation is charged to what launched it,
not to the compilation.

`counters_now` reads torch's own counters (`torch._dynamo.utils.counters`); they are process-wide
and cumulative, so engines report them as they are and as differences between calls.
"""
from __future__ import annotations

import time
from contextlib import contextmanager

import torch

# How the message of a recompile-limit hit reads in counters["unimplemented"] (torch 2.11-2.13:
# "Dynamo recompile limit exceeded"; older releases: "cache_size_limit reached").
LIMIT_MARKS = ("recompile limit", "recompile_limit", "cache_size_limit", "cache size limit")


def counters_now() -> dict[str, int]:
    """Dynamo's and inductor's counters now (process-wide, cumulative)."""
    from torch._dynamo.utils import counters

    def get(group: str, key: str) -> int:
        return int(counters.get(group, {}).get(key, 0))

    hits = sum(count for message, count in counters.get("unimplemented", {}).items()
               if any(mark in message.lower() for mark in LIMIT_MARKS))
    return {"frames_compiled": get("frames", "total"), "frames_ok": get("frames", "ok"),
            "unique_graphs": get("stats", "unique_graphs"), "recompile_limit_hits": hits,
            "cudagraph_skips": get("inductor", "cudagraph_skips"),
            "cudagraph_recorded_non_static_inputs": get("inductor", "cudagraph_recorded_non_static_inputs"),
            # Inductor keeps compiled graphs on disk across processes: a "first" compile that hits this
            # cache costs far less than a cold one, so a first call's compile time depends on it.
            "fxgraph_cache_hit": get("inductor", "fxgraph_cache_hit"),
            "fxgraph_cache_miss": get("inductor", "fxgraph_cache_miss"),
            "autograd_cache_hit": get("aot_autograd", "autograd_cache_hit")}


def difference(now: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {key: now[key] - before.get(key, 0) for key in now}


def recompile_limit() -> int | None:
    import torch._dynamo.config as config

    return getattr(config, "recompile_limit", getattr(config, "cache_size_limit", None))


def recording_callbacks() -> bool:
    """Whether this torch reports CUDA-graph recordings through the compile callbacks."""
    from torch._dynamo.callback import CallbackTrigger

    return hasattr(CallbackTrigger, "CUDAGRAPH_RECORDING")


class CompileWatch:
    """Seconds and counts of compilations ("compile") and CUDA-graph recordings ("capture") while `watching`."""

    def __init__(self, device):
        self.device = torch.device(device)
        self.seconds = {"compile": 0.0, "capture": 0.0}
        self.count = {"compile": 0, "capture": 0}
        self._depth = 0
        self._open: tuple[str, float] | None = None

    def _synchronize(self) -> None:
        # Never inside a stream capture: synchronizing there would invalidate it.
        if self.device.type == "cuda" and not torch.cuda.is_current_stream_capturing():
            torch.cuda.synchronize(self.device)

    @staticmethod
    def _kind(args) -> str:
        # Callbacks take no argument before torch 2.7; every callback then is a compilation.
        trigger = getattr(getattr(args, "callback_trigger", None), "name", "DYNAMO")
        return "capture" if trigger == "CUDAGRAPH_RECORDING" else "compile"

    def _start(self, args=None) -> None:
        # torch runs only the outermost of nested callbacks; the depth keeps that true on any release.
        self._depth += 1
        if self._depth == 1:
            self._synchronize()
            self._open = (self._kind(args), time.perf_counter())

    def _end(self, args=None) -> None:
        self._depth -= 1
        if self._depth == 0 and self._open is not None:
            kind, began = self._open
            self._synchronize()
            self.seconds[kind] += time.perf_counter() - began
            self.count[kind] += 1
            self._open = None

    @contextmanager
    def watching(self):
        handler = torch._dynamo.callback_handler
        handler.register_start_callback(self._start)
        handler.register_end_callback(self._end)
        try:
            yield self
        finally:
            handler.remove_start_callback(self._start)
            handler.remove_end_callback(self._end)

    def charge(self, clock) -> None:
        """Add the watched intervals to the call's clock (they never overlap another part of it)."""
        clock.add("compile", self.seconds["compile"])
        clock.add("capture", self.seconds["capture"])
