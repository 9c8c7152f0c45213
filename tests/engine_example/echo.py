"""A throwaway engine for tests/test_engines.py: generate() without hooks, charged to decode.

It is the whole of what adding an engine takes: this one file, plus one registry line.
"""
from __future__ import annotations

import torch

from rollout_study.engines.base import Engine, RolloutOutput
from rollout_study.engines.eager import full_mask, generate


class EchoEngine(Engine):
    name = "echo"
    colors = {None: "#17becf"}

    def __init__(self, model, device, max_new_tokens: int, pad_token_id: int):
        self.model, self.device = model, torch.device(device)
        self.max_new_tokens, self.pad_token_id = max_new_tokens, pad_token_id

    @classmethod
    def build(cls, loaded, device, params, policy):
        return cls(loaded.model, device, params.max_new_tokens, loaded.pad_token_id)

    def __call__(self, batches, clock) -> RolloutOutput:
        sequences, masks, offsets = [], [], []
        with clock.part("decode"), torch.no_grad():
            for batch in batches:
                out = generate(self.model, batch, self.max_new_tokens, self.pad_token_id, self.device)
                sequences.append(out)
                masks.append(full_mask(batch, self.max_new_tokens, self.device))
                offsets.append([batch.input_ids.shape[1]] * batch.size)
        return RolloutOutput(sequences, masks, offsets)
