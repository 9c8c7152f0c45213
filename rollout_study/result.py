"""The whole result of a run: reading, writing, the queries every reader asks, derived validity.

One JSON file per run (STUDY.md's contract); `Result.from_dict` refuses a file that is not in the
schema with the reason, and `validity_problems` decides validity from the records themselves,
never from the stored flag alone. The records it holds are in record.py.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

from .files import write_json_atomic
from .record import (LABELS, SCHEMA_VERSION, Call, ColdStart, Failure, Profile, ResultError, Update, _split,
                     run_order)
from .stats import Samples


@dataclass
class Result:
    valid: bool
    metadata: dict
    calls: list[Call]
    updates: list[Update]
    profile: dict[str, Profile]
    failures: list[Failure]
    cold_starts: list[ColdStart] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION
    extra: dict = field(default_factory=dict)

    # -- reading and writing --------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Any, source: str = "result") -> "Result":
        if not isinstance(data, dict):
            raise ResultError(f"{source}: expected a JSON object, got {type(data).__name__}")
        known, extra = _split(cls, data, source)
        if known.get("schema_version") != SCHEMA_VERSION:
            raise ResultError(f"{source}: schema_version {known.get('schema_version')!r} is not {SCHEMA_VERSION}")
        if not isinstance(known["valid"], bool):
            raise ResultError(f"{source}: valid must be true or false, got {known['valid']!r}")
        meta = known["metadata"]
        if not isinstance(meta, dict) or meta.get("label") not in LABELS:
            raise ResultError(f"{source}: metadata.label must be one of {', '.join(LABELS)}")
        for key in ("calls", "updates", "failures"):
            if not isinstance(known[key], list):
                raise ResultError(f"{source}: {key} must be a list, got {type(known[key]).__name__}")
        if not isinstance(known["profile"], dict):
            raise ResultError(f"{source}: profile must be an object, got {type(known['profile']).__name__}")
        known["calls"] = [Call.from_dict(c, f"{source}: call {i}") for i, c in enumerate(known["calls"])]
        known["updates"] = [Update.from_dict(u, f"{source}: update {i}") for i, u in enumerate(known["updates"])]
        known["failures"] = [Failure.from_dict(f, f"{source}: failure {i}") for i, f in enumerate(known["failures"])]
        known["profile"] = {name: Profile.from_dict(p, f"{source}: profile {name}")
                            for name, p in known["profile"].items()}
        known["cold_starts"] = [ColdStart.from_dict(r, f"{source}: cold start {i}")
                                for i, r in enumerate(known.get("cold_starts") or [])]
        return cls(**known, extra=extra)

    def to_dict(self) -> dict:
        out = {"schema_version": self.schema_version, "valid": self.valid, "metadata": self.metadata,
               "calls": [c.to_dict() for c in self.calls], "updates": [u.to_dict() for u in self.updates],
               "profile": {name: p.to_dict() for name, p in self.profile.items()},
               "failures": [f.to_dict() for f in self.failures]}
        if self.cold_starts:
            out["cold_starts"] = [r.to_dict() for r in self.cold_starts]
        return {**out, **self.extra}

    @classmethod
    def read(cls, path: str | os.PathLike) -> "Result":
        with open(path, encoding="utf-8") as handle:
            try:
                data = json.load(handle)
            except json.JSONDecodeError as err:
                raise ResultError(f"{path}: not valid JSON: {err}") from None
        return cls.from_dict(data, str(path))

    def write(self, path: str | os.PathLike) -> str:
        return write_json_atomic(self.to_dict(), path)

    # -- what readers ask -------------------------------------------------------------------
    @property
    def label(self) -> str:
        return self.metadata["label"]

    @property
    def run_name(self) -> str:
        return self.metadata.get("run_name") or "run"

    @property
    def model_name(self) -> str:
        model = self.metadata.get("model") or {}
        return model.get("display_name") or model.get("name") or "-"

    @property
    def cuda_graph(self) -> bool:
        return bool(self.metadata.get("cuda_graph"))

    @property
    def machine(self) -> str:
        hardware = self.metadata.get("hardware") or {}
        return hardware["gpu"] if hardware.get("gpu") else f"CPU: {hardware.get('cpu') or 'unknown'}"

    def variants(self) -> list[str]:
        """Every variant with measured calls, in the engine registry's order."""
        from .engines import variant_rank

        return sorted({c.variant for c in self.calls}, key=variant_rank)

    def checked_variants(self) -> list[str]:
        """The variants whose calls decide validity (no diagnostic policy), in the registry's order."""
        from .engines import variant_rank

        return sorted({c.variant for c in self.checked_calls()}, key=variant_rank)

    @property
    def batches_per_call(self) -> int | None:
        """Batches one rollout call makes: the workload's batch sizes, else ceil(requests / batch size)."""
        workload = self.metadata.get("workload") or {}
        sizes, requests, batch = workload.get("batch_sizes"), workload.get("requests"), workload.get("batch_size")
        return len(sizes) if sizes else (math.ceil(requests / batch) if requests and batch else None)

    def phase_groups(self) -> list[tuple[int, str]]:
        """The (cycle, phase) pairs of the run, in run order."""
        return sorted({(c.cycle, c.phase) for c in self.calls}, key=lambda cp: run_order(*cp))

    def calls_of(self, variant: str, cycle: int | None = None,
                 phase: str | tuple[str, ...] | None = None) -> list[Call]:
        phases = (phase,) if isinstance(phase, str) else phase
        return [c for c in self.calls if c.variant == variant and (cycle is None or c.cycle == cycle)
                and (phases is None or c.phase in phases)]

    def samples(self, variant: str, cycle: int | None = None,
                phase: str | tuple[str, ...] | None = None) -> Samples | None:
        calls = self.calls_of(variant, cycle, phase)
        return Samples([c.total_ms for c in calls]) if calls else None

    def cold_start_samples(self, with_initialization: bool = False) -> dict[str, Samples]:
        """Each variant's first-call times over the fresh cold-start processes.

        `with_initialization` adds what that process spent initializing CUDA and the model's
        libraries before the call (which a real first call pays too). Older files ran every variant
        in one process, newer ones one per process; grouping by each call's own variant reads either.
        """
        firsts: dict[str, list[float]] = {}
        for run in self.cold_starts:
            init = (run.startup or {}).get("initialization_ms") if with_initialization else 0.0
            if init is None:
                continue
            for call in run.calls:
                if call.phase == "first":
                    firsts.setdefault(call.variant, []).append(call.total_ms + init)
        return {variant: Samples(values) for variant, values in firsts.items()}

    def checked_calls(self) -> list[Call]:
        """The calls whose parity decides validity: every call but those of diagnostic policies."""
        return [c for c in self.calls if not c.diagnostic]

    def unmatched_calls(self) -> list[Call]:
        return [c for c in self.checked_calls() if not c.parity_ok]

    def stale_calls(self) -> list[Call]:
        """Calls of diagnostic policies that did not match generate(): stale replays the check would have stopped."""
        return [c for c in self.calls if c.diagnostic and not c.parity_ok]

    def validity_problems(self) -> list[str]:
        """Why this result is not valid, derived from its calls, failures and cold starts; [] when valid.

        The stored `valid` flag is never trusted on its own: a file that says valid beside a failed
        parity check or a failure is reported as a contradiction.
        """
        problems = []
        unmatched = self.unmatched_calls()
        if unmatched:
            first = unmatched[0]
            what = f": {first.parity.describe_mismatch()}" if first.parity else ""
            problems.append(f"{len(unmatched)} call(s) without parity (first: {first.variant} "
                            f"cycle {first.cycle} {first.phase} #{first.index}{what})")
        if self.failures:
            problems.append(f"{len(self.failures)} failure(s) (first: {self.failures[0].variant} "
                            f"{self.failures[0].phase}: {self.failures[0].error})")
        bad_cold = [run for run in self.cold_starts if not run.valid or any(not c.parity_ok for c in run.calls)]
        if bad_cold:
            problems.append(f"{len(bad_cold)} cold-start run(s) invalid")
        if not self.calls:
            problems.append("no measured calls")
        if self.valid and problems:
            problems.insert(0, "the file says valid, but its records contradict it")
        elif not self.valid and not problems:
            problems.append("the file says invalid")
        return problems

    @property
    def is_valid(self) -> bool:
        return not self.validity_problems()
