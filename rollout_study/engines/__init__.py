"""Rollout engines: same weights, same inputs, one `RolloutOutput` each.

An engine is called with the workload's batches and a `CallClock`; it charges its work to the
clock's parts and returns the sequences (prompt plus exactly `max_new_tokens` tokens), the
attention mask of every returned sequence, and where each response starts.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..results import target_label as engine_label  # noqa: F401  (one naming for engines and reports)


@dataclass
class RolloutOutput:
    sequences: list[torch.Tensor]  # one [b, prompt_len + new] tensor per batch
    attention_masks: list[torch.Tensor]  # same shapes, 1 on real tokens
    response_offsets: list[list[int]]  # per batch, per request: index of the first generated token
    captures: int = 0

    def to_cpu(self) -> "RolloutOutput":
        return RolloutOutput([s.cpu() for s in self.sequences], [m.long().cpu() for m in self.attention_masks],
                             [list(o) for o in self.response_offsets], self.captures)
