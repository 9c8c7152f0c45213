"""Study parameters: one dataclass, loaded from YAML or the command line, validated once.

Every entry point (command line, parameter file, notebook) builds a `StudyParams` through
`StudyParams.from_dict`, so an unknown key, a wrong type or an out-of-range value is refused in
one place (the checks are in param_values.py), with a message that names the key and the allowed
values, before anything runs or any file is written.
"""
from __future__ import annotations

import dataclasses
import os
import re
import types
from dataclasses import dataclass, field
from typing import Any

from .param_values import (CHECKS, DIAGNOSTIC_POLICIES, POLICIES, RANDOM_PROMPT_LEN, SHAPE_FIELDS, SYNTHETIC,
                           SYNTHETIC_SHAPES, ParameterError, model_positions)


# The study notebook's variables beside the parameters: where result.json goes, the command that started the run
NOTEBOOK_NAMES = ("output_dir", "command")
# What IPython itself sets as cells run (_, __, _i3, _3, _ih...), never a parameter
_KERNEL_NAME = re.compile(r"_+|_i+|_i?\d+|_[a-z]h|__\w*__")


# Parameters added after results were published, with the value every earlier run ran with: a result without one
# ran with that value (compare), and a sweep point's hash leaves it out there (sweep.point_hash).
LATER_PARAMETERS = {"control_placement": "first", "turn_order": "fixed"}


def held_value(key: str, value: Any) -> Any:
    """A parameter's value as a file or a papermill cell writes it, as StudyParams holds it: prompt_len's "auto" is
    None, an integer lr a float. Before the parameter's check, which sees the held form."""
    if key == "prompt_len" and value == "auto":
        return None
    if key == "lr" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def named_policies(policy) -> tuple[str, ...]:
    """The policies a `policy` value names, in its order: a list as listed, `both` and `all` expanded, one alone
    (a result's recorded parameters read the same way: policy_order.place_of)."""
    if isinstance(policy, (list, tuple)):
        return tuple(policy)
    return {"both": POLICIES, "all": POLICIES + DIAGNOSTIC_POLICIES}.get(policy, (policy,))


def set_since(namespace: dict, before: set) -> list[str]:
    """The data names a notebook's namespace gained since `before` (what its parameters cell and papermill's
    injected cell set): the kernel's own names (_, _i3, ...) and the imports' modules, classes and functions aside."""
    return [name for name in set(namespace) - set(before)
            if not _KERNEL_NAME.fullmatch(name) and not isinstance(namespace[name], types.ModuleType)
            and not callable(namespace[name])]


@dataclass(frozen=True)
class StudyParams:
    # Defaults are the reference workload of STUDY.md (one cycle, recapture policy).
    name: str = "adhoc"
    model: str = SYNTHETIC
    device: str = "auto"
    dtype: str = "auto"
    attn: str = "sdpa"
    engines: list = field(default_factory=lambda: ["eager", "graph"])
    policy: Any = "recapture"  # a name, or a list of policies
    requests: int = 8
    batch_size: int = 4
    prompt_len: int | None = None  # None ("auto"): 32 for random prompts, the longest chat prompt for chat
    max_new_tokens: int = 32
    iterations: int = 10
    cycles: int = 1
    control_cycles: int = 0  # cycles whose update runs forward and backward but takes no step
    # first: every control before the real updates; interleaved: spread among them, so drift that grows over a run
    # reaches the controls as it reaches the real updates (with the controls first it favours a "real effect")
    control_placement: str = "first"
    # fixed, reverse, rotate or rotate-run (param_values.TURN_ORDERS): of two instances of the graph engine on an
    # H200, the one making its first call and each phase's first turn first was up to 2.6% faster, whichever was
    # built first (probe-turn-order); rotating the later rounds left it faster (probe-turn-rotate), so no order
    # spreads it (probe-turn-rotate-run moves the phases' first turns apart from the first call)
    turn_order: str = "fixed"
    seed: int = 0
    optimizer: str = "sgd"
    lr: float = 1e-2
    optimizer_impl: str = "auto"  # plain (per-parameter loop), foreach, fused, or PyTorch's choice
    update_path: str = "copy"  # how the trainer's new weights reach the rollout model (sync.py)
    master_dtype: str = "auto"  # the trainer's weights: float32 (auto), or bfloat16 with float32 optimizer state
    lora_rank: int = 8  # the adapter's rank for update_path lora-merge
    prompts: str = "auto"
    cold_starts: int = 0
    profile: bool = True
    # False skips the instrumented eager calls (the prefill/decode split of generate()), which a sweep
    # does not read; every measured call stays as it is.
    instrument: bool = True
    compile_backend: str = "inductor"  # torch.compile backend of the compiled engines
    length_bucket: int = 0  # graph engines: decode graphs per bucket of this many cache positions (0: one graph)
    steps_per_graph: int = 1  # graph engines: decode steps one replay runs (0: every step of its length bucket)
    # Shape of the synthetic tiny Llama (ignored for other models, the named synthetic shapes included).
    layers: int = 2
    hidden: int = 128
    intermediate: int = 256
    heads: int = 4
    kv_heads: int = 2
    vocab: int = 1024
    max_positions: int = 2048

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "parameters") -> "StudyParams":
        if not isinstance(values, dict):
            raise ParameterError(f"{source}: expected a mapping of parameter names to values, "
                                 f"got {type(values).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ParameterError(f"{source}: unknown parameter(s) {', '.join(unknown)}; "
                                 f"known: {', '.join(sorted(known))}")
        merged = {key: held_value(key, value) for key, value in {**dataclasses.asdict(cls()), **values}.items()}
        for key, check in CHECKS.items():
            try:
                check(key, merged[key])
            except ParameterError as err:
                raise ParameterError(f"{source}: {err}") from None
        params = cls(**merged)
        params._check_relations(source)
        return params

    @classmethod
    def from_namespace(cls, namespace: dict, source: str = "notebook parameters",
                       before: set | None = None) -> "StudyParams":
        """The parameters from a notebook's variables (its parameters cell holds one per field).

        before: the names the namespace held before the parameters cell. papermill injects its cell right after
        that one, and only warns about a name the cell does not hold (`-p requets 4`, a key of `-f FILE`), so any
        name set since that is neither a field nor the notebook's own is refused here, where the run would
        otherwise go on with the default."""
        known = {f.name for f in dataclasses.fields(cls)}
        if before is not None:
            unknown = sorted(set(set_since(namespace, before)) - known - set(NOTEBOOK_NAMES))
            if unknown:
                raise ParameterError(f"{source}: unknown parameter(s) {', '.join(unknown)}; known: "
                                     f"{', '.join(sorted(known | set(NOTEBOOK_NAMES)))}")
        return cls.from_dict({name: namespace[name] for name in known if name in namespace}, source=source)

    @classmethod
    def from_yaml(cls, path: str) -> "StudyParams":
        from .files import read_yaml

        values = read_yaml(path, "parameter file")
        if values is None:
            raise ParameterError(f"{path}: the parameter file is empty; write at least one parameter "
                                 "(the defaults need no file)")
        if isinstance(values, dict) and "name" not in values:
            values = {**values, "name": os.path.splitext(os.path.basename(path))[0]}
        return cls.from_dict(values, source=path)

    def _check_relations(self, source: str) -> None:
        if self.update_path in ("in-place", "lora-merge") and self.master_dtype != "auto":
            raise ParameterError(f"{source}: master_dtype {self.master_dtype!r} needs a trainer apart from the rollout "
                                 f"model; update_path {self.update_path!r} has none (allowed: auto)")
        if not set(self.policies) & set(POLICIES):
            raise ParameterError(f"{source}: policy {self.policy!r} holds only diagnostic policies; they run beside "
                                 "a real one (allowed: a list with recapture or reuse, or recapture, reuse, both, all)")
        if self.update_path == "lora-merge":
            import importlib.util

            if importlib.util.find_spec("peft") is None:
                raise ParameterError(f"{source}: update_path 'lora-merge' needs the peft package "
                                     "(pip install peft==0.21.2); allowed without it: the other update paths")
        if self.is_synthetic and self.prompts == "chat":
            raise ParameterError(f"{source}: prompts 'chat' needs a model with a tokenizer; "
                                 "the synthetic models have none (allowed: auto, random)")
        if self.model == SYNTHETIC:
            if self.hidden % self.heads:
                raise ParameterError(f"{source}: hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
            if self.heads % self.kv_heads:
                raise ParameterError(f"{source}: heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
            if (self.hidden // self.heads) % 2:
                raise ParameterError(f"{source}: hidden / heads must be even for rotary embeddings")
        positions = self.shape()["max_positions"] if self.is_synthetic else model_positions(self.model)
        if positions is not None:
            self.check_positions(positions, source)

    def check_positions(self, model_positions: int, source: str = "parameters",
                        longest_prompt: int | None = None) -> None:
        """Prompt plus new tokens must fit in the model's position table. prompt_len auto: the longest chat prompt
        where the tokenizer has measured it (longest_prompt), else at least one token (chat prompts, before they are
        measured) or the reference's 32 (random prompts)."""
        if self.prompt_len is not None:
            prompt, what = self.prompt_len, "prompt_len"
        elif longest_prompt is not None:
            prompt, what = longest_prompt, f"the longest chat prompt ({longest_prompt} tokens; prompt_len auto)"
        elif self.prompts == "chat" or not self.is_synthetic:
            prompt, what = 1, "at least one prompt token (prompt_len auto)"
        else:
            prompt, what = RANDOM_PROMPT_LEN, f"prompt_len (auto: {RANDOM_PROMPT_LEN})"
        needed = prompt + self.max_new_tokens
        if needed > model_positions:
            raise ParameterError(
                f"{source}: {what} + max_new_tokens = {needed} exceeds the model's "
                f"{model_positions} positions; allowed: prompt_len + max_new_tokens <= {model_positions}")

    @property
    def policies(self) -> tuple[str, ...]:
        return named_policies(self.policy)

    def resolved_master_dtype(self) -> str | None:
        """The trainer's weight dtype; None where there is no trainer apart (in-place, lora-merge)."""
        if self.update_path in ("in-place", "lora-merge"):
            return None
        return "float32" if self.master_dtype == "auto" else self.master_dtype

    @property
    def label(self) -> str:
        return "synthetic" if self.is_synthetic else "pretrained"

    @property
    def is_synthetic(self) -> bool:
        """Random weights: the tiny Llama or a named real shape."""
        return self.model == SYNTHETIC or self.model in SYNTHETIC_SHAPES

    def shape(self) -> dict:
        """The synthetic model's shape: a named one, or the layers..max_positions parameters (untied)."""
        if self.model in SYNTHETIC_SHAPES:
            return dict(SYNTHETIC_SHAPES[self.model])
        return {"display": None, **{key: getattr(self, key) for key in SHAPE_FIELDS}, "tied": False}

    def resolved_device(self) -> str:
        import torch

        if self.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ParameterError("device is 'cuda' but no CUDA device is available; allowed here: cpu, auto")
        return self.device

    def resolved_dtype(self, device: str) -> str:
        if self.dtype != "auto":
            return self.dtype
        return "float16" if device == "cuda" else "float32"

    def resolved_prompt_len(self, longest_prompt: int | None = None) -> int:
        """An explicit prompt_len, else the longest chat prompt (chat), else the reference's 32."""
        if self.prompt_len is not None:
            return self.prompt_len
        return longest_prompt if longest_prompt is not None else RANDOM_PROMPT_LEN

    def resolved_prompts(self, has_tokenizer: bool) -> str:
        """'auto' means chat prompts where the model brings a tokenizer, seeded random ones otherwise."""
        if self.prompts != "auto":
            return self.prompts
        return "chat" if has_tokenizer else "random"

    def update_schedule(self) -> list[tuple[int, bool]]:
        """(cycle, control) in run order. first: the control cycles, then the real updates. interleaved: each
        control last in an even share of the run (1 control, 2 real: real, real, control; 2 and 2: real, control,
        real, control), so the controls' drift spans the real updates'; each update is then compared with the
        steady phase just before it (effects.py), not cycle 0's, which a control after real updates would not be."""
        controls, total = self.control_cycles, self.control_cycles + self.cycles
        if self.control_placement == "first":
            return [(cycle, cycle < controls) for cycle in range(total)]
        return [(cycle, (cycle + 1) * controls // total > cycle * controls // total) for cycle in range(total)]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
