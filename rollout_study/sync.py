"""Update paths: how the trainer's new weights reach the rollout model, each the way an RL stack does it.

    in-place         no sync: the optimizer stepped the rollout weights themselves (the seed's case)
    copy             param.copy_(new) under no_grad: same storage, version bumped (vLLM, SGLang)
    data-copy        param.data.copy_(new): same storage, no version bump
    load-state-dict  load_state_dict(new): copy semantics, version bumped
    assign           load_state_dict(new, assign=True): new storage, new parameters (version 0)
    reload           a new model object built from the state dict; the engines are told of it
    lora-merge       PEFT merge (weight.data += delta) after training the adapter, unmerge before
    cast             the parameters cast to a wider dtype and back (as Module.to swaps them), then written
    move             the model moved to the host and back (an offload round trip), then written

What each path does to the rollout model's tensors (addresses, versions, objects) is what decides
whether a captured graph is still current; `describe_change` reports it for every sync.
"""
from __future__ import annotations

import copy

import torch

from .param_values import UPDATE_PATHS

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


def cast_parameters(model, dtype: torch.dtype) -> None:
    """Parameters only, as Module.to swaps them (param.data = converted); buffers stay.

    Module.to(float16) would also cast the rotary table (a float32 buffer) to 16 bits and change
    the model's numerics for good, which no weight sync does.
    """
    for param in model.parameters():
        if param.dtype != dtype:
            param.data = param.data.to(dtype)


def cast_state(state: dict, dtype: torch.dtype, device) -> dict:
    """Fresh tensors of the rollout's dtype; tensors shared in the source (tied embeddings) stay shared."""
    made: dict[int, torch.Tensor] = {}
    out = {}
    for key, tensor in state.items():
        ptr = tensor.data_ptr()
        if ptr not in made:
            made[ptr] = tensor.detach().to(device=device, dtype=dtype if tensor.is_floating_point() else tensor.dtype,
                                           copy=True)
        out[key] = made[ptr]
    return out


def _write(rollout, source, through_data: bool = False) -> None:
    new = dict(source.named_parameters())
    for name, param in rollout.named_parameters():
        (param.data if through_data else param).copy_(new[name])


def _retie(model) -> None:
    # assign=True wraps each state tensor in its own Parameter; tied embeddings must stay one object.
    if getattr(model.config, "tie_word_embeddings", False) and hasattr(model, "tie_weights"):
        model.tie_weights()


def rebuild(model, state: dict):
    """A new model object of the same class and config holding `state` (no random initialization)."""
    with torch.device("meta"):
        fresh = type(model)(copy.deepcopy(model.config))
    fresh.load_state_dict(state, assign=True, strict=True)
    _retie(fresh)
    # Non-persistent buffers (the rotary table) are not in a state dict: fresh copies of the old ones.
    for name, buffer in model.named_buffers():
        owner, _, leaf = name.rpartition(".")
        module = fresh.get_submodule(owner) if owner else fresh
        persistent = leaf not in getattr(module, "_non_persistent_buffers_set", set())
        module.register_buffer(leaf, buffer.detach().clone(), persistent=persistent)
    fresh.generation_config = copy.deepcopy(model.generation_config)
    fresh.requires_grad_(False)
    return fresh.eval()


def attach_lora(model, rank: int, seed: int):
    """Wrap the rollout model with a PEFT LoRA adapter on the attention projections; merged for rollouts.

    PEFT keeps the adapter in float32 over 16-bit base weights (autocast_adapter_dtype), so the
    adapter is the master copy; B starts at zero, so the first merge changes no weight.
    """
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=list(LORA_TARGETS))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        wrapped = get_peft_model(model, config)
    wrapped.merge_adapter()
    return wrapped


def adapter_base_weights(model) -> list[torch.Tensor]:
    """The base weights PEFT merges into (those of the layers that carry an adapter)."""
    return [module.base_layer.weight for module in model.modules()
            if hasattr(module, "merged_adapters") and hasattr(module, "base_layer")]


@torch.no_grad()
def apply(path: str, rollout, trainer_model, device) -> torch.nn.Module:
    """Write the trainer's weights into the rollout model by `path`; returns the rollout model (new for reload)."""
    if path not in UPDATE_PATHS:
        raise ValueError(f"update_path must be one of {', '.join(UPDATE_PATHS)}, got {path!r}")
    dtype = next(rollout.parameters()).dtype
    if path in ("in-place", "lora-merge"):
        return rollout  # the optimizer already wrote the rollout weights (lora-merge: Trainer merges)
    if path == "copy":
        _write(rollout, trainer_model)
    elif path == "data-copy":
        _write(rollout, trainer_model, through_data=True)
    elif path == "load-state-dict":
        rollout.load_state_dict(trainer_model.state_dict(), strict=True)
    elif path == "assign":
        rollout.load_state_dict(cast_state(trainer_model.state_dict(), dtype, device), assign=True, strict=True)
        _retie(rollout)
    elif path == "reload":
        return rebuild(rollout, cast_state(trainer_model.state_dict(), dtype, device))
    elif path == "cast":
        # Through a wider dtype and back: float32 for 16-bit rollouts, float64 for float32 ones.
        wide = torch.float64 if dtype == torch.float32 else torch.float32
        cast_parameters(rollout, wide)
        _write(rollout, trainer_model)
        cast_parameters(rollout, dtype)
    elif path == "move":
        # An offload round trip (sleep mode): to the host and back. A CPU run has no other device,
        # so the round trip is a no-op there and the path is a plain copy (recorded as such).
        rollout.to("cpu")
        rollout.to(device)
        _write(rollout, trainer_model)
    return rollout


def moved_away(path: str, device) -> bool:
    """Whether the path takes the weights off the device and back: `move` alone, and not on a CPU run (the host is
    its device). Every other path writes on the device (it had read true for them all)."""
    return path == "move" and torch.device(device).type != "cpu"


def tensors_of(model) -> list[torch.Tensor]:
    return list(model.parameters()) + list(model.buffers())


def describe_change(before: list[tuple], after: list[tuple], same_object: bool) -> dict:
    """What a sync did to the rollout tensors: counts of moved addresses and bumped versions.

    `before`/`after`: (address, version) per parameter and buffer, in module order.
    """
    pairs = list(zip(before, after))
    return {"tensors": len(after), "same_object": same_object,
            "count_changed": len(before) != len(after),
            "moved": sum(1 for (p0, _), (p1, _) in pairs if p0 != p1),
            "version_bumped": sum(1 for (_, v0), (_, v1) in pairs if v0 != v1)}


def addresses_and_versions(model) -> list[tuple]:
    return [(t.data_ptr(), t._version) for t in tensors_of(model)]
