"""A run's preparation before any engine is called: the workload from the parameters, pinned
prompts, and the process's initialization (CUDA context, libraries, one plain forward)."""
from __future__ import annotations

import time

import torch

from . import models
from .param_values import ParameterError
from .params import StudyParams
from .timing import synchronize
from .workload import Workload, chat_workload, random_workload


def build_workload(params: StudyParams, loaded: models.LoadedModel) -> Workload:
    if params.resolved_prompts(loaded.tokenizer is not None) == "chat":
        if loaded.tokenizer is None:
            raise ParameterError(f"prompts: 'chat' needs a model with a tokenizer; {loaded.info['name']} has none "
                                 "(allowed here: auto, random)")
        return chat_workload(loaded.tokenizer, params.requests, params.batch_size, params.prompt_len,
                             loaded.pad_token_id)
    vocab = loaded.model.config.vocab_size
    return random_workload(params.requests, params.batch_size, params.resolved_prompt_len(), vocab, params.seed,
                           loaded.pad_token_id)


def pin(workload: Workload) -> Workload:
    # Pinned prompts make the host-to-device copy asynchronous, as a rollout server's would be.
    for batch in workload.batches:
        batch.input_ids, batch.attention_mask = batch.input_ids.pin_memory(), batch.attention_mask.pin_memory()
    return workload


def initialize(model, workload: Workload, device: torch.device) -> float:
    """CUDA context, BLAS handles and one plain forward, so first calls measure engines, not start-up."""
    begin = time.perf_counter()
    batch = workload.batches[0]
    with torch.no_grad():
        model(input_ids=batch.input_ids.to(device), attention_mask=batch.attention_mask.to(device), use_cache=False)
    synchronize(device)
    return (time.perf_counter() - begin) * 1e3
