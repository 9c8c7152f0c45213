"""Hugging Face `generate()` with its default dynamic cache: the baseline and the parity reference."""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ..timing import CallClock, synchronize
from . import RolloutOutput


def _generate(model, batch, max_new_tokens: int, pad_token_id: int, device, **extra):
    return model.generate(
        input_ids=batch.input_ids.to(device), attention_mask=batch.attention_mask.to(device),
        max_new_tokens=max_new_tokens, do_sample=False, num_beams=1, pad_token_id=pad_token_id, **extra)


def _full_mask(batch, new_tokens: int, device) -> torch.Tensor:
    ones = torch.ones((batch.size, new_tokens), dtype=torch.long, device=device)
    return torch.cat([batch.attention_mask.to(device), ones], dim=1)


class EagerEngine:
    """`generate()` timed as a whole; forward hooks split it into prefill (first forward) and decode.

    The hooks synchronize around each forward. generate() already synchronizes once per step
    (its stopping check reads a device value), so they add about one more sync per token.
    """

    name = "eager"
    policy = None

    def __init__(self, model, device, max_new_tokens: int, pad_token_id: int):
        self.model = model
        self.device = torch.device(device)
        self.max_new_tokens = max_new_tokens
        self.pad_token_id = pad_token_id
        self._clock: CallClock | None = None
        self._forwards = 0
        self._began = 0.0
        model.register_forward_pre_hook(self._before_forward)
        model.register_forward_hook(self._after_forward)

    def describe(self) -> dict:
        return {"engine": self.name, "policy": None, "cache": "dynamic", "cuda_graph": False}

    def _before_forward(self, module, args):
        if self._clock is not None:
            synchronize(self.device)
            self._began = time.perf_counter()

    def _after_forward(self, module, args, output):
        if self._clock is not None:
            synchronize(self.device)
            self._clock.add("prefill" if self._forwards == 0 else "decode", time.perf_counter() - self._began)
            self._forwards += 1

    def __call__(self, batches, clock: CallClock) -> RolloutOutput:
        sequences, masks, offsets = [], [], []
        self._clock = clock
        try:
            for batch in batches:
                self._forwards = 0
                with torch.no_grad():
                    out = _generate(self.model, batch, self.max_new_tokens, self.pad_token_id, self.device)
                sequences.append(out)
                masks.append(_full_mask(batch, out.shape[1] - batch.input_ids.shape[1], self.device))
                offsets.append([batch.input_ids.shape[1]] * batch.size)
        finally:
            self._clock = None
        return RolloutOutput(sequences, masks, offsets)


@dataclass
class Reference:
    """What `generate()` returns for these weights, with its raw logits for diagnosing mismatches."""

    output: RolloutOutput  # on the CPU
    logits: list[torch.Tensor]  # per batch: [b, new_tokens, vocab] float32 on the CPU


def reference(model, batches, max_new_tokens: int, pad_token_id: int, device) -> Reference:
    sequences, masks, offsets, logits = [], [], [], []
    with torch.no_grad():
        for batch in batches:
            out = _generate(model, batch, max_new_tokens, pad_token_id, device,
                            return_dict_in_generate=True, output_logits=True)
            sequences.append(out.sequences.cpu())
            masks.append(_full_mask(batch, max_new_tokens, "cpu"))
            offsets.append([batch.input_ids.shape[1]] * batch.size)
            logits.append(torch.stack([step.float().cpu() for step in out.logits], dim=1))
    return Reference(RolloutOutput(sequences, masks, offsets), logits)
