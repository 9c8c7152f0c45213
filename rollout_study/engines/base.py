"""The engine interface: what every rollout engine is, and what it returns.

An engine is built from the parameters (`build`), then called with the workload's batches and a
`CallClock`; it charges its work to the clock's parts and returns a `RolloutOutput`: the
sequences (prompt plus exactly `max_new_tokens` tokens), the attention mask of every returned
sequence, and where each response starts. Engines never know the protocol that calls them or the
record format; `engines/__init__.py` holds the registry that names them.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..record import variant_name


@dataclass
class RolloutOutput:
    sequences: list[torch.Tensor]  # one [b, prompt_len + new] tensor per batch
    attention_masks: list[torch.Tensor]  # same shapes, 1 on real tokens
    response_offsets: list[list[int]]  # per batch, per request: index of the first generated token
    captures: int = 0

    def to_cpu(self) -> "RolloutOutput":
        return RolloutOutput([s.cpu() for s in self.sequences], [m.long().cpu() for m in self.attention_masks],
                             [list(o) for o in self.response_offsets], self.captures)


class Engine:
    """Base of every engine. Subclasses set `name`, `policies` (empty: no refresh policy) and `colors`."""

    name: str = ""
    policies: tuple[str, ...] = ()  # refresh policies the engine takes; () means it has none
    colors: dict = {}  # policy (or None) -> plot colour
    policy: str | None = None
    last_check: str | None = None  # what the engine's weight check decided on its last call, if it has one

    @classmethod
    def build(cls, loaded, device: torch.device, params, policy: str | None) -> "Engine":
        raise NotImplementedError

    @property
    def variant(self) -> str:
        return variant_name(self.name, self.policy)

    def describe(self) -> dict:
        return {"engine": self.name, "policy": self.policy}

    diagnostic_policies: tuple[str, ...] = ()  # policies that exist to show a hazard, never to run rollouts

    def weights_updated(self, model=None) -> None:
        """Told after every training update, as an RL trainer tells its rollout worker; `model` is the
        rollout model now (a new object after a reload). Default: read that model from now on."""
        if model is not None and hasattr(self, "model"):
            self.model = model

    def call_notes(self) -> dict:
        """What the engine records about its last call (compilations, captures per bucket); the
        protocol stores it in the call's record under `engine_notes`. Default: nothing."""
        return {}

    def close(self) -> None:
        """Release hooks or graphs; the engine is not called again."""

    def __call__(self, batches, clock) -> RolloutOutput:
        raise NotImplementedError
