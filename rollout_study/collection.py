"""Garbage collection around the measured calls: what is collected before each, and what only a full
collection found.

Garbage of earlier calls is collected before each call, so no cyclic leftovers hold device memory in
its figures, and the collector is off during the call (protocol.Study._timed), as timeit does. A full
collection scans every object of a process holding compiled engines: before every call it took a
third of a sweep point's time on the H200's host (0.4 s each, 24 s of a 62-s point on the tiny
model). The young generations take microseconds and hold all a call leaves when it returns. What lives
on past a call and ages, then dies in a cycle, only a full collection frees: one starts each phase
(clearing what set-up, an update or a reference left), and one ends it, recording the device memory
it freed beyond a young collection's, so a figure such garbage could have inflated is named rather
than hidden. The heap is never frozen (gc.freeze would make full
collections cheap, and the collections hf-continuous runs inside its own measured calls cheaper
than in a process that does not freeze).
"""
from __future__ import annotations

import gc

import torch

from . import memory
from .timing import add_elapsed


class Collector:
    def __init__(self, device: torch.device, untimed_ms: dict):
        self.device, self.untimed_ms = device, untimed_ms  # the run's host-time totals: "collect" is added to
        self.old_garbage: list[dict] = []  # device memory only a full collection freed, where it did

    def young(self) -> None:
        """Before each measured call (and its memory baseline)."""
        with add_elapsed(self.untimed_ms, "collect"):
            gc.collect(1)

    def full(self, cycle: int | None = None, phase: str | None = None) -> None:
        """A young collection, then a full one. Before each phase, unrecorded: what engine set-up, an update or
        a reference left is not the calls'. After a phase's last call, with its `phase`: the device memory the
        full one freed is garbage that outlived the young collections before that phase's calls."""
        with add_elapsed(self.untimed_ms, "collect"):
            gc.collect(1)
            before = memory.snapshot(self.device)["allocated"]
            gc.collect()
            after = memory.snapshot(self.device)["allocated"]
        if phase is not None and before is not None and after is not None and before > after:
            self.old_garbage.append({"cycle": cycle, "phase": phase, "freed_bytes": before - after})
