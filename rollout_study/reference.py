"""`generate()` for the current weights, with the top two logits of every step: the parity reference.

Run outside every timed region, once per weight version; `parity.compare` checks each measured
call against it and uses the top two logits to diagnose a mismatch.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .engines.base import RolloutOutput
from .engines.eager import full_mask, generate


@dataclass
class Reference:
    """What `generate()` returns for these weights, with the top two raw logits of every step for diagnosing
    mismatches (a first differing token is explained by how close the top two were)."""

    output: RolloutOutput  # on the CPU
    top2_logits: list[torch.Tensor]  # per batch: [b, new_tokens, 2] float32 on the CPU, largest first
    top2_tokens: list[torch.Tensor]  # per batch: [b, new_tokens, 2] their token ids

    def steps(self, batch: int) -> int:
        return self.top2_logits[batch].shape[1]


def reference(model, batches, max_new_tokens: int, pad_token_id: int, device) -> Reference:
    sequences, masks, offsets, values, tokens = [], [], [], [], []
    with torch.no_grad():
        for batch in batches:
            out = generate(model, batch, max_new_tokens, pad_token_id, device,
                           return_dict_in_generate=True, output_logits=True)
            sequences.append(out.sequences.cpu())
            masks.append(full_mask(batch, max_new_tokens, "cpu"))
            offsets.append([batch.input_ids.shape[1]] * batch.size)
            # The top two on the device, step by step: a mismatch's diagnosis needs no more, and the whole
            # logits of a large vocabulary cost the host gigabytes and seconds per reference (the 1B shape at
            # batch 64 and 512 new tokens: 16.8 GB, copied and stacked twice over), untimed but not free
            top = [torch.topk(step.float(), 2) for step in out.logits]
            values.append(torch.stack([t.values for t in top], dim=1).cpu())
            tokens.append(torch.stack([t.indices for t in top], dim=1).cpu())
    return Reference(RolloutOutput(sequences, masks, offsets), values, tokens)
