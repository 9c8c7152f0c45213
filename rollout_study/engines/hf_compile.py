"""Hugging Face `generate()` with a static cache and torch.compile, as users of Transformers run it.

`generate(cache_implementation="static", compile_config=...)` compiles the decoding forward on its
own (`GenerationMixin._valid_auto_compile_criteria`, `get_compiled_call`); the prefill runs
eagerly. Parameters reach the compiled code as graph inputs, so writes into them need nothing; a
reload (a new object of the same shapes) passes dynamo's guards too, and was seen not to recompile
(tests/test_hf_engines.py records it). With the
inductor backend the mode is `reduce-overhead`: inductor's CUDA graph trees record the decode
step and re-record it when a static input (a parameter, the static cache) moves.

The engine does not refresh anything itself: it records what torch did. After every call,
`call_notes()` gives dynamo's compilations and inductor's CUDA-graph recordings in that call
(from the compile callbacks), torch's counters moved during the call and their sum over this
engine's calls (process-wide counters also move when other engines compile, so they are read
around this engine's own calls only), the process-wide totals, and
whether dynamo hit its recompile limit (from then on it runs uncompiled code for inputs that
miss every cached graph, silently unless recorded here).
"""
from __future__ import annotations

import torch

from ..param_values import COMPILE_BACKENDS
from ..timing import CallClock
from . import compile_watch
from .base import Engine, RolloutOutput
from .eager import full_mask, generate

USER_MODE = "reduce-overhead"  # CompileConfig's default: inductor with CUDA graph trees
# Inductor keeps 16-bit intermediates of a fused kernel in float32 where eager rounds after every
# op; on the H200 the compiled path then gave other tokens than generate() (STUDY.md). Users run
# without this option, but parity after a sync is what tells a stale graph from a current one
# (the hazard matrix), so the engine emulates eager's rounding, says so in describe(), and leaves
# the compile and capture mechanics it measures as users get them.
EMULATE_PRECISION_CASTS = True


def compile_config(backend: str, device: torch.device, emulate_precision_casts: bool | None = None):
    from transformers import CompileConfig

    if emulate_precision_casts is None:
        emulate_precision_casts = EMULATE_PRECISION_CASTS
    if backend == "inductor" and emulate_precision_casts:
        from torch._inductor import list_mode_options

        # torch.compile takes a mode or options, not both: the mode spelled as its options, plus one.
        options = {**list_mode_options(USER_MODE), "emulate_precision_casts": True}
        config = CompileConfig(backend=backend, mode=None, options=options)
    elif backend == "inductor":
        config = CompileConfig(backend=backend, mode=USER_MODE)
    else:
        # aot_eager and eager generate no kernels and take no mode (aot_eager warns about one).
        config = CompileConfig(backend=backend, mode=None)
    if device.type != "cuda":
        # generate() compiles only on accelerators unless told otherwise; CPU tests take the same path.
        config._compile_all_devices = True
    return config


def _refresh(compiles: int, recordings: int) -> str:
    """One word for what the call did to the compiled state (the hazard matrix reads it)."""
    return "compiled" if compiles else "recorded" if recordings else "kept"


class HFCompileEngine(Engine):
    name = "hf-compile"
    colors = {None: "#2ca02c"}

    def __init__(self, model, device, max_new_tokens: int, pad_token_id: int, backend: str = "inductor",
                 emulate_precision_casts: bool | None = None):
        if backend not in COMPILE_BACKENDS:
            raise ValueError(f"compile_backend must be one of {', '.join(COMPILE_BACKENDS)}, got {backend!r}")
        self.model = model
        self.device = torch.device(device)
        self.max_new_tokens, self.pad_token_id = max_new_tokens, pad_token_id
        self.backend = backend
        self.config = compile_config(backend, self.device, emulate_precision_casts)
        self.emulate = bool((self.config.options or {}).get("emulate_precision_casts"))
        self._own: dict[str, int] = {}  # counter changes summed over this engine's calls
        self._update: str | None = None  # what the last weight update did, reported with the next call
        self._notes: dict = {}

    @classmethod
    def build(cls, loaded, device, params, policy):
        return cls(loaded.model, device, params.max_new_tokens, loaded.pad_token_id, params.compile_backend)

    @property
    def cudagraphs(self) -> bool:
        return self.backend == "inductor" and self.device.type == "cuda"

    def describe(self) -> dict:
        options = self.config.options or {}
        return {"engine": self.name, "policy": None, "cache": "static", "compile_backend": self.backend,
                "compile_mode": USER_MODE if self.backend == "inductor" else None,
                "compile_options": options or None, "emulate_precision_casts": self.emulate,
                "cuda_graph": "inductor CUDA graph trees" if self.cudagraphs else False,
                "compiled": "the decoding forward (generate()'s own auto-compile); prefill eager",
                "compiles_on_cpu": bool(self.config._compile_all_devices),
                "recompile_limit": compile_watch.recompile_limit(),
                "recording_callbacks": compile_watch.recording_callbacks(),
                "breakdown": "compile: dynamo's compilations inside the call; capture: CUDA-graph recordings of "
                             "the cudagraph trees; the rest in other (hooks to split prefill and decode would "
                             "change what dynamo compiles)"}

    def weights_updated(self, model=None) -> None:
        # Nothing is dropped here on purpose: the engine measures what torch's caches do on their own
        # (a reload's new object passes dynamo's guards; a recompile, if any, shows in the notes).
        if model is not None and model is not self.model:
            self._update, self.model = "new model object", model
        else:
            self._update = "same model object"

    def call_notes(self) -> dict:
        return self._notes

    def __call__(self, batches, clock: CallClock) -> RolloutOutput:
        watch = compile_watch.CompileWatch(self.device)
        sequences, masks, offsets = [], [], []
        at_start = compile_watch.counters_now()
        with watch.watching(), torch.no_grad():
            for batch in batches:
                out = generate(self.model, batch, self.max_new_tokens, self.pad_token_id, self.device,
                               cache_implementation="static", compile_config=self.config)
                new = out.shape[1] - batch.input_ids.shape[1]
                if new != self.max_new_tokens:
                    raise RuntimeError(f"hf-compile: generate() returned {new} new tokens, not max_new_tokens "
                                       f"{self.max_new_tokens}")
                sequences.append(out)
                masks.append(full_mask(batch, new, self.device))
                offsets.append([batch.input_ids.shape[1]] * batch.size)
        watch.charge(clock)
        self._notes = self._notes_of(watch, at_start)
        return RolloutOutput(sequences, masks, offsets, captures=watch.count["capture"])

    def _notes_of(self, watch: compile_watch.CompileWatch, at_start: dict) -> dict:
        now = compile_watch.counters_now()
        in_call = compile_watch.difference(now, at_start)
        self._own = {key: self._own.get(key, 0) + value for key, value in in_call.items()}
        notes = {
            "refresh": _refresh(watch.count["compile"], watch.count["capture"]),
            "dynamo_compiles": watch.count["compile"], "compile_ms": watch.seconds["compile"] * 1e3,
            "cudagraph_recordings": watch.count["capture"], "recording_ms": watch.seconds["capture"] * 1e3,
            "in_call": in_call, "engine_total": dict(self._own), "process_total": now,
            "recompile_limit": compile_watch.recompile_limit(),
            # After a hit dynamo stops compiling that code: inputs no cached graph matches run eagerly.
            "recompile_limit_hit": self._own["recompile_limit_hits"] > 0,
            # Past its re-record limit (or for an input it cannot graph) inductor runs the step without a graph.
            "cudagraphs_skipped": self._own["cudagraph_skips"] > 0,
            "after_update": self._update,
        }
        self._update = None
        return notes
