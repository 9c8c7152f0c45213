"""Comparison with the `generate()` reference and the diagnosis of a mismatch.

Three things must match per request: the generated tokens, the attention mask of the returned
sequence, and the response offset (where the response starts in the returned sequence). On a
token mismatch the first differing step is reported with both tokens and the reference's top-2
logit margin at that step: a margin near zero points to numerics, a large one to a real bug.
"""
from __future__ import annotations

import hashlib

import torch

from .engines.base import RolloutOutput
from .reference import Reference


def _margin(reference: Reference, batch: int, row: int, step: int) -> dict:
    values, tokens = reference.top2_logits[batch][row, step], reference.top2_tokens[batch][row, step]
    return {"reference_top2_tokens": [int(t) for t in tokens],
            "reference_top2_margin": float(values[0] - values[1])}


def compare(output: RolloutOutput, reference: Reference, request_ids: list[list[int]] | None = None) -> dict:
    """Return the record's `parity` block: ok, tokens, attention_mask, response_offsets, mismatch."""
    got, ref = output.to_cpu(), reference.output
    tokens_ok = masks_ok = offsets_ok = True
    first: dict | None = None
    if len(got.sequences) != len(ref.sequences):
        return {"ok": False, "tokens": False, "attention_mask": False, "response_offsets": False,
                "mismatch": {"kind": "batches", "engine": len(got.sequences), "reference": len(ref.sequences)}}
    for b, (seq, ref_seq) in enumerate(zip(got.sequences, ref.sequences)):
        ids = request_ids[b] if request_ids else list(range(seq.shape[0]))
        for row in range(ref_seq.shape[0]):
            request = ids[row]
            # Where each response starts is read off the returned sequences, not trusted from the
            # engine: generate() returns the prompt then exactly its new tokens, so its offset is the
            # length minus the new tokens; the engine's offset must equal it and the engine's
            # sequence must carry the same prompt before it.
            off = got.response_offsets[b][row]
            ref_off = ref_seq.shape[1] - reference.steps(b)
            prompt_ok = off == ref_off and row < seq.shape[0] and seq.shape[1] - off == ref_seq.shape[1] - ref_off \
                and torch.equal(seq[row, :off], ref_seq[row, :ref_off])
            if not prompt_ok:
                offsets_ok = False
                first = first or {"kind": "response_offset", "request": request, "engine": off, "reference": ref_off}
            mask, ref_mask = got.attention_masks[b][row], ref.attention_masks[b][row]
            if mask.shape != ref_mask.shape or not torch.equal(mask, ref_mask):
                masks_ok = False
                position = _first_difference(mask, ref_mask)
                first = first or {"kind": "attention_mask", "request": request, "position": position}
            response = seq[row, off:] if row < seq.shape[0] else torch.empty(0, dtype=torch.long)
            ref_response = ref_seq[row, ref_off:]
            if response.shape != ref_response.shape or not torch.equal(response, ref_response):
                tokens_ok = False
                step = _first_difference(response, ref_response)
                # The first token mismatch is the most telling detail; it replaces mask/offset details.
                if first is None or first["kind"] != "tokens":
                    first = {"kind": "tokens", "request": request, "step": step,
                             "engine_token": int(response[step]) if step < response.numel() else None,
                             "reference_token": int(ref_response[step]) if step < ref_response.numel() else None}
                    if step < reference.steps(b):
                        first.update(_margin(reference, b, row, step))
    return {"ok": tokens_ok and masks_ok and offsets_ok, "tokens": tokens_ok, "attention_mask": masks_ok,
            "response_offsets": offsets_ok, "mismatch": first}


def _first_difference(a: torch.Tensor, b: torch.Tensor) -> int:
    n = min(a.numel(), b.numel())
    diff = (a[:n] != b[:n]).nonzero()
    return int(diff[0]) if diff.numel() else n


def requests_changed(before: RolloutOutput, after: RolloutOutput) -> int:
    """How many requests' sequences differ between two references (the weights before and after a sync)."""
    changed = 0
    for a, b in zip(before.sequences, after.sequences):
        if a.shape != b.shape:
            changed += a.shape[0]
            continue
        changed += int((a != b).any(dim=1).sum())
    return changed


def tokens_hash(output: RolloutOutput) -> str:
    """SHA-256 of every request's generated tokens, so two runs' determinism can be compared from files."""
    digest = hashlib.sha256()
    for sequence, offsets in zip(output.sequences, output.response_offsets):
        for row, offset in enumerate(offsets):
            digest.update(sequence[row, offset:].to(torch.int64).numpy().tobytes())
    return digest.hexdigest()
