"""Phases and cycles: runs the engines on the same weights and returns the result record.

Order of one run (STUDY.md):
  initialize CUDA and the model's libraries (one plain forward, no engine touched)
  cycle 0:  first        each engine once, eager first, then graph[recapture], graph[reuse]
            (reference)  generate() with logits for these weights, outside any timed region
            steady       `iterations` calls per engine; then one profiled call per engine (CUDA)
  each cycle c: update   one optimizer step on the latest rollout
            first_after_update, (reference), steady_after_update
The peak memory counter is reset at the start of every (engine, phase) block.
"""
from __future__ import annotations

import gc
import sys
import time
import traceback

import torch

from . import environment, memory, models, parity, training
from .engines import RolloutOutput, engine_label
from .engines.eager import EagerEngine, reference
from .engines.graph import GraphEngine
from .params import ParameterError, StudyParams
from .results import SCHEMA_VERSION
from .timing import CallClock, profile_call, synchronize
from .workload import Workload, chat_workload, random_workload


def build_workload(params: StudyParams, loaded: models.LoadedModel) -> Workload:
    if params.resolved_prompts(loaded.tokenizer is not None) == "chat":
        if loaded.tokenizer is None:
            raise ParameterError(f"prompts: 'chat' needs a model with a tokenizer; {loaded.info['name']} has none "
                                 "(allowed here: auto, random)")
        return chat_workload(loaded.tokenizer, params.requests, params.batch_size, params.prompt_len,
                             params.max_new_tokens, loaded.pad_token_id)
    vocab = loaded.model.config.vocab_size
    return random_workload(params.requests, params.batch_size, params.prompt_len, params.max_new_tokens,
                           vocab, params.seed, loaded.pad_token_id)


def pin(workload: Workload) -> Workload:
    # Pinned prompts make the host-to-device copy asynchronous, as a rollout server's would be.
    for batch in workload.batches:
        batch.input_ids, batch.attention_mask = batch.input_ids.pin_memory(), batch.attention_mask.pin_memory()
    return workload


def build_engines(params: StudyParams, loaded: models.LoadedModel, device: torch.device) -> list:
    engines = []
    if "eager" in params.engines:
        engines.append(EagerEngine(loaded.model, device, params.max_new_tokens, loaded.pad_token_id))
    if "graph" in params.engines:
        for policy in params.policies:
            engines.append(GraphEngine(loaded.model, device, policy, params.prompt_len, params.max_new_tokens,
                                       attn=params.attn))
    return engines


def initialize(model, workload: Workload, device: torch.device) -> float:
    """CUDA context, BLAS handles and one plain forward, so first calls measure engines, not start-up."""
    begin = time.perf_counter()
    batch = workload.batches[0]
    with torch.no_grad():
        model(input_ids=batch.input_ids.to(device), attention_mask=batch.attention_mask.to(device), use_cache=False)
    synchronize(device)
    return (time.perf_counter() - begin) * 1e3


class _Progress:
    def __init__(self, total: int, enabled: bool):
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc="rollouts", unit="call", file=sys.stderr, leave=False)

    def step(self, text: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class Study:
    def __init__(self, params: StudyParams, progress: bool = False, command: str | None = None):
        self.params = params
        self.command = command
        self.calls: list[dict] = []
        self.updates: list[dict] = []
        self.profile: dict = {}
        self.failures: list[dict] = []
        self.progress_enabled = progress
        self._pending: list[tuple[dict, RolloutOutput]] = []  # records waiting for this version's reference
        self._reference = None
        self.latest: RolloutOutput | None = None
        self._phase_start_allocated: int | None = None

    # -- measurement -------------------------------------------------------------------------
    def _measure(self, engine, cycle: int, phase: str, index: int) -> dict:
        # As timeit does: collect before, no collector pauses inside the measured call.
        gc.collect()
        gc.disable()
        try:
            clock = CallClock(self.device).start()
            output = engine(self.workload.batches, clock)
            total_ms, breakdown = clock.stop()
        finally:
            gc.enable()
        tokens = self.workload.requests * self.params.max_new_tokens
        record = {
            "engine": engine.name, "policy": engine.policy, "cycle": cycle, "phase": phase, "index": index,
            "total_ms": total_ms, "breakdown_ms": breakdown, "captures": output.captures,
            "memory_bytes": {**memory.snapshot(self.device), "phase_start_allocated": self._phase_start_allocated},
            "generated_tokens": tokens,
            "tokens_per_s": tokens / (total_ms / 1e3) if total_ms > 0 else None,
            "parameter_check": getattr(engine, "last_check", None), "parity": None,
        }
        output = output.to_cpu()
        self.latest = output
        if self._reference is None:
            self._pending.append((record, output))
        else:
            record["parity"] = parity.compare(output, self._reference, self._request_ids)
        self.calls.append(record)
        return record

    def _phase(self, cycle: int, phase: str, samples: int) -> None:
        for engine in self.engines:
            label = engine_label(engine.name, engine.policy)
            memory.reset_peak(self.device)
            self._phase_start_allocated = memory.snapshot(self.device)["allocated"]
            try:
                for index in range(samples):
                    self._measure(engine, cycle, phase, index)
                    self.bar.step(f"c{cycle} {phase} {label}")
            except Exception as err:  # a phase that cannot run (out of memory, say) is recorded, not hidden
                self.failures.append({"engine": engine.name, "policy": engine.policy, "cycle": cycle, "phase": phase,
                                      "error": f"{type(err).__name__}: {err}",
                                      "traceback": traceback.format_exc(limit=8)})
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()

    def _settle_reference(self) -> None:
        """Compute generate()'s reference for the current weights and check the calls that waited for it."""
        self._reference = reference(self.model, self.workload.batches, self.params.max_new_tokens,
                                    self.loaded.pad_token_id, self.device)
        for record, output in self._pending:
            record["parity"] = parity.compare(output, self._reference, self._request_ids)
        self._pending = []

    def _profile(self, cycle: int, phase: str) -> None:
        if self.device.type != "cuda" or not self.params.profile:
            return
        for engine in self.engines:
            label = engine_label(engine.name, engine.policy)
            try:
                result = profile_call(lambda: engine(self.workload.batches, CallClock(self.device).start()), self.device)
                self.profile[label] = {"engine": engine.name, "policy": engine.policy, "cycle": cycle, "phase": phase,
                                       **result}
            except Exception as err:
                self.failures.append({"engine": engine.name, "policy": engine.policy, "cycle": cycle,
                                      "phase": f"profile:{phase}", "error": f"{type(err).__name__}: {err}"})

    def _update(self, cycle: int) -> None:
        source = self.latest or self._reference.output
        try:
            stats = training.update(self.model, self.optimizer, source, self.device)
        except training.NonFiniteUpdate as err:
            self.failures.append({"engine": None, "policy": None, "cycle": cycle, "phase": "update", "error": str(err)})
            stats = {"loss": None, "ms": None}
        self.updates.append({"cycle": cycle, "optimizer": self.params.optimizer, "lr": self.params.lr, **stats})
        self._reference = None  # the weights changed: the next calls wait for a new reference

    # -- the run ------------------------------------------------------------------------------
    def run(self, first_only: bool = False) -> dict:
        params = self.params
        started = environment.now()
        startup_ms = environment.process_age_ms()
        self.device = torch.device(params.resolved_device())
        dtype = params.resolved_dtype(self.device.type)
        import_done = time.perf_counter()
        self.loaded = models.load(params, self.device.type, dtype)
        self.model = self.loaded.model
        load_ms = (time.perf_counter() - import_done) * 1e3
        self.workload = build_workload(params, self.loaded)
        if self.device.type == "cuda":
            pin(self.workload)
        self._request_ids = [b.request_ids for b in self.workload.batches]
        grad_was = torch.is_grad_enabled()
        torch.set_grad_enabled(False)
        try:
            init_ms = initialize(self.model, self.workload, self.device)
            self.engines = build_engines(params, self.loaded, self.device)
            self.optimizer = training.make_optimizer(params.optimizer, self.model, params.lr)
            per_engine = 1 if first_only else (1 + params.iterations) * (1 + params.cycles)
            self.bar = _Progress(per_engine * len(self.engines), self.progress_enabled)
            try:
                self._phase(0, "first", 1)
                self._settle_reference()
                if not first_only:
                    self._phase(0, "steady", params.iterations)
                    self._profile(0, "steady")
                    for cycle in range(params.cycles):
                        self._update(cycle)
                        self._phase(cycle, "first_after_update", 1)
                        self._settle_reference()
                        self._phase(cycle, "steady_after_update", params.iterations)
            finally:
                self.bar.close()
        finally:
            torch.set_grad_enabled(grad_was)
        return self._result(started, dtype, {"process_startup_ms": startup_ms, "model_load_ms": load_ms,
                                             "initialization_ms": init_ms})

    def _result(self, started: str, dtype: str, startup: dict) -> dict:
        params, info = self.params, self.loaded.info
        parity_ok = all(c["parity"] is not None and c["parity"]["ok"] for c in self.calls)
        cuda_graph = self.device.type == "cuda"
        metadata = {
            "label": info["label"],
            "run_name": params.name,
            "model": info,
            "attention_implementation": params.attn,
            "device": self.device.type,
            "dtype": dtype,
            "cuda_graph": cuda_graph,
            "graph_note": None if cuda_graph else "no CUDA graph: the graph engine ran its static-cache step eagerly",
            "hardware": environment.hardware(self.device),
            "software": environment.software(),
            "workload": {"requests": params.requests, "batch_size": params.batch_size, "prompt_len": params.prompt_len,
                         "max_new_tokens": params.max_new_tokens, "iterations": params.iterations,
                         "cycles": params.cycles, "seed": params.seed, **self.workload.describe()},
            "training": {"optimizer": params.optimizer, "lr": params.lr,
                         "loss": "mean negative log-likelihood of the latest rollout's response tokens"},
            "engines": [e.describe() for e in self.engines],
            "startup": startup,
            "git": environment.git_commit(),
            "command": self.command,
            "time_start": started,
            "time_end": environment.now(),
            "params": params.to_dict(),
        }
        return {"schema_version": SCHEMA_VERSION, "valid": parity_ok and not self.failures, "metadata": metadata,
                "calls": self.calls, "updates": self.updates, "profile": self.profile, "failures": self.failures}


def run_study(params: StudyParams, progress: bool = False, command: str | None = None,
              first_only: bool = False) -> dict:
    result = Study(params, progress, command).run(first_only=first_only)
    if params.cold_starts and not first_only:
        result["cold_starts"] = cold_starts(params, params.cold_starts, progress)
        result["valid"] = result["valid"] and all(
            run["valid"] for run in result["cold_starts"])
    return result


def cold_start_targets(params: StudyParams) -> list[dict]:
    """One parameter override per target, so each fresh process runs a single engine's first call."""
    targets = []
    if "eager" in params.engines:
        targets.append({"engines": ["eager"]})
    if "graph" in params.engines:
        targets.extend({"engines": ["graph"], "policy": policy} for policy in params.policies)
    return targets


def cold_starts(params: StudyParams, processes: int, progress: bool = False) -> list[dict]:
    """Repeat each target's first call alone in fresh processes.

    In one process the targets share lazily loaded CUDA modules and library handles, so the
    second graph engine's first call looks cheaper than it is alone. A fresh process per target
    and repeat gives first-call figures a spread and removes that order effect.
    """
    import json
    import os
    import subprocess
    import tempfile

    runs = []
    with tempfile.TemporaryDirectory(prefix="cold-start-") as folder:
        for process in range(processes):
            for override in cold_start_targets(params):
                path = os.path.join(folder, f"cold-{process}-{len(runs)}.json")
                values = {**params.to_dict(), "cold_starts": 0, **override}
                cmd = [sys.executable, "-m", "rollout_study.bench", "--params-json", json.dumps(values),
                       "--first-only", "--quiet", "--output", path]
                done = subprocess.run(cmd, capture_output=True, text=True)
                target = engine_label(override["engines"][0], override.get("policy"))
                if not os.path.exists(path):
                    runs.append({"process": process, "target": target, "valid": False, "calls": [], "startup": None,
                                 "error": (done.stderr or done.stdout)[-2000:]})
                    continue
                with open(path, encoding="utf-8") as handle:
                    child = json.load(handle)
                runs.append({"process": process, "target": target, "valid": child["valid"], "calls": child["calls"],
                             "startup": child["metadata"]["startup"], "failures": child["failures"]})
                if progress:
                    print(f"cold start {process + 1}/{processes}: {target} "
                          f"{child['calls'][0]['total_ms'] if child['calls'] else float('nan'):.1f} ms", file=sys.stderr)
    return runs
