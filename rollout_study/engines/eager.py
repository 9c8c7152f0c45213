"""Hugging Face `generate()` with its default dynamic cache: the baseline."""
from __future__ import annotations

import time

import torch

from ..timing import CallClock, synchronize
from .base import Engine, RolloutOutput


def generate(model, batch, max_new_tokens: int, pad_token_id: int, device, **extra):
    return model.generate(
        input_ids=batch.input_ids.to(device), attention_mask=batch.attention_mask.to(device),
        max_new_tokens=max_new_tokens, do_sample=False, num_beams=1, pad_token_id=pad_token_id, **extra)


def full_mask(batch, new_tokens: int, device) -> torch.Tensor:
    ones = torch.ones((batch.size, new_tokens), dtype=torch.long, device=device)
    return torch.cat([batch.attention_mask.to(device), ones], dim=1)


class EagerEngine(Engine):
    """`generate()` untouched: its measured calls are timed as a whole (all of it in `other`).

    An instrumented call (`instrumented = True`) splits it into prefill (first forward) and decode
    with forward hooks that synchronize around each forward; they cost 3-30% on a host-bound
    `generate()`, so the protocol makes such calls apart from the measured ones and reports their
    cost. The hooks are attached for one call only.
    """

    name = "eager"
    colors = {None: "#7f7f7f"}

    def __init__(self, model, device, max_new_tokens: int, pad_token_id: int):
        self.model = model
        self.device = torch.device(device)
        self.max_new_tokens = max_new_tokens
        self.pad_token_id = pad_token_id
        self.instrumented = False
        self._clock: CallClock | None = None
        self._forwards = 0
        self._began = 0.0

    @classmethod
    def build(cls, loaded, device, params, policy):
        return cls(loaded.model, device, params.max_new_tokens, loaded.pad_token_id)

    def describe(self) -> dict:
        return {"engine": self.name, "policy": None, "cache": "dynamic", "cuda_graph": False,
                "breakdown": "measured calls untouched (total only, in other); prefill/decode from separate "
                             "instrumented calls"}

    def _before_forward(self, module, args):
        synchronize(self.device)
        self._began = time.perf_counter()

    def _after_forward(self, module, args, output):
        synchronize(self.device)
        self._clock.add("prefill" if self._forwards == 0 else "decode", time.perf_counter() - self._began)
        self._forwards += 1

    def __call__(self, batches, clock: CallClock) -> RolloutOutput:
        sequences, masks, offsets = [], [], []
        self._clock = clock
        hooks = [self.model.register_forward_pre_hook(self._before_forward),
                 self.model.register_forward_hook(self._after_forward)] if self.instrumented else []
        try:
            for batch in batches:
                self._forwards = 0
                with torch.no_grad():
                    out = generate(self.model, batch, self.max_new_tokens, self.pad_token_id, self.device)
                sequences.append(out)
                masks.append(full_mask(batch, out.shape[1] - batch.input_ids.shape[1], self.device))
                offsets.append([batch.input_ids.shape[1]] * batch.size)
        finally:
            for hook in hooks:
                hook.remove()
            self._clock = None
        return RolloutOutput(sequences, masks, offsets)
