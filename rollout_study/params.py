"""Study parameters: one dataclass, loaded from YAML or the command line, validated once.

Every entry point (command line, parameter file, notebook) builds a `StudyParams` through
`StudyParams.from_dict`, so an unknown key, a wrong type or an out-of-range value is refused in
one place, with a message that names the key and the allowed values, before anything runs or
any file is written.
"""
from __future__ import annotations

import dataclasses
import os
import re
import types
from dataclasses import dataclass, field
from typing import Any

POLICIES = ("recapture", "reuse")
# Kept to show what a weaker check misses, never a policy to run rollouts with: `version-only` is
# the graph engine's former check (parameter version counters alone), `unchecked` replays whatever
# was captured (the hazard study's control, to show what a stale replay looks like).
DIAGNOSTIC_POLICIES = ("version-only", "unchecked")
POLICY_CHOICES = POLICIES + ("both",) + DIAGNOSTIC_POLICIES + ("all",)
OPTIMIZERS = ("sgd", "adamw")
OPTIMIZER_IMPLS = ("auto", "plain", "foreach", "fused")
# How new weights reach the rollout model (sync.py); `in-place` has no trainer apart.
UPDATE_PATHS = ("in-place", "copy", "data-copy", "load-state-dict", "assign", "reload", "lora-merge", "cast", "move")
MASTER_DTYPES = ("auto", "float32", "bfloat16")
DTYPES = ("auto", "float16", "bfloat16", "float32")
DEVICES = ("auto", "cpu", "cuda")
ATTENTION = ("sdpa", "eager")
PROMPT_SOURCES = ("auto", "random", "chat")
# torch.compile backends for the compiled engines (hf-compile, graph-compiled): inductor is what users
# run; aot_eager and eager trace the same code without generating kernels (fast, for CPU tests).
COMPILE_BACKENDS = ("inductor", "aot_eager", "eager")
SYNTHETIC = "synthetic"
# Random-weight models of real shapes, selected by name (no download); `synthetic` is the tiny
# Llama whose shape the layers..max_positions parameters set.
SYNTHETIC_SHAPES = {
    "synthetic-smollm2-135m": {"display": "SmolLM2-135M shape", "layers": 30, "hidden": 576, "intermediate": 1536,
                               "heads": 9, "kv_heads": 3, "vocab": 49152, "max_positions": 8192, "tied": True},
    "synthetic-llama-3.2-1b": {"display": "Llama-3.2-1B shape", "layers": 16, "hidden": 2048, "intermediate": 8192,
                               "heads": 32, "kv_heads": 8, "vocab": 128256, "max_positions": 131072, "tied": True},
}
SHAPE_FIELDS = ("layers", "hidden", "intermediate", "heads", "kv_heads", "vocab", "max_positions")
RANDOM_PROMPT_LEN = 32  # the reference workload's prompt length
PRETRAINED_SOURCES = ("smollm2-135m-instruct",)


# The study notebook's variables beside the parameters: where result.json goes, the command that started the run
NOTEBOOK_NAMES = ("output_dir", "command")
# What IPython itself sets as cells run (_, __, _i3, _3, _ih...), never a parameter
_KERNEL_NAME = re.compile(r"_+|_i+|_i?\d+|_[a-z]h|__\w*__")


class ParameterError(ValueError):
    """A parameter is missing, unknown, of the wrong type or out of its range."""


def _int_at_least(low: int, high: int | None = None):
    allowed = f">= {low}" if high is None else f"between {low} and {high}"

    def check(name: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ParameterError(f"{name} must be an integer {allowed}, got {value!r} ({type(value).__name__})")
        if value < low or (high is not None and value > high):
            raise ParameterError(f"{name} must be an integer {allowed}, got {value}")
    return check


def _one_of(choices: tuple[str, ...]):
    def check(name: str, value: Any) -> None:
        if not isinstance(value, str) or value not in choices:
            raise ParameterError(f"{name} must be one of {', '.join(choices)}; got {value!r}")
    return check


def _prompt_len(name: str, value: Any) -> None:
    if value is not None:
        _int_at_least(1, 32768)(name, value)


def _number_hint(value: Any) -> str:
    """Why a number arrived as text. YAML 1.1 (parameter and sweep files, papermill's -f) reads an exponent
    without a dot as text; the command line reads it as a number, as papermill's -p does."""
    if not isinstance(value, str) or not any(ch.isdigit() for ch in value):
        return ""
    try:
        float(value)
    except ValueError:
        return ""
    dotted = re.sub(r"^([+-]?\d+)([eE])", r"\1.0\2", value.strip())
    if dotted == value.strip():
        return " (a number in quotes is text)"
    return f" (YAML reads {value} as text: write {dotted})"


def _positive_float(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        hint = _number_hint(value)
        raise ParameterError(f"{name} must be a number in (0, 10], got {value!r} ({type(value).__name__}){hint}")
    if not (0.0 < float(value) <= 10.0):
        raise ParameterError(f"{name} must be a number in (0, 10], got {value}")


def _policy(name: str, value: Any) -> None:
    """One name (recapture, reuse, both, version-only, unchecked, all) or a list of single policies."""
    single = POLICIES + DIAGNOSTIC_POLICIES
    if isinstance(value, list):
        if not value or any(not isinstance(v, str) or v not in single for v in value) or len(set(value)) != len(value):
            raise ParameterError(f"{name} as a list must hold distinct names drawn from {', '.join(single)}; "
                                 f"got {value!r}")
        return
    _one_of(POLICY_CHOICES)(name, value)


def _bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ParameterError(f"{name} must be true or false, got {value!r}")


def _text(name: str, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ParameterError(f"{name} must be a non-empty string, got {value!r}")


def _model(name: str, value: Any) -> None:
    _text(name, value)
    if value in (SYNTHETIC,) + tuple(SYNTHETIC_SHAPES) + PRETRAINED_SOURCES:
        return
    if not os.path.isdir(value):
        raise ParameterError(
            f"{name} must be 'synthetic', one of {', '.join(tuple(SYNTHETIC_SHAPES) + PRETRAINED_SOURCES)}, or a local "
            f"Hugging Face checkpoint folder; {value!r} is not a folder")
    config_file = os.path.join(value, "config.json")
    if not os.path.isfile(config_file):
        raise ParameterError(f"{name}: the folder {value!r} has no config.json (not a Hugging Face checkpoint)")
    _checkpoint(name, value, config_file)


WEIGHT_FILES = (".safetensors", ".bin", ".pt", ".gguf")


def _checkpoint(name: str, folder: str, config_file: str) -> None:
    """A checkpoint folder that will load: config parses, architecture known, weights present."""
    import json

    try:
        with open(config_file, encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ParameterError(f"{name}: {config_file} does not parse as JSON: {err}") from None
    model_type = config.get("model_type") if isinstance(config, dict) else None
    from transformers import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:
        raise ParameterError(f"{name}: {config_file} names model_type {model_type!r}, which this transformers "
                             "does not know; allowed: a causal LM architecture such as llama")
    if not any(entry.endswith(WEIGHT_FILES) for entry in os.listdir(folder)):
        raise ParameterError(f"{name}: the folder {folder!r} holds no weights "
                             f"(no file ending in {', '.join(WEIGHT_FILES)})")


def engine_names() -> tuple[str, ...]:
    """The registered engines (imported late: the registry imports torch, parameters do not need it)."""
    from .engines import REGISTRY

    return tuple(REGISTRY)


def _engines(name: str, value: Any) -> None:
    known = engine_names()
    if not isinstance(value, list) or not value or any(v not in known for v in value):
        raise ParameterError(f"{name} must be a non-empty list drawn from {', '.join(known)}; got {value!r}")
    if len(set(value)) != len(value):
        raise ParameterError(f"{name} must not repeat an engine; got {value!r}")


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
        merged = {**dataclasses.asdict(cls()), **values}
        if merged.get("prompt_len") == "auto":
            merged["prompt_len"] = None
        if isinstance(merged.get("lr"), int) and not isinstance(merged.get("lr"), bool):
            merged["lr"] = float(merged["lr"])
        for key, check in _CHECKS.items():
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
            # The validation cell's own imports are modules, classes and functions; an injected value is data
            unknown = sorted(name for name in set(namespace) - set(before)
                             if name not in known and name not in NOTEBOOK_NAMES and not _KERNEL_NAME.fullmatch(name)
                             and not isinstance(namespace[name], types.ModuleType) and not callable(namespace[name]))
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
        if self.is_synthetic:
            self.check_positions(self.shape()["max_positions"], source)

    def check_positions(self, model_positions: int, source: str = "parameters") -> None:
        """Prompt plus new tokens must fit in the model's position table."""
        # auto: chat prompts are measured once the tokenizer is there; random prompts take the reference's.
        prompt = self.prompt_len or (1 if self.prompts == "chat" or not self.is_synthetic else RANDOM_PROMPT_LEN)
        needed = prompt + self.max_new_tokens
        if needed > model_positions:
            raise ParameterError(
                f"{source}: prompt_len + max_new_tokens = {needed} exceeds the model's "
                f"{model_positions} positions; allowed: prompt_len + max_new_tokens <= {model_positions}")

    @property
    def policies(self) -> tuple[str, ...]:
        if isinstance(self.policy, list):
            return tuple(self.policy)
        return {"both": POLICIES, "all": POLICIES + DIAGNOSTIC_POLICIES}.get(self.policy, (self.policy,))

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

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_CHECKS = {
    "name": _text,
    "model": _model,
    "device": _one_of(DEVICES),
    "dtype": _one_of(DTYPES),
    "attn": _one_of(ATTENTION),
    "engines": _engines,
    "policy": _policy,
    "requests": _int_at_least(1, 4096),
    "batch_size": _int_at_least(1, 1024),
    "prompt_len": _prompt_len,
    "max_new_tokens": _int_at_least(1, 32768),
    "iterations": _int_at_least(1, 10000),
    "cycles": _int_at_least(1, 100),
    "control_cycles": _int_at_least(0, 10),
    "seed": _int_at_least(0, 2 ** 63 - 1),  # what torch.manual_seed takes
    "optimizer": _one_of(OPTIMIZERS),
    "lr": _positive_float,
    "optimizer_impl": _one_of(OPTIMIZER_IMPLS),
    "update_path": _one_of(UPDATE_PATHS),
    "master_dtype": _one_of(MASTER_DTYPES),
    "lora_rank": _int_at_least(1, 1024),
    "prompts": _one_of(PROMPT_SOURCES),
    "cold_starts": _int_at_least(0, 50),
    "profile": _bool,
    "instrument": _bool,
    "compile_backend": _one_of(COMPILE_BACKENDS),
    "length_bucket": _int_at_least(0, 32768),
    "steps_per_graph": _int_at_least(0, 32768),
    "layers": _int_at_least(1, 256),
    "hidden": _int_at_least(8, 65536),
    "intermediate": _int_at_least(1, 262144),
    "heads": _int_at_least(1, 1024),
    "kv_heads": _int_at_least(1, 1024),
    "vocab": _int_at_least(8, 1_000_000),
    "max_positions": _int_at_least(2, 1_000_000),
}
