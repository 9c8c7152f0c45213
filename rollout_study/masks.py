"""Attention masks and positions for left-padded batches, shared by the graph engine and the trainer.

Both follow what `generate()` does for real tokens: causal attention over non-padding keys, and
position ids counted from the first real token. They differ in one place on purpose: a padding
query, which would see no key at all, may see itself. A fully masked row is what makes SDPA
return NaN (forward in some kernels, backward in others); no real query ever attends to a
padding key, so real tokens are unaffected.
"""
from __future__ import annotations

import torch


def positions(mask2d: torch.Tensor) -> torch.Tensor:
    return (mask2d.cumsum(-1) - 1).masked_fill(mask2d == 0, 1)


def allowed_keys(key_valid: torch.Tensor, queries: int) -> torch.Tensor:
    """[b, 1, queries, keys] boolean: query i (at position i) may attend key j."""
    keys = key_valid.shape[-1]
    key_index = torch.arange(keys, device=key_valid.device)[None, None, None, :]
    query_index = torch.arange(queries, device=key_valid.device)[None, None, :, None]
    return ((key_index <= query_index) & key_valid[:, None, None, :].bool()) | (key_index == query_index)


def for_attention(allowed: torch.Tensor, attn: str, dtype: torch.dtype) -> torch.Tensor:
    """SDPA takes the boolean mask; eager attention adds a float mask (0 or the dtype's minimum)."""
    if attn != "eager":
        return allowed
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed, torch.finfo(dtype).min)
