"""The study's own rollout engine: captured prefill and decode, and the refresh policies that keep them current.

The static-cache rollout itself (buffers, step functions, length buckets, capture and replay) is
`static_runner.py`; this module decides when its graphs may be replayed.

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

from ..param_values import DIAGNOSTIC_POLICIES
from ..timing import CallClock
from .base import Engine, RolloutOutput
from .static_runner import StaticKVCache, StaticRunner, bucket_layout, side_stream

# Former names, kept for code that imports them from here.
_Runner, _side_stream = StaticRunner, side_stream
__all__ = ["GraphEngine", "GraphRefused", "StaticKVCache", "StaticRunner", "check_replayable", "forward_state",
           "parameter_signature"]


class GraphRefused(RuntimeError):
    """The engine cannot tell whether its graphs are current, so it refuses to replay them."""


ADAPTER_STATE = ("merged_adapters", "active_adapters", "disable_adapters")


def _walk(model) -> tuple[list, tuple]:
    """Every parameter and buffer, and the forward's Python state, in one pass over the modules.

    One pass, and by hand rather than through `named_modules` (its generators, memo and names cost
    more than the rest of the walk), because the engine reads this before every call: on the tiny model
    the check was most of a steady call's host time outside its replays (reports/probes-h200,
    probe-rest). Modules come in `named_modules`' order (depth first, each once); tied tensors appear
    once per module that holds them, the same way every call. Names are looked up only where a module
    holds adapter state (PEFT), by a second walk (`named_modules`): an adapted model pays about what the
    walk cost when it carried every name.
    """
    tensors, adapted, seen = [], [], set()
    stack = [model]
    while stack:
        module = stack.pop()
        key = id(module)
        if module is None or key in seen:  # None: a child registered as None
            continue
        seen.add(key)
        tensors += module._parameters.values()
        tensors += module._buffers.values()
        # On the class, not the instance: a miss on the instance goes through nn.Module.__getattr__ and its
        # exception, about 2 us a module. PEFT's layers declare it on the class, or set it on the instance.
        if hasattr(type(module), "merged_adapters") or "merged_adapters" in module.__dict__:
            adapted.append(module)
        if module._modules:
            stack += reversed(module._modules.values())
    tensors = [t for t in tensors if t is not None]  # a parameter or buffer registered as None
    adapters = ()
    if adapted:
        names = {id(module): name for name, module in model.named_modules()}
        adapters = tuple((names[id(module)], *(repr(getattr(module, attr, None)) for attr in ADAPTER_STATE))
                         for module in adapted)
    return tensors, (id(model), model.training, adapters)


def forward_state(model) -> tuple:
    """The Python-level state a captured forward depends on: which model object, its mode, and
    per adapter layer (PEFT) what is merged and active; the forward branches on these."""
    return _walk(model)[1]


def parameter_signature(model) -> tuple:
    """(per parameter and buffer: (address, version, shape, stride, dtype, device), forward state).

    The version alone is not enough (fused optimizers and `.data` writes do not bump it), and the
    address alone is not enough (a new tensor of another shape or layout can reuse freed memory).
    """
    tensors, state = _walk(model)
    return tuple([(t.data_ptr(), t._version, t.shape, t.stride(), t.dtype, t.device) for t in tensors]), state


def _layout(signature: tuple) -> tuple:
    """Everything a captured graph baked in: the signature without the version counters."""
    tensors, state = signature
    return [(ptr, shape, stride, dtype, device) for ptr, _, shape, stride, dtype, device in tensors], state


def _versions(signature: tuple) -> list[int]:
    return [version for _, version, *_ in signature[0]]


def _elsewhere(tensor_device: torch.device, device: torch.device) -> bool:
    return tensor_device.type == "meta" or tensor_device.type != device.type or \
        (device.index is not None and tensor_device.index not in (None, device.index))


def check_replayable(model, device: torch.device, signature: tuple | None = None) -> None:
    """Refuse where addresses cannot tell: tensors on the meta device or on another device than the graphs'.

    With the signature just taken, the devices are read from it, and the model is walked again (for
    the names) only when one is elsewhere.
    """
    if signature is not None and not any(_elsewhere(where, device) for where in {entry[5] for entry in signature[0]}):
        return
    for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
        if _elsewhere(tensor.device, device):
            raise GraphRefused(f"graph engine: {name} is on {tensor.device}, the graphs on {device}; "
                               "the engine cannot tell whether a replay would read current weights and refuses")


class GraphEngine(Engine):
    name = "graph"
    policies = ("recapture", "reuse", "version-only", "unchecked")
    diagnostic_policies = DIAGNOSTIC_POLICIES
    colors = {"recapture": "#d62728", "reuse": "#1f77b4", "version-only": "#ff7f0e", "unchecked": "#000000"}

    def __init__(self, model, device, policy: str, prompt_len: int, max_new_tokens: int,
                 attn: str = "sdpa", use_graphs: bool | None = None, length_bucket: int = 0,
                 steps_per_graph: int = 1):
        if policy not in self.policies:
            raise ValueError(f"policy must be one of {', '.join(self.policies)}, got {policy!r}")
        self.model = model
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())  # the graphs' device, by index
        self.policy = policy
        self.prompt_len, self.max_new_tokens, self.attn = prompt_len, max_new_tokens, attn
        if isinstance(length_bucket, bool) or not isinstance(length_bucket, int) or length_bucket < 0:
            raise ValueError(f"length_bucket must be an integer >= 0 (0: one decode graph), got {length_bucket!r}")
        if isinstance(steps_per_graph, bool) or not isinstance(steps_per_graph, int) or steps_per_graph < 0:
            raise ValueError(f"steps_per_graph must be an integer >= 0 (0: every step of a length bucket), "
                             f"got {steps_per_graph!r}")
        self.length_bucket, self.steps_per_graph = length_bucket, steps_per_graph
        self.use_graphs = self.device.type == "cuda" if use_graphs is None else use_graphs
        self.runners: dict[tuple, StaticRunner] = {}  # keyed by (batch, dtype, device): the buffers' layout
        self.pool = torch.cuda.graph_pool_handle() if self.use_graphs else None
        self.signature: tuple | None = None  # parameters as recorded at the last capture
        self.last_check: str | None = None
        self.told_updated = False  # the trainer said the weights changed since the last call
        self._captured: list[dict] = []  # capture time and pool growth per graph captured in this call
        self._current: tuple | None = None  # the signature decide() took, for check_parameters

    @classmethod
    def build(cls, loaded, device, params, policy):
        return cls(loaded.model, device, policy, params.prompt_len, params.max_new_tokens, attn=params.attn,
                   length_bucket=params.length_bucket, steps_per_graph=params.steps_per_graph)

    def describe(self) -> dict:
        every = "every step of its bucket" if self.length_bucket else "every decode step"
        per_replay = {0: every, 1: "one step"}.get(self.steps_per_graph, f"up to {self.steps_per_graph} steps")
        decode = ("graph per length bucket, " if self.length_bucket else "graph, ") + f"{per_replay} per replay"
        return {"engine": self.name, "policy": self.policy, "cache": "static",
                "cuda_graph": self.use_graphs, "prefill": "graph" if self.use_graphs else "eager (no CUDA graph)",
                "decode": decode if self.use_graphs else "eager (no CUDA graph)",
                "buckets": bucket_layout(self.prompt_len, self.max_new_tokens, self.length_bucket,
                                         self.steps_per_graph)}

    def call_notes(self) -> dict:
        return {"captures": list(self._captured)} if self._captured else {}

    def invalidate(self) -> None:
        for runner in self.runners.values():
            runner.drop_graphs()
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
        self._current = None
        if self.signature is None or self.policy == "unchecked":
            return "none" if self.signature is None else "unchanged"
        current = parameter_signature(self.model)
        check_replayable(self.model, self.device, current)
        self._current = current
        if current == self.signature:  # the common case, decided without the layouts' lists
            if not self.told_updated or self.policy == "version-only":
                return "unchanged"
            return "drop" if self.policy == "recapture" else "kept"
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
            # Same layout: the graphs read the new values. The signature decide() just took, when it took one.
            self.signature = self._current if self._current is not None else parameter_signature(self.model)
        self._current = None  # taken for this decision only
        self.told_updated = False
        self.last_check = "dropped" if decision == "drop" else decision
        return self.last_check

    def _wrap_step(self, method):
        """What the runner runs and captures for one step method; the compiled engine compiles it."""
        return method

    def _new_runner(self, batch_size: int) -> StaticRunner:
        return StaticRunner(self.model, batch_size, self.prompt_len, self.max_new_tokens, self.device, self.attn,
                            self.length_bucket, wrap=self._wrap_step, steps_per_graph=self.steps_per_graph)

    def _before_capture(self, runner: StaticRunner, clock: CallClock) -> None:
        """Work a runner's steps need before warmup and capture, with or without CUDA (the compiled engine compiles)."""

    def _prepare(self, runner: StaticRunner, clock: CallClock) -> int:
        """Make a runner's steps ready for the weights now: warm up and capture (CUDA). Returns graphs captured."""
        if self.use_graphs and self.policy not in self.diagnostic_policies:
            check_replayable(self.model, self.device)  # a capture must read weights where the graphs run
        self._before_capture(runner, clock)
        if not self.use_graphs:
            return 0
        if not runner.warmed:
            with clock.part("warmup"), torch.no_grad():
                runner.warmup()
        with clock.part("capture"), torch.no_grad():
            captures = runner.capture(self.pool)
        self._captured.extend(runner.capture_notes)
        return captures

    def _ready_runner(self, batch_size: int, dtype: torch.dtype, clock: CallClock) -> tuple[StaticRunner, int]:
        captures = 0
        key = (batch_size, dtype, self.device)
        runner = self.runners.get(key)
        if runner is None:
            with clock.part("allocation"):
                runner = self._new_runner(batch_size)
            self.runners[key] = runner
        if not runner.ready:
            captures = self._prepare(runner, clock)
            runner.ready = True
        if self.signature is None:
            # Without CUDA nothing is captured, but the check still runs, so its logic is tested everywhere.
            self.signature = parameter_signature(self.model)
        return runner, captures

    def __call__(self, batches, clock: CallClock) -> RolloutOutput:
        self._captured = []
        decision = self.decide()  # one signature per call: it reads every parameter's metadata
        if decision == "drop":
            with clock.part("capture"):  # tearing down the stale graphs is part of what a recapture costs
                self.check_parameters(decision)
        else:
            self.check_parameters(decision)
        sequences, masks, offsets, captures = [], [], [], 0
        dtype = next(self.model.parameters()).dtype  # once a call: each parameters() starts generators and a memo
        with torch.no_grad():
            for batch in batches:
                runner, new = self._ready_runner(batch.size, dtype, clock)
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
