"""The trainer: its own weights, an optimizer step on the latest rollout, and the sync into the rollout model.

Real RL post-training keeps the trainer apart from the rollout engine: master weights in float32
(the default), or bfloat16 weights with float32 optimizer state, and a sync of the new weights
into the rollout model after each step (`sync.py`: one `update_path`). `in-place` is the seed's
case (the optimizer steps the rollout model's own weights); `lora-merge` trains a float32 LoRA
adapter and merges it into the rollout weights.

The loss is the negative log-likelihood of the generated response tokens of the latest rollout
(prompt and padding excluded), the core of a policy-gradient step with unit advantages.
"""
from __future__ import annotations

import copy
import math
import time

import torch

from . import masks, sync
from .models import TORCH_DTYPES
from .param_values import DIAGNOSTIC_POLICIES
from .timing import synchronize

def make_optimizer(name: str, params, lr: float, impl: str = "auto", eps: float = 1e-8) -> torch.optim.Optimizer:
    """SGD or AdamW, with PyTorch's implementation choice (`auto`) or a forced one (plain, foreach, fused)."""
    params = [p for p in params if p.requires_grad]
    flags = {"auto": {}, "plain": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}
    if impl not in flags:
        raise ValueError(f"optimizer_impl must be one of {', '.join(flags)}, got {impl!r}")
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, **flags[impl])
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, eps=eps, **flags[impl])
    raise ValueError(f"optimizer must be sgd or adamw, got {name!r}")


def optimizer_flags(optimizer: torch.optim.Optimizer) -> dict:
    """foreach and fused as the step will use them (fused steps bump no version counter).

    Left unset (None), PyTorch picks at the first step; the choice it makes is recorded too.
    """
    group = optimizer.param_groups[0]
    flags = {"class": type(optimizer).__name__, "foreach": group.get("foreach"), "fused": group.get("fused"),
             "eps": group.get("eps")}
    try:
        from torch.optim.optimizer import _default_to_fused_or_foreach

        fused, foreach = _default_to_fused_or_foreach(group["params"], differentiable=False, use_fused=False)
        flags["resolved"] = {"fused": bool(group.get("fused") or fused),
                             "foreach": bool(group.get("foreach") if group.get("foreach") is not None else foreach)}
    except (ImportError, TypeError):  # a private helper: its absence only loses the resolved flags
        pass
    return flags


def response_keep(attention_mask: torch.Tensor, response_offset: int) -> torch.Tensor:
    """Which next-token predictions the loss counts: those of response tokens (position t predicts t+1)."""
    keep = torch.zeros(attention_mask.shape[0], attention_mask.shape[1] - 1, dtype=torch.bool,
                       device=attention_mask.device)
    keep[:, response_offset - 1:] = True
    return keep & attention_mask[:, 1:].bool()


def response_nll(model, sequences: torch.Tensor, attention_mask: torch.Tensor, response_offset: int,
                 count: torch.Tensor | None = None) -> torch.Tensor:
    """Mean negative log-likelihood of the response tokens; `count`: what to divide the sum by instead of
    these rows' own response tokens (a chunk of a batch divides by the whole batch's, so the chunks' losses
    and gradients add up to the batch's)."""
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
    keep = response_keep(attention_mask, response_offset)
    total = keep.sum().clamp(min=1) if count is None else count
    return -torch.where(keep, log_probs, 0.0).sum() / total


# Tokens one forward and backward of the update holds at a time. The activations kept for backward grow
# with every token (about 181 KB per token and layer in the 1B shape, FP32, measured with saved-tensor
# hooks), and the float32 logits three times over (logits, log-softmax, its gradient): a batch of 64
# rollouts of 544 tokens in the 1B shape would hold about 100 GB of activations and 54 GB of logits, more
# than an H200 has. A batch over this many tokens is cut into as few chunks of rows as keep each under it,
# the rows shared evenly (a row is never cut), each chunk's loss divided by the whole batch's response
# tokens, so the gradient is the batch's, summed in another order. (With bfloat16 master weights the chunks'
# gradients add up in bfloat16: within a rounding step of the whole batch's.)
BACKWARD_TOKENS = 8192


def backward_chunks(rows: int, width: int, budget: int | None = None) -> int:
    """How many chunks a batch of `rows` rows of `width` tokens is cut into: the fewest of at most `budget`
    tokens each (a row over the budget is a chunk of its own)."""
    per_chunk = max(1, (BACKWARD_TOKENS if budget is None else budget) // width)
    return math.ceil(rows / per_chunk)


def _backward(model, rollout, device, chunk_tokens: int | None = None) -> list[float]:
    batches = len(rollout.sequences)
    batch_losses = []
    for seq, mask, offsets in zip(rollout.sequences, rollout.attention_masks, rollout.response_offsets):
        seq, mask = seq.to(device), mask.to(device)
        count = response_keep(mask, offsets[0]).sum().clamp(min=1)
        chunks = backward_chunks(seq.shape[0], seq.shape[1], chunk_tokens)
        total = None
        # tensor_split shares the rows evenly: chunk sizes differ by at most one row
        for rows, row_mask in zip(torch.tensor_split(seq, chunks), torch.tensor_split(mask, chunks)):
            loss = response_nll(model, rows, row_mask, offsets[0], count) / batches
            loss.backward()
            total = loss.detach() if total is None else total + loss.detach()
        batch_losses.append(total * batches)
    # One device-to-host read for the losses, not one per batch.
    return torch.stack(batch_losses).float().cpu().tolist()


class NonFiniteUpdate(FloatingPointError):
    """An update refused for inf or NaN; `weights_changed` says whether the rollout weights were written."""

    def __init__(self, message: str, weights_changed: bool = False):
        super().__init__(message)
        self.weights_changed = weights_changed


def all_finite(tensors) -> bool:
    """Whether every tensor is free of inf and NaN, with one device-to-host read for all of them."""
    flags = [torch.isfinite(t).all() for t in tensors]
    return bool(torch.stack(flags).all()) if flags else True


def _check_finite(named_params, losses: list[float], what: str) -> None:
    finite = all_finite(p.grad for _, p in named_params if p.grad is not None)
    if not finite or not all(math.isfinite(v) for v in losses):
        bad = [n for n, p in named_params if p.grad is not None and not torch.isfinite(p.grad).all()]
        raise NonFiniteUpdate(f"non-finite loss or gradient in the {what} (loss {losses}, first bad gradient: "
                              f"{bad[:1]}); the update was not applied")


class Trainer:
    """The trainer's weights and optimizer, and the update path that brings new weights to the rollout model.

    `rollout_model` is the model the engines read; after a `reload` sync it is a new object and
    the caller tells the engines. Every update is timed in two synchronized parts: `step_ms`
    (zero_grad, forward, backward, optimizer step) and `sync_ms` (the update path's writes).
    """

    def __init__(self, rollout_model, params, device):
        self.path = params.update_path
        self.device = torch.device(device)
        self.rollout_model = rollout_model
        self.rollout_dtype = next(rollout_model.parameters()).dtype
        self.master_dtype = params.resolved_master_dtype()
        self.adapter = None
        # With a diagnostic policy in the run, a stale graph may replay after a sync that moved the
        # weights. Freed weights can go back to the driver (every capture empties the cache), and a
        # replay reading them ends the process with an illegal address, taking every cell of the run
        # with it; so the replaced storage is kept, and a stale replay reads the weights before the sync.
        self.retain_replaced = any(p in DIAGNOSTIC_POLICIES for p in params.policies)
        self.retired: list[list[torch.Tensor]] = []
        self.shadow: list[torch.Tensor] | None = None  # float32 optimizer copies of bfloat16 master weights
        eps = 1e-8
        if self.path == "in-place":
            self.model = rollout_model
            # The default 1e-8 underflows to zero in 16-bit parameters.
            eps = 1e-6 if self.rollout_dtype != torch.float32 else eps
        elif self.path == "lora-merge":
            self.adapter = sync.attach_lora(rollout_model, params.lora_rank, params.seed)
            self.model = self.rollout_model = self.adapter.get_base_model()
        else:
            self.model = copy.deepcopy(rollout_model)
            sync.cast_parameters(self.model, TORCH_DTYPES[self.master_dtype])
            self.model.requires_grad_(True)
            rollout_model.requires_grad_(False)
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        if self.master_dtype == "bfloat16":
            self.shadow = [p.detach().float().clone().requires_grad_(True) for p in trainable]
            trainable = self.shadow
        self.trainable = trainable
        self.optimizer = make_optimizer(params.optimizer, trainable, params.lr, params.optimizer_impl, eps)

    def describe(self) -> dict:
        return {"update_path": self.path, "master_dtype": self.master_dtype or "none (the rollout weights)",
                "optimizer_state_dtype": "float32" if self.master_dtype else str(self.trainable[0].dtype).replace(
                    "torch.", ""),
                "trainable_parameters": int(sum(p.numel() for p in self.trainable)),
                "adapter": None if self.adapter is None else {"kind": "LoRA", "targets": list(sync.LORA_TARGETS),
                                                               "rank": self.adapter.peft_config["default"].r},
                "moves_off_device": sync.moved_away(self.path, self.device),
                "backward_tokens_per_chunk": BACKWARD_TOKENS,
                "retains_replaced_weights": self.retain_replaced,
                "optimizer_flags": optimizer_flags(self.optimizer)}

    def _step(self, rollout, apply: bool) -> float:
        self.model.train()
        torch.set_grad_enabled(True)
        try:
            self.optimizer.zero_grad(set_to_none=True)
            losses = _backward(self.model, rollout, self.device)
            named = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
            try:
                _check_finite(named, losses, "trainer")
            except NonFiniteUpdate:
                self.model.zero_grad(set_to_none=True)
                raise
            if apply:
                if self.shadow is not None:
                    # bfloat16 weights, float32 optimizer state: the float32 copies are reloaded from
                    # the bfloat16 weights before every step (so bfloat16 is what is stored, and small
                    # updates round away as they would), stepped with float32 state, written back.
                    pairs = list(zip(self.shadow, [p for _, p in named]))
                    with torch.no_grad():
                        for master, weight in pairs:
                            master.copy_(weight)
                            master.grad = weight.grad.float()
                    self.optimizer.step()
                    with torch.no_grad():
                        for master, weight in pairs:
                            weight.copy_(master)
                else:
                    self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.model.zero_grad(set_to_none=True)
        finally:
            self.model.eval()
            torch.set_grad_enabled(False)
        return sum(losses) / len(losses)

    def _check_synced_finite(self) -> None:
        if not all_finite(p.detach().to(self.rollout_dtype) for p in self.model.parameters()):
            raise NonFiniteUpdate("the trainer's weights hold inf or NaN in the rollout dtype "
                                  f"{self.rollout_dtype} (an overflow); the sync was not made")

    def update(self, rollout, apply: bool = True) -> dict:
        """One step on the rollout's responses, then the sync; `apply=False` is the control update.

        The control runs the same forward and backward but takes no step and writes nothing, so the
        rollout weights stay as they were and whatever moves after it is drift, not the update
        (`lora-merge` still unmerges and merges an unchanged adapter: its backward needs the branch).
        Times, each synchronized: unmerge (lora-merge) | step | merge (lora-merge) | sync; `sync_ms` holds
        unmerge, merge and the path's writes, `ms` is step plus sync (the finiteness check between is not timed).
        """
        before = sync.addresses_and_versions(self.rollout_model)
        aliases = [t.detach() for t in sync.tensors_of(self.rollout_model)] if self.retain_replaced else None
        # In 16 bits, unmerge then merge rounds: (W - d) + d is not W. A control must write nothing,
        # so it puts the base weights back exactly (through .data: no address or version moves).
        # A refused step (non-finite, out of memory) must leave them too, so they are kept whenever there is an adapter.
        kept = ([(w, w.detach().clone()) for w in sync.adapter_base_weights(self.rollout_model)]
                if self.adapter is not None else [])
        stepped = False
        synchronize(self.device)
        t0 = time.perf_counter()
        if self.adapter is not None:
            self.adapter.unmerge_adapter()  # the adapter's branch is live again for the backward
            synchronize(self.device)
        t1 = time.perf_counter()
        try:
            loss = self._step(rollout, apply)
            synchronize(self.device)
            stepped = apply
        finally:
            t2 = time.perf_counter()
            if self.adapter is not None:
                self.adapter.merge_adapter()
                if not stepped:
                    for weight, value in kept:
                        weight.data.copy_(value)
                synchronize(self.device)
        merged = time.perf_counter()
        if apply and self.path not in ("in-place", "lora-merge"):
            # Before the sync, so a refused update leaves the rollout weights as they were; not timed.
            self._check_synced_finite()
        t3 = time.perf_counter()
        if apply:
            self.rollout_model, old = sync.apply(self.path, self.rollout_model, self.model, self.device), \
                self.rollout_model
        else:
            old = self.rollout_model
        synchronize(self.device)
        t4 = time.perf_counter()
        if aliases is not None and apply:
            self.retired.append(aliases)  # outside the timed sync
        change = sync.describe_change(before, sync.addresses_and_versions(self.rollout_model),
                                      self.rollout_model is old)
        if apply and self.path in ("in-place", "lora-merge"):
            # Here the step itself wrote the rollout weights: a refusal can only come after it.
            if not all_finite(self.rollout_model.parameters()):
                raise NonFiniteUpdate("the rollout weights hold inf or NaN after the step; the rollouts that follow "
                                      "are not trusted", weights_changed=True)
        step_ms, sync_ms = (t2 - t1) * 1e3, ((t1 - t0) + (merged - t2) + (t4 - t3)) * 1e3
        return {"loss": loss, "ms": step_ms + sync_ms, "step_ms": step_ms, "sync_ms": sync_ms, "change": change}
