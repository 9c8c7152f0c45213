"""Transformers' continuous batching (`model.generate_batch`) with its CUDA graphs on, greedy.

`generate_batch` takes unpadded token lists and schedules the requests itself (a paged KV cache,
prefill and decode mixed in one varlen forward, padded to fixed sizes so CUDA graphs can replay).
The engine strips each request's left padding, submits every request of a call at once (the
workload's `batch_size` is the other engines' batching, not this one's), and rebuilds the
sequences generate() returns: the prompt as the workload padded it, then exactly
`max_new_tokens` greedy tokens. EOS is disabled (-1) and sampling off, so each request runs to
its full length; a request that failed or returned another length is an error, never padded out.

Manager lifetime, deliberately: one manager persists across calls (`persistent_manager=True`),
keeping its paged cache and its CUDA graphs, which hold the parameters' addresses. The engine has
no check of those addresses, so every weight update the trainer reports drops the manager (as the
graph engine's `recapture` drops its graphs) and the next call builds a new one: a new cache,
new graphs. The manager is built by the engine (the same public calls generate_batch makes) and
left where generate_batch looks for a cached one, so the breakdown can show the build apart.
"""
from __future__ import annotations

import gc
import time

import torch

from ..timing import CallClock
from .base import Engine, RolloutOutput
from .eager import full_mask

# Where generate_batch(persistent_manager=True) caches its manager on the model (transformers 5.20.1).
MANAGER_ATTRIBUTE = "_cached_continuous_batching_manager"
NO_EOS = -1  # the manager's own spelling of "no end-of-sequence token"
# generate_batch warns on every call that a persistent manager was sized for its first workload;
# this engine's workload never changes, so that one message is dropped (every other one is kept).
PERSISTENT_WARNING = "Since you passed `persistent_manager=True`"


def _not_the_persistent_warning(record) -> bool:
    return not str(record.getMessage()).startswith(PERSISTENT_WARNING)


def unpadded(batch) -> list[list[int]]:
    """Each request's real tokens: the batch is left padded, so they are the last `mask.sum()` ones."""
    rows = []
    width = batch.input_ids.shape[1]
    for request, ids, mask in zip(batch.request_ids, batch.input_ids, batch.attention_mask):
        real = int(mask.sum())
        if real == 0 or not bool(mask[width - real:].all()):
            raise ValueError(f"hf-continuous: request {request}'s attention mask is not a left padding "
                             f"(zeros then at least one one): {mask.tolist()}")
        rows.append(ids[width - real:].tolist())
    return rows


def generated_tokens(results: dict, inputs: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """The tokens of each request, in submission order.

    generate_batch returns its results in the order of the inputs; each result also carries the
    prompt it answered, which is checked against the input at its place, so a result that came
    back elsewhere is an error rather than another request's tokens.
    """
    outputs = list(results.values())
    if len(outputs) != len(inputs):
        raise RuntimeError(f"hf-continuous: generate_batch returned {len(outputs)} of {len(inputs)} requests")
    tokens = []
    for index, (output, prompt) in enumerate(zip(outputs, inputs)):
        if output.error is not None:
            raise RuntimeError(f"hf-continuous: request {index} failed: {output.error}")
        if list(output.prompt_ids) != list(prompt):
            raise RuntimeError(f"hf-continuous: result {index} ({output.request_id}) answers another prompt than "
                               f"request {index}: generate_batch did not return the requests in submission order")
        if len(output.generated_tokens) != max_new_tokens:
            raise RuntimeError(f"hf-continuous: request {index} got {len(output.generated_tokens)} tokens, "
                               f"not max_new_tokens {max_new_tokens}")
        tokens.append(list(output.generated_tokens))
    return tokens


def rebuild(batches, tokens: list[list[int]], max_new_tokens: int) -> RolloutOutput:
    """Sequences, masks and offsets as generate() returns them for the workload's left-padded batches."""
    sequences, masks, offsets = [], [], []
    start = 0
    for batch in batches:
        new = torch.tensor(tokens[start:start + batch.size], dtype=torch.long).reshape(batch.size, max_new_tokens)
        start += batch.size
        sequences.append(torch.cat([batch.input_ids.cpu(), new], dim=1))
        masks.append(full_mask(batch, max_new_tokens, "cpu"))
        offsets.append([batch.input_ids.shape[1]] * batch.size)
    return RolloutOutput(sequences, masks, offsets)


class GcTime:
    """Seconds spent in Python's garbage collector while entered (generate_batch collects on every stop)."""

    def __init__(self):
        self.seconds = 0.0
        self._began: float | None = None

    def _callback(self, phase, info) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        elif self._began is not None:
            self.seconds += time.perf_counter() - self._began
            self._began = None

    def __enter__(self) -> "GcTime":
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self._callback)


class HFContinuousEngine(Engine):
    name = "hf-continuous"
    colors = {None: "#e377c2"}  # apart from graph-compiled's colours (main)

    def __init__(self, model, device, requests: int, prompt_len: int, max_new_tokens: int, pad_token_id: int):
        from transformers import ContinuousBatchingConfig, GenerationConfig

        self.model = model
        self.device = torch.device(device)
        self.max_new_tokens = max_new_tokens
        self.generation = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, num_beams=1,
                                           eos_token_id=NO_EOS, pad_token_id=pad_token_id)
        page = ContinuousBatchingConfig().page_size
        blocks = requests * -(-(prompt_len + max_new_tokens) // page)
        # Sized for the workload: left to itself the manager takes 90% of free GPU memory for its cache.
        # Twice the blocks the requests need, so the scheduler's safety margin never holds a prefill back.
        self.batching = ContinuousBatchingConfig(
            num_blocks=2 * blocks, max_batch_tokens=requests * prompt_len, max_requests_per_batch=requests,
            use_cuda_graph=self.device.type == "cuda",
            # Flash attention (where installed) would change the attention kernels; the other engines and
            # the parity reference run the study's `attn`, so this one does too.
            auto_switch_to_flash=False)
        from transformers.generation.continuous_batching.requests import logger

        self._logger = logger
        logger.addFilter(_not_the_persistent_warning)
        self.manager = None
        self._holder = None  # the model object the manager is cached on (the old one after a reload)
        self._stale = False
        self.builds = 0
        self._resolved: dict = {}
        self._update: str | None = None
        self._notes: dict = {}

    @classmethod
    def build(cls, loaded, device, params, policy):
        return cls(loaded.model, device, params.requests, params.prompt_len, params.max_new_tokens,
                   loaded.pad_token_id)

    def describe(self) -> dict:
        graphs = self._resolved.get("use_cuda_graph", self.batching.use_cuda_graph)
        return {"engine": self.name, "policy": None, "cache": "paged (continuous batching)",
                "api": "model.generate_batch(persistent_manager=True)",
                "cuda_graph": graphs if self.device.type == "cuda" else False,
                "graph_note": None if self.device.type == "cuda" else
                "no CUDA: transformers turns accelerator graphs off, the manager runs eagerly",
                "attention": self.model.config._attn_implementation, "auto_switch_to_flash": False,
                "scheduling": "all requests of a call submitted at once; the manager batches them (batch_size unused)",
                "tokens": "greedy (do_sample false), eos disabled (-1): exactly max_new_tokens per request",
                "manager": "kept across calls; dropped after every weight update and built again on the next call",
                "sizes": {"page_size": self.batching.page_size, "num_blocks": self.batching.num_blocks,
                          "max_batch_tokens": self.batching.max_batch_tokens,
                          "max_requests_per_batch": self.batching.max_requests_per_batch},
                "resolved": self._resolved or None,
                "breakdown": "allocation: the manager and its paged KV cache (and tearing down a stale one); capture: "
                             "the manager's warmup (CUDA graphs at the largest shapes); the rest in other (generation "
                             "runs in the manager's thread, which captures graphs for new padded shapes lazily)"}

    def weights_updated(self, model=None) -> None:
        self._update = "new model object" if model is not None and model is not self.model else "same model object"
        if model is not None:
            self.model = model
        self._stale = True

    def call_notes(self) -> dict:
        return self._notes

    def _drop(self) -> None:
        if self.manager is None:
            return
        if self._holder.__dict__.get(MANAGER_ATTRIBUTE) is self.manager:
            self._holder.destroy_cached_continuous_batching_manager()
        else:
            self.manager.destroy()
        # The batch processor holds the paged cache and the CUDA graphs: released now, not at collection.
        self.manager.batch_processor = None
        self.manager = self._holder = None

    def _owner(self):
        """The model generate_batch belongs to: a PEFT wrapper (lora-merge) hands it on to the model inside,
        and the manager must be cached where that model looks for it."""
        return getattr(self.model.generate_batch, "__self__", self.model)

    def _build(self, clock: CallClock) -> None:
        owner = self._owner()
        with clock.part("allocation"):
            self._drop()
            manager = owner.init_continuous_batching(generation_config=self.generation,
                                                     continuous_batching_config=self.batching)
            manager.batch_processor = manager._create_batch_processor()  # the paged KV cache
        with clock.part("capture"):
            manager.warmup()
        setattr(owner, MANAGER_ATTRIBUTE, manager)
        self.manager, self._holder, self._stale = manager, owner, False
        self.builds += 1
        config = manager.continuous_batching_config
        self._resolved = {"use_cuda_graph": list(config.cuda_graph_booleans), "use_async_batching":
                          config.use_async_batching, "num_blocks": getattr(manager.batch_processor.cache, "num_blocks",
                                                                           None)}

    def __call__(self, batches, clock: CallClock) -> RolloutOutput:
        built = self.manager is None or self._stale
        if built:
            self._build(clock)
        inputs = [row for batch in batches for row in unpadded(batch)]
        owner = self._owner()
        with GcTime() as collector:
            results = owner.generate_batch(inputs, generation_config=self.generation,
                                           continuous_batching_config=self.batching, persistent_manager=True,
                                           max_new_tokens=self.max_new_tokens, progress_bar=False)
        if owner.__dict__.get(MANAGER_ATTRIBUTE) is not self.manager:
            raise RuntimeError("hf-continuous: generate_batch did not keep the engine's manager; this transformers "
                               f"caches it elsewhere than model.{MANAGER_ATTRIBUTE}")
        output = rebuild(batches, generated_tokens(results, inputs, self.max_new_tokens), self.max_new_tokens)
        self._notes = {"refresh": "rebuilt" if built else "kept", "manager_built": built,
                       "managers_built": self.builds, "after_update": self._update,
                       "gc_ms": collector.seconds * 1e3}
        self._update = None
        return output

    def close(self) -> None:
        self._drop()
        self._logger.removeFilter(_not_the_persistent_warning)
