"""The optimizer update between rollouts: a real step, in place, as RL trainers take it.

The loss is the negative log-likelihood of the generated response tokens of the latest rollout
(prompt and padding excluded), the core of a policy-gradient step with unit advantages. The
optimizer updates parameters in place, so their addresses stay and their versions move: exactly
what the graph engine's version check has to tell apart from an out-of-place replacement.
"""
from __future__ import annotations

import math
import time

import torch

from . import masks
from .timing import synchronize


def make_optimizer(name: str, model, lr: float) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "adamw":
        # eps suits FP16 parameters; the default 1e-8 underflows to zero there.
        return torch.optim.AdamW(params, lr=lr, eps=1e-6)
    raise ValueError(f"optimizer must be sgd or adamw, got {name!r}")


def optimizer_flags(optimizer: torch.optim.Optimizer) -> dict:
    """foreach and fused as the step will use them (fused steps bump no version counter).

    Left unset (None), PyTorch picks at the first step; the choice it makes is recorded too.
    """
    group = optimizer.param_groups[0]
    flags = {"class": type(optimizer).__name__, "foreach": group.get("foreach"), "fused": group.get("fused")}
    try:
        from torch.optim.optimizer import _default_to_fused_or_foreach

        fused, foreach = _default_to_fused_or_foreach(group["params"], differentiable=False, use_fused=False)
        flags["resolved"] = {"fused": bool(group.get("fused") or fused),
                             "foreach": bool(group.get("foreach") if group.get("foreach") is not None else foreach)}
    except (ImportError, TypeError):  # a private helper: its absence only loses the resolved flags
        pass
    return flags


def response_nll(model, sequences: torch.Tensor, attention_mask: torch.Tensor, response_offset: int) -> torch.Tensor:
    # The same masks and positions as the rollout saw them (generate() counts positions from the
    # first real token); a padding query sees itself, so no row is fully masked and no NaN
    # reaches the gradients.
    attn = getattr(model.config, "_attn_implementation", "sdpa")
    dtype = next(model.parameters()).dtype
    mask4d = masks.for_attention(masks.allowed_keys(attention_mask, sequences.shape[1]), attn, dtype)
    logits = model(input_ids=sequences, attention_mask=mask4d, position_ids=masks.positions(attention_mask),
                   use_cache=False).logits[:, :-1].float()
    targets = sequences[:, 1:]
    log_probs = torch.log_softmax(logits, dim=-1).gather(-1, targets[..., None]).squeeze(-1)
    # Position t predicts token t+1: keep the predictions of response tokens only.
    keep = torch.zeros_like(targets, dtype=torch.bool)
    keep[:, response_offset - 1:] = True
    keep &= attention_mask[:, 1:].bool()
    return -torch.where(keep, log_probs, 0.0).sum() / keep.sum().clamp(min=1)


class NonFiniteUpdate(FloatingPointError):
    pass


def update(model, optimizer, rollout, device, apply: bool = True) -> dict:
    """One optimizer step on the rollout's responses; returns loss and synchronized wall time.

    `apply=False` is the control update: the same forward and backward, no step, so the weights
    stay as they were and whatever moves after it is drift, not the update.
    """
    model.train()
    torch.set_grad_enabled(True)
    try:
        synchronize(torch.device(device))
        begin = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        batch_losses = []
        batches = len(rollout.sequences)
        for seq, mask, offsets in zip(rollout.sequences, rollout.attention_masks, rollout.response_offsets):
            loss = response_nll(model, seq.to(device), mask.to(device), offsets[0]) / batches
            loss.backward()
            batch_losses.append(loss.detach() * batches)
        # One device-to-host read for the losses and one for the gradients, not one per batch or parameter.
        losses = torch.stack(batch_losses).float().cpu().tolist()
        # FP16 parameters have no master copy: a non-finite gradient would silently poison every
        # later rollout (and graph and generate() would agree on the garbage), so refuse it.
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        finite = bool(torch.stack([torch.isfinite(g).all() for g in grads]).all()) if grads else True
        if not finite or not all(math.isfinite(v) for v in losses):
            bad = [n for n, p in model.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
            optimizer.zero_grad(set_to_none=True)
            raise NonFiniteUpdate(f"non-finite loss or gradient (loss {losses}, first bad gradient: {bad[:1]}); "
                                  "the update was not applied")
        if apply:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        synchronize(torch.device(device))
        elapsed = time.perf_counter() - begin
    finally:
        model.eval()
        torch.set_grad_enabled(False)
    return {"loss": sum(losses) / len(losses), "ms": elapsed * 1e3}
