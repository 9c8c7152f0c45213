"""Synchronized clocks and the disjoint breakdown of one call.

A `CallClock` times one rollout call from a synchronized start to a synchronized stop. Parts
come in two kinds, and never nest:
- `part`: host-clock intervals with a device synchronization at both ends, so queued GPU work
  is charged to the part that launched it (allocation, warmup, capture, eager steps);
- `device_part`: on CUDA, an interval of the stream measured with CUDA events and no host
  synchronization (graph replays), so that timing does not insert idle gaps between replays.
  Without CUDA it is a `part`.
Intervals on one stream follow each other, and a synchronized part starts only after the
stream drained, so all parts are disjoint. The total is measured on its own, from the
synchronized start to the synchronized stop; `other` is what the parts leave of it, and parts
that exceed the total are flagged (`overlap_check`), not hidden.

Where every part of a call is a device part (a steady graph call), `other` is the time the device
spends outside the replays, and the clock splits it (`other_split`) by one more event, recorded at
the start after the synchronization and before the host clock is read, so its cost is not in the
total: before the first part (host work the idle device waits for: the engine's checks, the first
prompt loaded, the first launch), between parts (copies and kernels between replays, a replay
launched late) and after the last part (outputs copied out, the synchronized stop).
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager

import torch
from torch.autograd import DeviceType

from .record import PARTS



# Timing events handed from one call to the next, per device: torch creates the CUDA event behind a
# torch.cuda.Event at its first record, so a fresh pair per device part put that creation inside every
# measured call, a cost of the instrument itself. A clock gives its events back once `stop()` has read
# them (a clock never stopped, or a call that raised, leaves its events to the garbage collector), filed
# under the device they were recorded on: an event records only on its own device's streams.
_SPARE_EVENTS: dict[int, list] = {}


def _timing_event():
    spare = _SPARE_EVENTS.get(torch.cuda.current_device())  # record() uses the current device's stream
    return spare.pop() if spare else torch.cuda.Event(enable_timing=True)


def _give_back(*events) -> None:
    for event in events:
        _SPARE_EVENTS.setdefault(event.device.index, []).append(event)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class CallClock:
    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        self.parts = {name: 0.0 for name in PARTS if name != "other"}
        self._start: float | None = None
        self._active: str | None = None
        self._events: list[tuple[str, object, object]] = []
        self.total_ms: float | None = None
        self.breakdown: dict[str, float] | None = None
        self.other_split: dict[str, float] | None = None
        self._start_event = None

    def start(self) -> "CallClock":
        synchronize(self.device)
        if self.device.type == "cuda":
            # On the idle device it completes as it is queued: the device's time at the host's start.
            self._start_event = _timing_event()
            self._start_event.record()
        self._start = time.perf_counter()
        return self

    def now(self) -> float:
        synchronize(self.device)
        return time.perf_counter()

    def _open(self, name: str) -> None:
        if name not in self.parts:
            raise ValueError(f"unknown part {name!r}; parts: {', '.join(self.parts)}")
        if self._active is not None:
            raise RuntimeError(f"part {name!r} opened inside part {self._active!r}: parts must be disjoint")
        self._active = name

    @contextmanager
    def part(self, name: str):
        self._open(name)
        begin = self.now()
        try:
            yield
        finally:
            self.parts[name] += self.now() - begin
            self._active = None

    @contextmanager
    def device_part(self, name: str):
        if self.device.type != "cuda":
            with self.part(name):
                yield
            return
        self._open(name)
        begin, end = _timing_event(), _timing_event()
        begin.record()
        try:
            yield
        finally:
            end.record()
            self._events.append((name, begin, end))
            self._active = None

    def add(self, name: str, seconds: float) -> None:
        """Charge an interval measured elsewhere (a forward hook, say) to a part."""
        self.parts[name] += seconds

    def stop(self) -> tuple[float, dict[str, float]]:
        if self._start is None:
            raise RuntimeError("CallClock.stop() before start()")
        total = self.now() - self._start
        elapsed = [(name, begin.elapsed_time(end)) for name, begin, end in self._events]
        # Before the device parts join `parts`: the split is for calls whose host-clock parts are all zero
        self.other_split = self._split_other(total * 1e3, sum(ms for _, ms in elapsed))
        for name, milliseconds in elapsed:
            self.parts[name] += milliseconds / 1e3
        _give_back(*(event for _, begin, end in self._events for event in (begin, end)),
                   *([self._start_event] if self._start_event is not None else []))
        self._events, self._start_event = [], None
        breakdown = {name: seconds * 1e3 for name, seconds in self.parts.items()}
        # The total is measured on its own; `other` is what the parts leave of it. Parts that add
        # up to more than the total (overlapping intervals: a timing bug) give a negative `other`,
        # which is kept and flagged, never clamped away.
        self.total_ms = total * 1e3
        breakdown["other"] = self.total_ms - sum(breakdown.values())
        self.breakdown = breakdown
        return self.total_ms, breakdown

    def _split_other(self, total_ms: float, device_parts_ms: float) -> dict[str, float] | None:
        """`other` split on the device's clock, for a call whose parts are all device parts (None otherwise:
        a synchronized host part, such as a capture, puts host time between them that no event sees)."""
        if self._start_event is None or not self._events or any(self.parts.values()):
            return None
        first_begin, last_end = self._events[0][1], self._events[-1][2]
        before = self._start_event.elapsed_time(first_begin)
        span = self._start_event.elapsed_time(last_end)
        return {"before_first_part_ms": before, "between_parts_ms": span - before - device_parts_ms,
                "after_last_part_ms": total_ms - span}

    def overlap_check(self, breakdown: dict[str, float]) -> dict:
        """How far the measured parts exceed the independently measured total (0 when they fit)."""
        overlap = max(0.0, -breakdown["other"])
        return {"parts_ms": self.total_ms - breakdown["other"], "overlap_ms": overlap,
                "flagged": overlap > 0.01 * self.total_ms}


@contextmanager
def add_elapsed(totals: dict[str, float], key: str):
    """Add the host milliseconds the block takes to totals[key] (work around the measured calls)."""
    begin = time.perf_counter()
    try:
        yield
    finally:
        totals[key] += (time.perf_counter() - begin) * 1e3


def profile_call(fn, device: torch.device) -> dict:
    """Run `fn` once under the PyTorch profiler; return wall time and summed GPU kernel time (`device_totals`)."""
    from torch.profiler import ProfilerActivity, profile

    # Without TEARDOWN_CUPTI=1 the profiler's CUDA tracing stays on after it exits and slowed
    # every later graph replay by 1.5% on the H200; profiling runs in its own process regardless.
    os.environ.setdefault("TEARDOWN_CUPTI", "1")
    synchronize(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        begin = time.perf_counter()
        fn()
        synchronize(device)
        wall = time.perf_counter() - begin
    # The raw events, not prof.events(): building those (op tree, memory records per CPU op) took
    # over 12 minutes of host time for one 256-token call of eager SmolLM2 (millions of CPU ops),
    # for sums that need only the device events.
    return {"wall_ms": wall * 1e3, **device_totals(prof.profiler.kineto_results.events())}


# Kernels kept by name per profiled call: enough to see where two engines' kernel time parts ways
# (the same model's kernels, counted differently or lasting longer), few enough for every report.
TOP_KERNELS = 12
KERNEL_NAME_CHARS = 400  # templated CUDA names run to thousands of characters; the head names the kernel


def device_totals(events) -> dict:
    """Summed kernel time, kernel count and copy time of a profile's raw (kineto) events, and the
    kernels with the most summed time (`top_kernels`: name, ms, launches as count; most time first)."""
    kernel_ns, kernels, copy_ns = 0, 0, 0
    by_name: dict[str, list[int]] = {}
    for event in events:
        kind = _device_work(event)
        if kind is None:
            continue
        duration = event.end_ns() - event.start_ns()
        if kind == "copy":
            copy_ns += duration
        else:
            kernel_ns += duration
            kernels += 1
            # Under the name as kept, so two kernels that differ only past the cut are one entry.
            entry = by_name.setdefault(event.name()[:KERNEL_NAME_CHARS], [0, 0])
            entry[0] += duration
            entry[1] += 1
    top = sorted(by_name.items(), key=lambda item: (-item[1][0], item[0]))[:TOP_KERNELS]
    return {"kernel_ms": kernel_ns / 1e6, "kernels": kernels, "copy_ms": copy_ns / 1e6,
            "top_kernels": [{"name": name, "ms": ns / 1e6, "count": count} for name, (ns, count) in top]}


def _device_work(event) -> str | None:
    """What device work an event is: "kernel", "copy" (memcpy, memset) or None (none of its own).

    Kineto files more than work under the device: a user annotation is a `record_function` range
    mirrored onto the GPU as one span over the kernels launched inside it, so counting it would add
    those kernels' time a second time (torch's own tables leave them out too). Any such range around
    a profiled call would; inductor's "## Call CompiledFxGraph ... ##" around each compiled call
    becomes one only when input shapes are recorded, which `profile_call` does not do. With some
    settings synchronization waits and profiler ranges come as device events as well."""
    if event.device_type() != DeviceType.CUDA or event.is_user_annotation():
        return None
    if getattr(event, "is_hidden_event", lambda: False)():
        return None
    activity = getattr(event, "activity_type", None)  # kineto's name of the activity, where torch gives it
    activity = activity() if activity is not None else None
    # Only the kinds known to be no work are left out by name: a build that names kernels otherwise
    # keeps them (dropping every unknown kind would make kernel time silently 0).
    if isinstance(activity, str) and activity in NOT_DEVICE_WORK:
        return None
    return "copy" if event.name().startswith(("Memcpy", "Memset")) else "kernel"


# kineto's names of the device activities that are no work of their own (see `_device_work`)
NOT_DEVICE_WORK = ("gpu_user_annotation", "cuda_sync", "cuda_profiler_range")
