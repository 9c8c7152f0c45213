"""`generate()` with its logits for the current weights: the parity reference.

Run outside every timed region, once per weight version; `parity.compare` checks each measured
call against it and uses the logits to diagnose a mismatch.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .engines.base import RolloutOutput
from .engines.eager import full_mask, generate


@dataclass
class Reference:
    """What `generate()` returns for these weights, with its raw logits for diagnosing mismatches."""

    output: RolloutOutput  # on the CPU
    logits: list[torch.Tensor]  # per batch: [b, new_tokens, vocab] float32 on the CPU


def reference(model, batches, max_new_tokens: int, pad_token_id: int, device) -> Reference:
    sequences, masks, offsets, logits = [], [], [], []
    with torch.no_grad():
        for batch in batches:
            out = generate(model, batch, max_new_tokens, pad_token_id, device,
                           return_dict_in_generate=True, output_logits=True)
            sequences.append(out.sequences.cpu())
            masks.append(full_mask(batch, max_new_tokens, "cpu"))
            offsets.append([batch.input_ids.shape[1]] * batch.size)
            logits.append(torch.stack([step.float().cpu() for step in out.logits], dim=1))
    return Reference(RolloutOutput(sequences, masks, offsets), logits)
