"""The weight-streaming floor: how far each variant's steady call is from the device's physical limit.

A step is one forward of the model over one batch: the prefill is one step (it yields the first
token) and every further token is one more, so a rollout call makes batches x max_new_tokens
steps, whatever the engine. Each step reads the model's weights from device memory at least once,
so no step can take less than weight bytes / bandwidth, and no call less than steps times that.
The weights are the model's parameter storage as recorded at load (models.weight_bytes): tied
embeddings once; an untied input embedding table left out (a lookup reads only its tokens' rows);
buffers left out. The bandwidth is the one measured on the device (bandwidth.py). The floor
ignores the KV cache and activations, so it is a lower bound unless the weights fit in the
device's last-level cache (then a step can read them faster); an engine that batches requests
differently from the workload (continuous batching) makes fewer or more forwards than it counts.

Pure numbers from a `Result`, like analysis.py; a file written before these records existed gives
rows whose floor is absent, with the reason, never an error.
"""
from __future__ import annotations

from dataclasses import dataclass

from .result import Result

NO_GPU = "no GPU: no kernel profile or bandwidth"
NO_BANDWIDTH = "not measured in this run (no bandwidth recorded)"
NO_WEIGHT_BYTES = "not measured in this run (no parameter bytes recorded)"
NO_STEPS = "not measured in this run (no workload batches or new tokens recorded)"


@dataclass(frozen=True)
class Floor:
    """What every variant of one result shares: steps per call, weight bytes per step, the bandwidth."""

    steps: int | None  # forwards per rollout call
    batches: int | None
    max_new_tokens: int | None
    weight_bytes: int | None  # read per step
    gb_per_s: float | None  # measured, 10^9 bytes per second
    absent: str  # why there is no floor; "" when there is one

    @property
    def ms_per_step(self) -> float | None:
        if self.absent:
            return None
        return self.weight_bytes / (self.gb_per_s * 1e9) * 1e3

    @property
    def ms_per_call(self) -> float | None:
        per_step = self.ms_per_step
        return None if per_step is None else per_step * self.steps


@dataclass(frozen=True)
class FloorRow:
    variant: str
    steps: int | None
    wall_ms: float | None  # median of the cycle-0 steady calls
    kernel_ms: float | None  # summed kernel time of the profiled cycle-0 steady call
    kernels: int | None
    kernels_per_step: float | None
    floor_ms_per_step: float | None
    floor_ms: float | None  # per call
    wall_over_floor: float | None
    kernel_over_floor: float | None


def steps_per_call(result: Result) -> tuple[int | None, int | None, int | None]:
    """(steps, batches, max_new_tokens) of one rollout call of this result's workload."""
    batches = result.batches_per_call
    new_tokens = (result.metadata.get("workload") or {}).get("max_new_tokens")
    return (batches * new_tokens if batches and new_tokens else None), batches, new_tokens


def weight_bytes(result: Result) -> int | None:
    """Bytes of weights one step reads; None for a file written before parameter bytes were recorded."""
    model = result.metadata.get("model") or {}
    if model.get("parameter_bytes") is None:
        return None
    return model["parameter_bytes"] - (model.get("embedding_lookup_bytes") or 0)


def bandwidth_record(result: Result) -> dict | None:
    return result.extra.get("bandwidth")


def floor_of(result: Result) -> Floor:
    steps, batches, new_tokens = steps_per_call(result)
    weights, record = weight_bytes(result), bandwidth_record(result)
    rate = (record or {}).get("gb_per_s")
    if result.metadata.get("device") != "cuda":
        absent = NO_GPU
    elif record is None:
        absent = NO_BANDWIDTH
    elif record.get("error") or not rate:
        absent = f"bandwidth measurement failed: {record.get('error') or 'no rate recorded'}"
    elif weights is None:
        absent = NO_WEIGHT_BYTES
    elif steps is None:
        absent = NO_STEPS
    else:
        absent = ""
    return Floor(steps, batches, new_tokens, weights, rate, absent)


def _ratio(value: float | None, floor: float | None) -> float | None:
    return value / floor if value is not None and floor else None


def floor_rows(result: Result) -> list[FloorRow]:
    """One row per variant with cycle-0 steady calls (diagnostic policies left to the hazard report),
    in registry order; profile and floor columns None where this result has none."""
    floor = floor_of(result)
    rows = []
    for variant in result.checked_variants():
        steady = result.samples(variant, 0, "steady")
        if steady is None:
            continue
        profile = result.profile.get(variant)
        if profile is not None and (profile.cycle, profile.phase) != (0, "steady"):
            profile = None  # the floor sets cycle 0's steady samples beside that phase's profile only
        kernel_ms = profile.kernel_ms if profile else None
        kernels = profile.kernels if profile else None
        rows.append(FloorRow(variant, floor.steps, steady.median, kernel_ms, kernels,
                             kernels / floor.steps if kernels is not None and floor.steps else None,
                             floor.ms_per_step, floor.ms_per_call, _ratio(steady.median, floor.ms_per_call),
                             _ratio(kernel_ms, floor.ms_per_call)))
    return rows
