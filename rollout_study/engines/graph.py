"""The study's own rollout: static KV cache, captured prefill and decode, parameter-version check.

One `_Runner` per batch size owns the static buffers of that shape: the KV cache, the prompt,
the key-validity mask, the next token, positions, the write position and the output tokens. Its
two graphs are the prefill of the fixed prompt shape and one decode step. Everything that
changes between steps (the greedy choice, positions, mask, write position, output column) is
updated on the device inside the graphs, so a rollout is: copy the prompt in, replay prefill,
replay decode `max_new_tokens - 1` times. Without CUDA the same step functions run eagerly.

A graph bakes in the addresses and layouts of the tensors it read, and the Python-level path of
the forward it recorded. The engine records, at capture, each parameter's and buffer's address,
version, shape, stride, dtype and device, plus the forward's Python state (the model object, its
train/eval mode, adapters merged or active), and checks them before every call; the trainer also
tells it of every update (`weights_updated`, with the new model object after a reload):
- `recapture`: an update it is told of, or any change, drops the graphs; the next call captures
  again (the teardown is charged to capture).
- `reuse`: if every address, layout and forward state is unchanged (an in-place write), the graphs
  are kept; if any moved, the graphs are captured again.
Two diagnostic policies exist only to show what weaker checks miss (the hazard study):
`version-only` drops the graphs only when a version counter moved (the engine's former check), and
`unchecked` never drops them. Where the check cannot tell (a parameter on another device, or on
the meta device), a checking policy refuses with `GraphRefused` rather than replay.
"""
from __future__ import annotations

import torch

from .. import masks
from ..params import DIAGNOSTIC_POLICIES
from ..timing import CallClock
from .base import Engine, RolloutOutput


class StaticKVCache:
    """Preallocated keys and values; `write_positions` is a device tensor read inside the graph.

    Duck-types the one method Hugging Face attention layers call on a cache (`update`), so the
    addresses are ours and do not depend on the library's cache internals.
    """

    def __init__(self, layers: int, batch: int, kv_heads: int, length: int, head_dim: int, dtype, device):
        shape = (batch, kv_heads, length, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.write_positions: torch.Tensor | None = None

    def clear_from(self, position: int) -> None:
        # An earlier rollout may have left inf (an FP16 overflow) in a slot this one masks out;
        # masked attention gives it weight zero, and zero times inf is NaN. Slots are cleared.
        for tensor in (*self.keys, *self.values):
            tensor[:, :, position:].zero_()

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        self.keys[layer_idx].index_copy_(2, self.write_positions, key_states)
        self.values[layer_idx].index_copy_(2, self.write_positions, value_states)
        return self.keys[layer_idx], self.values[layer_idx]


_SIDE_STREAMS: dict = {}


def _side_stream(device) -> "torch.cuda.Stream":
    # One warmup stream per device for every runner: cuBLAS keeps a workspace per stream
    # (32 MiB on Hopper), so a fresh stream per capture would grow memory with each engine.
    if device not in _SIDE_STREAMS:
        _SIDE_STREAMS[device] = torch.cuda.Stream(device)
    return _SIDE_STREAMS[device]


class GraphRefused(RuntimeError):
    """The engine cannot tell whether its graphs are current, so it refuses to replay them."""


ADAPTER_STATE = ("merged_adapters", "active_adapters", "disable_adapters")


def forward_state(model) -> tuple:
    """The Python-level state a captured forward depends on: which model object, its mode, and
    per adapter layer (PEFT) what is merged and active; the forward branches on these."""
    adapters = []
    for name, module in model.named_modules():
        if hasattr(module, "merged_adapters"):
            adapters.append((name, *(repr(getattr(module, attr, None)) for attr in ADAPTER_STATE)))
    return (id(model), model.training, tuple(adapters))


def parameter_signature(model) -> tuple:
    """(per parameter and buffer: (address, version, shape, stride, dtype, device), forward state).

    The version alone is not enough (fused optimizers and `.data` writes do not bump it), and the
    address alone is not enough (a new tensor of another shape or layout can reuse freed memory).
    """
    tensors = list(model.parameters()) + list(model.buffers())
    return (tuple((t.data_ptr(), t._version, tuple(t.shape), t.stride(), t.dtype, t.device) for t in tensors),
            forward_state(model))


def _layout(signature: tuple) -> tuple:
    """Everything a captured graph baked in: the signature without the version counters."""
    tensors, state = signature
    return [(ptr, shape, stride, dtype, device) for ptr, _, shape, stride, dtype, device in tensors], state


def _versions(signature: tuple) -> list[int]:
    return [version for _, version, *_ in signature[0]]


def check_replayable(model, device: torch.device) -> None:
    """Refuse where addresses cannot tell: tensors on the meta device or on another device than the graphs'."""
    for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
        if tensor.device.type == "meta" or tensor.device.type != device.type or \
                (device.index is not None and tensor.device.index not in (None, device.index)):
            raise GraphRefused(f"graph engine: {name} is on {tensor.device}, the graphs on {device}; "
                               "the engine cannot tell whether a replay would read current weights and refuses")


class _Runner:
    def __init__(self, model, batch: int, prompt_len: int, new_tokens: int, device, attn: str):
        config = model.config
        dtype = next(model.parameters()).dtype
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        length = prompt_len + new_tokens
        self.model, self.prompt_len, self.new_tokens = model, prompt_len, new_tokens
        self.attn, self.dtype = attn, dtype
        self.cache = StaticKVCache(config.num_hidden_layers, batch, kv_heads, length, head_dim, dtype, device)
        long = dict(dtype=torch.long, device=device)
        self.input_ids = torch.zeros((batch, prompt_len), **long)
        self.prompt_mask = torch.zeros((batch, prompt_len), **long)
        self.key_valid = torch.zeros((batch, length), dtype=torch.bool, device=device)
        self.next_token = torch.zeros((batch, 1), **long)
        self.position = torch.zeros((batch, 1), **long)
        self.prefill_positions = torch.arange(prompt_len, **long)
        self.write_position = torch.zeros((1,), **long)
        self.step = torch.zeros((1,), **long)
        self.out = torch.zeros((batch, new_tokens), **long)
        self.graphs: tuple | None = None
        self.warmed = False

    def _attention_mask(self, allowed: torch.Tensor) -> torch.Tensor:
        return masks.for_attention(allowed, self.attn, self.dtype)

    def _logits(self, input_ids, mask, positions) -> torch.Tensor:
        out = self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                         past_key_values=self.cache, use_cache=True, logits_to_keep=1)
        # generate() takes the greedy choice on float32 logits; the cast keeps ties resolved alike.
        return out.logits[:, -1, :].float()

    def prefill_step(self) -> None:
        mask2d = self.prompt_mask
        self.key_valid.zero_()
        self.key_valid[:, : self.prompt_len] = mask2d.bool()
        allowed = masks.allowed_keys(self.key_valid, self.prompt_len)
        positions = masks.positions(mask2d)  # as generate() does
        self.cache.clear_from(self.prompt_len)
        self.cache.write_positions = self.prefill_positions
        token = self._logits(self.input_ids, self._attention_mask(allowed), positions).argmax(-1)
        self.out[:, 0] = token
        self.key_valid[:, self.prompt_len] = True
        self.next_token.copy_(token[:, None])
        self.position.copy_(positions[:, -1:] + 1)
        self.write_position.fill_(self.prompt_len)
        self.step.fill_(1)

    def decode_step(self) -> None:
        self.cache.write_positions = self.write_position
        allowed = self.key_valid[:, None, None, :]
        token = self._logits(self.next_token, self._attention_mask(allowed), self.position).argmax(-1)
        self.out.index_copy_(1, self.step, token[:, None])
        self.key_valid.index_fill_(1, self.write_position + 1, True)
        self.next_token.copy_(token[:, None])
        self.position.add_(1)
        self.write_position.add_(1)
        self.step.add_(1)

    def _steps(self):
        return (self.prefill_step, self.decode_step) if self.new_tokens > 1 else (self.prefill_step,)

    def warmup(self) -> None:
        # Run each step once on a side stream before capture, as PyTorch asks, so lazy
        # initialization (handles, workspaces, autotuning) happens outside the graph.
        stream = _side_stream(self.input_ids.device)
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for step in self._steps():
                step()
        torch.cuda.current_stream().wait_stream(stream)
        self.warmed = True

    def capture(self, pool) -> int:
        # The warmup's stream: a capture on PyTorch's default capture stream would set up a
        # second cuBLAS workspace there and charge that lazy set-up to capture.
        stream = _side_stream(self.input_ids.device)
        graphs = []
        for step in self._steps():
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, stream=stream):
                step()
            graphs.append(graph)
        self.graphs = tuple(graphs)
        return len(graphs)

    def load(self, batch) -> None:
        self.input_ids.copy_(batch.input_ids, non_blocking=True)
        self.prompt_mask.copy_(batch.attention_mask, non_blocking=True)

    def prefill(self) -> None:
        if self.graphs is not None:
            self.graphs[0].replay()
        else:
            self.prefill_step()

    def decode(self) -> None:
        if self.graphs is not None:
            decode_graph = self.graphs[1]
            for _ in range(self.new_tokens - 1):
                decode_graph.replay()
        else:
            for _ in range(self.new_tokens - 1):
                self.decode_step()


class GraphEngine(Engine):
    name = "graph"
    policies = ("recapture", "reuse", "version-only", "unchecked")
    diagnostic_policies = DIAGNOSTIC_POLICIES
    colors = {"recapture": "#d62728", "reuse": "#1f77b4", "version-only": "#ff7f0e", "unchecked": "#000000"}

    def __init__(self, model, device, policy: str, prompt_len: int, max_new_tokens: int,
                 attn: str = "sdpa", use_graphs: bool | None = None):
        if policy not in self.policies:
            raise ValueError(f"policy must be one of {', '.join(self.policies)}, got {policy!r}")
        self.model = model
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())  # the graphs' device, by index
        self.policy = policy
        self.prompt_len, self.max_new_tokens, self.attn = prompt_len, max_new_tokens, attn
        self.use_graphs = self.device.type == "cuda" if use_graphs is None else use_graphs
        self.runners: dict[tuple, _Runner] = {}  # keyed by (batch, dtype, device): the buffers' layout
        self.pool = torch.cuda.graph_pool_handle() if self.use_graphs else None
        self.signature: tuple | None = None  # parameters as recorded at the last capture
        self.last_check: str | None = None
        self.told_updated = False  # the trainer said the weights changed since the last call

    @classmethod
    def build(cls, loaded, device, params, policy):
        return cls(loaded.model, device, policy, params.prompt_len, params.max_new_tokens, attn=params.attn)

    def describe(self) -> dict:
        return {"engine": self.name, "policy": self.policy, "cache": "static",
                "cuda_graph": self.use_graphs, "prefill": "graph" if self.use_graphs else "eager (no CUDA graph)",
                "decode": "graph, one step per replay" if self.use_graphs else "eager (no CUDA graph)"}

    def invalidate(self) -> None:
        for runner in self.runners.values():
            for graph in runner.graphs or ():
                graph.reset()
            runner.graphs = None
        if self.use_graphs:
            # The dropped graphs released their private pool; new graphs need a new one.
            self.pool = torch.cuda.graph_pool_handle()
        self.signature = None

    def weights_updated(self, model=None) -> None:
        self.told_updated = True
        if model is not None and model is not self.model:
            # A reload: new captures read the new object; captured graphs still hold the old addresses.
            self.model = model
            for runner in self.runners.values():
                runner.model = model

    def decide(self) -> str:
        """What the refresh policy makes of the weights now: 'none', 'unchanged', 'kept' or 'drop'.

        `recapture` drops the graphs after every update it is told of, whatever the version
        counters say; `reuse` keeps them only when every address, layout and forward state is
        unchanged; `version-only` drops them only when a version counter moved; `unchecked` never.
        """
        if self.signature is None or self.policy == "unchecked":
            return "none" if self.signature is None else "unchanged"
        check_replayable(self.model, self.device)
        current = parameter_signature(self.model)
        if self.policy == "version-only":
            return "drop" if _versions(current) != _versions(self.signature) else "unchanged"
        if self.policy == "recapture":
            return "drop" if self.told_updated or current != self.signature else "unchanged"
        if _layout(current) != _layout(self.signature):
            return "drop"
        return "kept" if self.told_updated or current != self.signature else "unchanged"

    def close(self) -> None:
        self.invalidate()
        self.runners.clear()

    def check_parameters(self, decision: str | None = None) -> str:
        """Apply the refresh policy; returns 'none', 'unchanged', 'kept' or 'dropped'."""
        decision = decision or self.decide()
        if decision == "drop":
            self.invalidate()
        elif decision == "kept":
            self.signature = parameter_signature(self.model)  # same layout: the graphs read the new values
        self.told_updated = False
        self.last_check = "dropped" if decision == "drop" else decision
        return self.last_check

    def _ready_runner(self, batch_size: int, clock: CallClock) -> tuple[_Runner, int]:
        captures = 0
        key = (batch_size, next(self.model.parameters()).dtype, self.device)
        runner = self.runners.get(key)
        if runner is None:
            with clock.part("allocation"):
                runner = _Runner(self.model, batch_size, self.prompt_len, self.max_new_tokens, self.device, self.attn)
            self.runners[key] = runner
        if self.use_graphs and runner.graphs is None:
            if self.policy not in self.diagnostic_policies:
                check_replayable(self.model, self.device)  # a capture must read weights where the graphs run
            if not runner.warmed:
                with clock.part("warmup"), torch.no_grad():
                    runner.warmup()
            with clock.part("capture"), torch.no_grad():
                captures = runner.capture(self.pool)
        if self.signature is None:
            # Without CUDA nothing is captured, but the check still runs, so its logic is tested everywhere.
            self.signature = parameter_signature(self.model)
        return runner, captures

    def __call__(self, batches, clock: CallClock) -> RolloutOutput:
        decision = self.decide()  # one signature per call: it reads every parameter's metadata
        if decision == "drop":
            with clock.part("capture"):  # tearing down the stale graphs is part of what a recapture costs
                self.check_parameters(decision)
        else:
            self.check_parameters(decision)
        sequences, masks, offsets, captures = [], [], [], 0
        with torch.no_grad():
            for batch in batches:
                runner, new = self._ready_runner(batch.size, clock)
                captures += new
                runner.load(batch)
                with clock.device_part("prefill"):
                    runner.prefill()
                with clock.device_part("decode"):
                    runner.decode()
                # Copies, because the next batch of the same size reuses these buffers.
                sequences.append(torch.cat([runner.input_ids, runner.out], dim=1))
                masks.append(runner.key_valid.long())
                offsets.append([self.prompt_len] * batch.size)
        return RolloutOutput(sequences, masks, offsets, captures)
