"""What each study parameter may hold: the allowed values, one check per parameter, and the error they raise.

`StudyParams.from_dict` (params.py) runs `CHECKS` on every field before it builds the parameters, so a value is
refused here with a message that names the parameter and its allowed range, before anything runs.
"""
from __future__ import annotations

import math
import os
import re
from typing import Any

POLICIES = ("recapture", "reuse")
# Kept to show what a weaker check misses, never a policy to run rollouts with: `version-only` is
# the graph engine's former check (parameter version counters alone), `unchecked` replays whatever
# was captured (the hazard study's control, to show what a stale replay looks like).
DIAGNOSTIC_POLICIES = ("version-only", "unchecked")
POLICY_CHOICES = POLICIES + ("both",) + DIAGNOSTIC_POLICIES + ("all",)
OPTIMIZERS = ("sgd", "adamw")
OPTIMIZER_IMPLS = ("auto", "plain", "foreach", "fused")
CONTROL_PLACEMENTS = ("first", "interleaved")
# The order engines call in, in each round of every phase (protocol.turns): `fixed`, the order they are built in
# (registry order, eager first as in the reference benchmark); `reverse`, the opposite (with the build order kept,
# it tells the order engines are constructed in from their place in the round; the first calls, which allocate
# static buffers and capture, move with the turns); `rotate`, each round starting one engine later, so every engine
# takes every place alike over a multiple of the engines' count of rounds (though with three or more, each still
# follows the same engine in most rounds: the cyclic order stays), while the first calls keep the build order;
# `rotate-run`, as rotate with the rounds counted over the whole run, not from 0 in each phase: a phase's first
# round starts where the last phase's rounds left off, so which engine leads a phase moves between phases, while
# the very first call still keeps the build order (it tells what follows the first call from what follows each
# phase's first turn: under `rotate` both stay with the engine built first). A profiling process runs its own
# count of steady rounds (protocol.PROFILE_ROUNDS), so its phases may be led by others than the measured run's.
TURN_ORDERS = ("fixed", "reverse", "rotate", "rotate-run")
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
# Their position tables, known before any load, so that prompt + new tokens past them is refused up front
PRETRAINED_POSITIONS = {"smollm2-135m-instruct": 8192}


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
        number = float(value)
    except ValueError:
        return ""
    if not math.isfinite(number):  # 1e999 overflows: no way of writing it makes it a number in range
        return " (past the largest number a float holds)"
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


def _config(name: str, config_file: str) -> Any:
    """A checkpoint's config.json, parsed; a ParameterError naming it where it does not."""
    import json

    try:
        with open(config_file, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ParameterError(f"{name}: {config_file} does not parse as JSON: {err}") from None


def _checkpoint(name: str, folder: str, config_file: str) -> None:
    """A checkpoint folder that will load: config parses, architecture known, weights present."""
    config = _config(name, config_file)
    model_type = config.get("model_type") if isinstance(config, dict) else None
    from transformers import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:
        raise ParameterError(f"{name}: {config_file} names model_type {model_type!r}, which this transformers "
                             "does not know; allowed: a causal LM architecture such as llama")
    entries = sorted(os.listdir(folder))
    if not any(entry.endswith(WEIGHT_FILES) for entry in entries):
        raise ParameterError(f"{name}: the folder {folder!r} holds no weights "
                             f"(no file ending in {', '.join(WEIGHT_FILES)})")
    for entry in (e for e in entries if e.endswith(".safetensors")):  # its header only: milliseconds, no tensor read
        _safetensors_header(name, os.path.join(folder, entry))


def _safetensors_header(name: str, path: str) -> None:
    """A weights file whose header does not read (cut short, or not safetensors) would fail the load, after the run's
    folder is made: refused here."""
    from safetensors import safe_open

    try:
        with safe_open(path, framework="pt") as weights:
            weights.keys()
    except Exception as err:  # SafetensorError, or the OS's for a file that cannot be opened
        raise ParameterError(f"{name}: {path!r} is not a readable safetensors file ({err}); allowed: a checkpoint "
                             "folder as save_pretrained writes it") from None


def model_positions(model: str) -> int | None:
    """A pretrained source's or local checkpoint's position table from what names it (config.json's
    max_position_embeddings), without its weights; None where that does not say (the load checks again)."""
    if model in PRETRAINED_POSITIONS:
        return PRETRAINED_POSITIONS[model]
    try:
        config = _config("model", os.path.join(model, "config.json"))
    except ParameterError:  # the model's own check has said why, where it is one
        return None
    positions = config.get("max_position_embeddings") if isinstance(config, dict) else None
    return positions if isinstance(positions, int) and not isinstance(positions, bool) and positions > 0 else None


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


# The check of each StudyParams field, by name (a field without one would go unchecked: tests hold them equal)
CHECKS = {
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
    "control_placement": _one_of(CONTROL_PLACEMENTS),
    "turn_order": _one_of(TURN_ORDERS),
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
