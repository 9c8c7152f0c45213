"""Phases and cycles: runs the engines on the same weights and returns the typed `Result`.

Order of one run (STUDY.md):
  initialize CUDA and the model's libraries (one plain forward, no engine touched)
  cycle 0:  first        each engine once, in the turn order (registry order unless turn_order says otherwise:
                         eager first, then the graph policies as `policy` lists them)
            (reference)  generate() with logits for these weights, outside any timed region
            steady       `iterations` rounds; in each round every engine makes one call, in the turn order
  each cycle c: update   control cycles (forward and backward, no step: the weights stay) first, or
                         interleaved with the real optimizer steps; every engine is told of each update
            first_after_update, (reference), steady_after_update
  after all measured phases: instrumented eager calls (prefill/decode split, and what the
            instrument costs), taken in turns with untouched ones
Engines take turns call by call, so drift of the host over time lands on every engine alike and
cannot pass for the effect of an update; control cycles measure that drift. Peak memory is reset
before every call. Profiling (`mode="profile"`) runs in a process of its own (launch.py), so no
measured call shares a process with the profiler; that process also measures the device's memory
bandwidth (bandwidth.py) and what tracing adds to kernels in a graph replay (tracing.py) before it
loads the model. Fresh-process cold starts are launch.py's job.
"""
from __future__ import annotations

import dataclasses
import gc
import time
import traceback

import torch

from . import bandwidth, environment, host_speed, memory, models, parity, run_record, tracing, training
from .collection import Collector
from .engines import expand
from .engines.base import RolloutOutput
from .params import StudyParams
from .record import Call, Failure, Parity, Profile, Update
from .preparation import build_workload, initialize, pin
from .result import Result
from .reference import reference
from .progress import Progress
from .timing import CallClock, add_elapsed, profile_call


def _failure(engine, cycle: int | None, phase: str, err: BaseException, with_traceback: bool = True) -> Failure:
    extra = {"traceback": traceback.format_exc(limit=8)} if with_traceback else {}
    return Failure(getattr(engine, "name", None), getattr(engine, "policy", None), cycle, phase,
                   f"{type(err).__name__}: {err}", extra)


MODES = ("measure", "first_only", "profile")
PROFILE_ROUNDS = 2  # steady rounds before each profiled call in a profiling process: enough to warm up
INSTRUMENT_ROUNDS = 3


def turns(running: list, turn_order: str, index: int, run_index: int | None = None) -> list:
    """The order of a phase's round `index`, the run's round `run_index` (param_values.TURN_ORDERS): the engines as
    built (registry order, an engine's policies as `policy` lists them), the reverse of that, or starting `index`
    engines later (`run_index` under rotate-run). Rotation counts the engines still running, so after one fails the
    rest take their places anew."""
    if turn_order == "reverse":
        return running[::-1]
    if turn_order == "rotate-run" and run_index is None:
        raise ValueError("turn_order rotate-run needs the run's round (run_index)")  # else it would be rotate's
    rounds = {"rotate": index, "rotate-run": run_index}.get(turn_order)
    start = rounds % len(running) if rounds is not None and running else 0
    return running[start:] + running[:start]


class Study:
    """One process's run of the protocol; `run()` returns the `Result`.

    mode: `measure` (every phase, the measured samples), `first_only` (the first call, for cold
    starts), `profile` (the same phases with few samples and one profiled call per engine after
    each steady phase; only its profiles are kept).
    """

    def __init__(self, params: StudyParams, progress: bool = False, command: str | None = None,
                 mode: str = "measure"):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.params = params
        self.command = command
        self.mode = mode
        self.calls: list[Call] = []
        self.updates: list[Update] = []
        self.profiles: list[Profile] = []
        self.failures: list[Failure] = []
        self.instrumented: list[dict] = []
        self.rounds_done = 0  # the run's rounds so far, over its phases (turn_order rotate-run counts on from it)
        self.progress_enabled = progress
        self._pending: list[tuple[Call, RolloutOutput]] = []  # calls waiting for this version's reference
        self._reference = None
        self._previous_reference = None
        self._reference_before_update = None
        self.latest: RolloutOutput | None = None
        self.bandwidth: dict | None = None  # the device's measured bandwidth (profiling process only)
        self.tracing: list | None = None  # what tracing adds to kernels in a replay (profiling process only)
        # Host time the study spends around the measured calls: what a run (a sweep point) costs beyond them.
        self.untimed_ms = {"collect": 0.0, "parity": 0.0, "reference": 0.0, "update": 0.0}
        self.host_speed: dict = {}  # host_speed.measure() at the run's start and end

    # -- measurement -------------------------------------------------------------------------
    def _untimed(self, part: str):
        return add_elapsed(self.untimed_ms, part)

    def _timed(self, engine) -> tuple[CallClock, RolloutOutput, int | None]:
        """One call of `engine`: the young garbage collected (collection.py) before the memory baseline (what
        it frees is not the call's), peak memory reset, and no collector pauses inside, as timeit does.
        Returns the clock, the output and the memory allocated at the start."""
        self.collector.young()
        memory.reset_peak(self.device)
        start_allocated = memory.snapshot(self.device)["allocated"]
        gc.disable()
        try:
            clock = CallClock(self.device).start()
            output = engine(self.workload.batches, clock)
            clock.stop()
        finally:
            gc.enable()
        return clock, output, start_allocated

    def _measure(self, engine, cycle: int, phase: str, index: int) -> Call:
        clock, output, start_allocated = self._timed(engine)
        total_ms, breakdown = clock.total_ms, clock.breakdown
        tokens = self.workload.requests * self.params.max_new_tokens
        call = Call(engine.name, engine.policy, cycle, phase, index, total_ms, breakdown, output.captures,
                    {**memory.snapshot(self.device), "phase_start_allocated": start_allocated},
                    tokens, tokens / (total_ms / 1e3) if total_ms > 0 else None, None,
                    {"parameter_check": engine.last_check, "timing_check": clock.overlap_check(breakdown)})
        if clock.other_split is not None:
            call.extra["other_split"] = clock.other_split
        notes = engine.call_notes()
        if notes:
            call.extra["engine_notes"] = notes
        with self._untimed("parity"):
            output = output.to_cpu()
            call.extra["tokens_sha256"] = parity.tokens_hash(output)
            self.latest = output
            if self._reference is None:
                self._pending.append((call, output))
            else:
                call.parity = self._compare(call, output)
        self.calls.append(call)
        return call

    def _compare(self, call: Call, output: RolloutOutput) -> Parity:
        checked = Parity.from_dict(parity.compare(output, self._reference, self._request_ids))
        # generate() against generate() checks determinism, not the engine's own code: said so.
        checked.extra["reference"] = ("repeat of generate() (determinism)" if call.engine == "eager"
                                      else "generate() with the same weights")
        before = self._reference_before_update
        if not checked.ok and before is not None and call.phase.endswith("after_update"):
            # A stale replay computes with the weights before the sync: say whether it reproduced them.
            checked.extra["matches_weights_before_update"] = bool(
                parity.compare(output, before, self._request_ids)["tokens"])
        return checked

    def _phase(self, cycle: int, phase: str, samples: int) -> None:
        """`samples` rounds; in each, every engine still running makes one call, in the round's turn order."""
        running = list(self.engines)
        self.collector.full()  # what set-up, an update or a reference left (collection.py)
        for index in range(samples):
            for engine in turns(running, self.params.turn_order, index, self.rounds_done + index):
                try:
                    self._measure(engine, cycle, phase, index)
                    self.bar.step(f"c{cycle} {phase} {engine.variant}")
                except Exception as err:  # a phase that cannot run (out of memory, say) is recorded, not hidden
                    self.failures.append(_failure(engine, cycle, phase, err))
                    running.remove(engine)
                    if self.device.type == "cuda":
                        torch.cuda.empty_cache()
        self.rounds_done += samples
        self.collector.full(cycle, phase)  # what the calls left that the young collections did not free

    def _settle_reference(self, cycle: int) -> None:
        """Compute generate()'s reference for the current weights and check the calls that waited for it.

        If the reference cannot be computed (out of memory, say) the failure is recorded and the
        waiting calls keep no parity, so the run is invalid but its measurements are kept.
        """
        previous = self._previous_reference
        try:
            with self._untimed("reference"):
                self._reference = reference(self.model, self.workload.batches, self.params.max_new_tokens,
                                            self.loaded.pad_token_id, self.device)
        except Exception as err:
            self.failures.append(_failure(None, cycle, "reference", err))
            self._pending = []
            return
        self._previous_reference = self._reference
        self._reference_before_update = previous
        if previous is not None and self.updates:
            # Parity after a sync proves the graphs read the new weights only if the new weights
            # give other tokens: recorded, so a kept graph is called valid only where it was put to the test.
            self.updates[-1].extra["requests_changed"] = parity.requests_changed(previous.output,
                                                                                self._reference.output)
        with self._untimed("parity"):
            for call, output in self._pending:
                call.parity = self._compare(call, output)
        self._pending = []

    def _profile(self, cycle: int, phase: str) -> None:
        for engine in self.engines:
            try:
                clock = CallClock(self.device).start()  # before the profiler: its start event is no work profiled
                measured = profile_call(lambda: engine(self.workload.batches, clock), self.device)
                self.profiles.append(Profile(engine.name, engine.policy, cycle=cycle, phase=phase, **measured))
            except Exception as err:
                self.failures.append(_failure(engine, cycle, f"profile:{phase}", err, with_traceback=False))

    def _instrument(self) -> None:
        """Instrumented calls of engines that have an instrument, in turns with untouched ones."""
        self.collector.full()
        for engine in [e for e in self.engines if hasattr(e, "instrumented")]:
            untouched, instrumented = [], []
            for _ in range(INSTRUMENT_ROUNDS):
                untouched.append(self._timed(engine)[0].total_ms)
                engine.instrumented = True
                try:
                    clock = self._timed(engine)[0]
                finally:
                    engine.instrumented = False
                instrumented.append((clock.total_ms, clock.breakdown))
            totals = sorted(instrumented, key=lambda item: item[0])
            median_total, median_parts = totals[(len(totals) - 1) // 2]
            self.instrumented.append({
                "engine": engine.name, "policy": engine.policy, "untouched_ms": untouched,
                "instrumented_ms": [t for t, _ in instrumented], "breakdown_ms": median_parts,
                "instrument_cost_ms": median_total - sorted(untouched)[(len(untouched) - 1) // 2]})

    def _update(self, cycle: int, control: bool) -> None:
        # Calls still waiting belong to weights whose reference failed: they keep no parity, and must
        # never be checked against the next weights' reference.
        self._pending = []
        source = self.latest or (self._reference.output if self._reference else None)
        try:
            if source is None:
                raise RuntimeError("no rollout to train on: every call before this update failed")
            stats = self.trainer.update(source, apply=not control)
            applied = True
        except Exception as err:  # a non-finite or out-of-memory update is recorded (the run is invalid)
            self.failures.append(_failure(None, cycle, "update", err,
                                          with_traceback=not isinstance(err, training.NonFiniteUpdate)))
            # Refused before its write, an update left the rollout weights as they were; one refused
            # after it (in-place, lora-merge) changed them, and is recorded as applied.
            stats, applied = {"loss": None, "ms": None}, bool(getattr(err, "weights_changed", False))
        # After a reload the rollout model is a new object: the study, the reference and every engine read it.
        self.model = self.loaded.model = self.trainer.rollout_model
        timing = {key: stats[key] for key in ("step_ms", "sync_ms", "change") if key in stats}
        self.updates.append(Update(cycle, self.params.optimizer, self.params.lr, stats["loss"], stats["ms"],
                                   {"control": control, "applied": applied, "update_path": self.params.update_path,
                                    **timing}))
        for engine in self.engines:
            engine.weights_updated(self.model)
        self._reference = None  # the weights (may have) changed: the next calls wait for a new reference

    def schedule(self) -> list[tuple[int, bool]]:
        """(cycle, control) in run order."""
        return self.params.update_schedule()

    # -- the run ------------------------------------------------------------------------------
    def run(self) -> Result:
        params = self.params
        started = environment.now()
        clocks_at_start = environment.gpu_clocks()
        startup_ms = environment.process_age_ms()
        self.host_speed = {"start": host_speed.measure()}
        self.device = torch.device(params.resolved_device())
        self.collector = Collector(self.device, self.untimed_ms)
        dtype = params.resolved_dtype(self.device.type)
        # Before the model loads, while the device is free; only the profiling process, whose profiles
        # are its only output, so no measured call ever follows gigabytes of copies in its process.
        self.bandwidth = bandwidth.measure(self.device) if self.mode == "profile" else None
        self.tracing = tracing.measure(self.device) if self.mode == "profile" else None
        import_done = time.perf_counter()
        self.loaded = models.load(params, self.device.type, dtype)
        self.model = self.loaded.model
        load_ms = (time.perf_counter() - import_done) * 1e3
        self.workload = build_workload(params, self.loaded)
        # From here on prompt_len is the one the prompts were padded to ("auto" resolved).
        self.requested_prompt_len = params.prompt_len
        self.params = params = dataclasses.replace(params, prompt_len=self.workload.prompt_len)
        positions = self.loaded.info.get("max_positions")
        if positions:
            params.check_positions(int(positions))
        if self.device.type == "cuda":
            pin(self.workload)
        self._request_ids = [b.request_ids for b in self.workload.batches]
        grad_was = torch.is_grad_enabled()
        torch.set_grad_enabled(False)
        self.engines = []
        try:
            # The trainer first: lora-merge wraps the rollout model's layers, and engines capture what they read.
            self.trainer = training.Trainer(self.model, params, self.device)
            self.model = self.loaded.model = self.trainer.rollout_model
            init_ms = initialize(self.model, self.workload, self.device)
            self.engines = expand(params, self.loaded, self.device)
            schedule = self.schedule()
            steady = PROFILE_ROUNDS if self.mode == "profile" else self.params.iterations
            per_engine = 1 if self.mode == "first_only" else (1 + steady) * (1 + len(schedule))
            self.bar = Progress(per_engine * len(self.engines), self.progress_enabled)
            try:
                self._phase(0, "first", 1)
                self._settle_reference(0)
                if self.mode != "first_only":
                    self._phase(0, "steady", steady)
                    if self.mode == "profile":
                        self._profile(0, "steady")
                    for cycle, control in schedule:
                        with self._untimed("update"):
                            self._update(cycle, control)
                        self._phase(cycle, "first_after_update", 1)
                        self._settle_reference(cycle)
                        self._phase(cycle, "steady_after_update", steady)
                        if self.mode == "profile":
                            self._profile(cycle, "steady_after_update")
                    if self.mode == "measure" and params.instrument and self._reference is not None:
                        try:
                            self._instrument()
                        except Exception as err:
                            self.failures.append(_failure(None, None, "instrumented calls", err))
            finally:
                self.bar.close()
        finally:
            for engine in self.engines:
                engine.close()
            torch.set_grad_enabled(grad_was)
        self.host_speed["end"] = host_speed.measure()
        return run_record.result(self, started, dtype, {"process_startup_ms": startup_ms, "model_load_ms": load_ms,
                                                        "initialization_ms": init_ms}, clocks_at_start)


def run_in_process(params: StudyParams, progress: bool = False, command: str | None = None,
                   mode: str = "measure") -> Result:
    return Study(params, progress, command, mode).run()
