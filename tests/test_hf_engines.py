"""The Hugging Face peers (hf-compile, hf-continuous) on the CPU: in a study, against generate(), and their parts.

hf-compile compiles with the `eager` backend here (dynamo traces, no kernels are generated), so the
compile path and torch's counters are the real ones without inductor's build time. On the CPU no
CUDA graph exists: inductor's recordings and the continuous-batching graphs are checked by
tests/test_cuda.py on a GPU.
"""
from __future__ import annotations

import gc
import logging
import re
import types

import pytest
import torch
from transformers import ContinuousBatchingConfig

from rollout_study import hazards, parity
from rollout_study.engines import hf_compile, hf_continuous
from rollout_study.engines.hf_compile import HFCompileEngine, compile_config
from rollout_study.param_values import ParameterError
from rollout_study.params import StudyParams
from rollout_study.reference import reference
from rollout_study.timing import CallClock
from rollout_study.workload import random_workload

SMALL = {"name": "hf-peers", "device": "cpu", "layers": 1, "requests": 4, "batch_size": 4, "prompt_len": 8,
         "max_new_tokens": 3, "iterations": 2, "cycles": 1, "profile": False, "compile_backend": "eager",
         "lr": 1.0}  # large enough that the update changes the tokens of the 1-layer model


@pytest.fixture(scope="module")
def peers_study():
    """One study with both peers and a reload (a new model object) as the update; dynamo starts empty,
    because its cache is process-wide and an earlier compile of the same code would be reused."""
    from rollout_study.protocol import run_in_process

    torch._dynamo.reset()
    # generate() runs anyway, as the parity reference; the eager engine would only add calls.
    params = StudyParams.from_dict({**SMALL, "engines": ["hf-compile", "hf-continuous"], "update_path": "reload"})
    return run_in_process(params)


def _notes(result, engine, phase):
    return [c.extra["engine_notes"] for c in result.calls if c.engine == engine and c.phase == phase]


def test_both_peers_are_valid_with_parity_on_every_call(peers_study):
    result = peers_study
    assert result.is_valid and not result.failures
    assert result.variants() == ["hf-compile", "hf-continuous"]
    assert all(c.parity_ok for c in result.calls) and len(result.calls) == 2 * (1 + 2) * 2
    assert result.updates[0].extra["requests_changed"] > 0  # parity after the reload could tell old from new
    described = {e["engine"]: e for e in result.metadata["engines"]}
    assert described["hf-compile"]["cache"] == "static" and described["hf-compile"]["compile_backend"] == "eager"
    assert described["hf-compile"]["cuda_graph"] is False and described["hf-compile"]["compiles_on_cpu"]
    # eager takes no mode and no options: none is reported as if it had been applied
    assert described["hf-compile"]["compile_mode"] is None and described["hf-compile"]["compile_options"] is None
    assert described["hf-compile"]["emulate_precision_casts"] is False
    assert described["hf-continuous"]["cuda_graph"] is False and "no CUDA" in described["hf-continuous"]["graph_note"]


def test_compile_time_is_its_own_part_on_the_first_call_only(peers_study):
    calls = [c for c in peers_study.calls if c.engine == "hf-compile"]
    first, rest = calls[0], calls[1:]
    assert first.phase == "first" and first.breakdown_ms["compile"] > 0
    assert first.breakdown_ms["compile"] < first.total_ms
    assert all(c.breakdown_ms["compile"] == 0 for c in rest)
    (notes,) = _notes(peers_study, "hf-compile", "first")
    assert notes["refresh"] == "compiled" and notes["dynamo_compiles"] >= 1
    assert notes["in_call"]["frames_compiled"] >= 1 and notes["process_total"]["unique_graphs"] >= 1
    assert notes["compile_ms"] == pytest.approx(first.breakdown_ms["compile"])
    assert notes["recompile_limit"] == torch._dynamo.config.recompile_limit and not notes["recompile_limit_hit"]
    assert not notes["cudagraphs_skipped"]  # no CUDA graph to skip on the CPU


def test_a_reload_is_read_by_the_same_compiled_code_without_a_recompile(peers_study):
    # What torch 2.13 does: dynamo guards the parameters' properties, not the module object, so the
    # new model passes the guards and its parameters enter the cached graph as inputs.
    (after,) = _notes(peers_study, "hf-compile", "first_after_update")
    assert after["after_update"] == "new model object"
    assert after["dynamo_compiles"] == 0 and after["in_call"]["frames_compiled"] == 0
    assert after["refresh"] == "kept"
    assert all(n["refresh"] == "kept" and n["after_update"] is None
               for n in _notes(peers_study, "hf-compile", "steady_after_update"))


def test_the_continuous_manager_lives_across_calls_and_is_rebuilt_after_an_update(peers_study):
    calls = [c for c in peers_study.calls if c.engine == "hf-continuous"]
    notes = [c.extra["engine_notes"] for c in calls]
    assert [n["refresh"] for n in notes] == ["rebuilt", "kept", "kept", "rebuilt", "kept", "kept"]
    assert notes[-1]["managers_built"] == 2 and notes[3]["after_update"] == "new model object"
    assert all(n["gc_ms"] >= 0 for n in notes)  # generate_batch collects garbage on every call: measured
    assert calls[0].breakdown_ms["allocation"] > 0 and calls[1].breakdown_ms["allocation"] == 0


def test_the_hazard_matrix_gives_peers_cells_of_their_own(peers_study):
    cells = {c.policy: c for c in hazards.matrix([peers_study])}
    assert set(cells) == {"hf-compile", "hf-continuous"}  # no graph engine ran: no policy cells
    assert cells["hf-compile"].verdict == "kept and valid (no CUDA graph)" and cells["hf-compile"].peer
    assert cells["hf-compile"].compiles == (0,) and cells["hf-compile"].recordings == (0,)
    assert cells["hf-continuous"].verdict == "rebuilt (no CUDA graph)" and cells["hf-continuous"].compiles == (None,)
    assert hazards.problems(list(cells.values())) == [] and hazards.proven_right(list(cells.values())) == []


@pytest.fixture
def small_model(tiny):
    params, loaded = tiny(layers=1)
    return params, loaded.model


def _call(engine, workload):
    clock = CallClock("cpu").start()
    out = engine(workload.batches, clock)
    clock.stop()
    return out, clock


def test_hitting_dynamos_recompile_limit_is_recorded_and_tokens_stay_right(small_model, monkeypatch):
    """Two batch shapes need two graphs; with a limit of one, dynamo gives up on the second shape and
    runs it uncompiled. The notes must say so; the tokens stay generate()'s."""
    params, model = small_model
    torch._dynamo.reset()
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 1)
    workload = random_workload(3, 2, 8, params.vocab, seed=5)  # batches of 2 and 1
    engine = HFCompileEngine(model, "cpu", 3, 0, backend="eager")
    out, clock = _call(engine, workload)
    notes = engine.call_notes()
    assert notes["dynamo_compiles"] == 1 and notes["in_call"]["frames_compiled"] == 2
    assert notes["recompile_limit"] == 1 and notes["recompile_limit_hit"]
    assert clock.breakdown["compile"] > 0
    ref = reference(model, workload.batches, 3, 0, "cpu")
    assert parity.compare(out, ref, [b.request_ids for b in workload.batches])["ok"]
    _call(engine, workload)  # dynamo runs that shape uncompiled from now on: every later call says so
    notes = engine.call_notes()
    assert notes["recompile_limit_hit"] and notes["in_call"]["recompile_limit_hits"] == 0


def test_compile_configs_are_what_users_get_plus_what_the_cpu_needs():
    inductor = compile_config("inductor", torch.device("cuda"))
    assert inductor.backend == "inductor" and inductor.mode is None
    assert inductor.options == {**torch._inductor.list_mode_options("reduce-overhead"), "emulate_precision_casts": True}
    assert not inductor._compile_all_devices  # generate() compiles on CUDA without being told
    plain = compile_config("inductor", torch.device("cuda"), emulate_precision_casts=False)
    assert (plain.mode, plain.options) == ("reduce-overhead", None)
    cpu = compile_config("aot_eager", torch.device("cpu"))
    assert (cpu.backend, cpu.mode, cpu._compile_all_devices) == ("aot_eager", None, True)
    with pytest.raises(ValueError, match="compile_backend must be one of inductor, aot_eager, eager"):
        HFCompileEngine(None, "cpu", 3, 0, backend="tvm")


def test_left_padding_is_stripped_and_the_output_rebuilt_as_generate_returns_it():
    workload = random_workload(3, 2, 6, 100, seed=3)
    rows = [row for batch in workload.batches for row in hf_continuous.unpadded(batch)]
    assert [len(r) for r in rows] == workload.true_lengths
    for batch in workload.batches:
        for row, ids, mask in zip(hf_continuous.unpadded(batch), batch.input_ids, batch.attention_mask):
            assert row == ids[mask.bool()].tolist()
    tokens = [[7, 8], [9, 10], [11, 12]]
    out = hf_continuous.rebuild(workload.batches, tokens, 2)
    assert [s.shape for s in out.sequences] == [(2, 8), (1, 8)]
    assert torch.equal(out.sequences[1], torch.cat([workload.batches[1].input_ids, torch.tensor([[11, 12]])], 1))
    assert out.response_offsets == [[6, 6], [6]]
    assert torch.equal(out.attention_masks[0][:, 6:], torch.ones(2, 2, dtype=torch.long))
    holed = workload.batches[0]
    holed.attention_mask = holed.attention_mask.clone()
    holed.attention_mask[0, -1] = 0
    with pytest.raises(ValueError, match="is not a left padding"):
        hf_continuous.unpadded(holed)
    holed.attention_mask[0] = 0  # a request without a token: nothing to continue from, never an empty prompt
    with pytest.raises(ValueError, match="request 0's attention mask is not a left padding"):
        hf_continuous.unpadded(holed)


class _Output:
    def __init__(self, prompt, tokens, error=None):
        self.request_id, self.prompt_ids, self.generated_tokens, self.error = f"req_{prompt[0]}", prompt, tokens, error


def test_a_short_failed_missing_or_misplaced_request_is_an_error_never_padded_out():
    inputs = [[7], [8, 9]]
    good = {"req_0": _Output([7], [1, 2]), "req_1": _Output([8, 9], [3, 4])}
    assert hf_continuous.generated_tokens(good, inputs, 2) == [[1, 2], [3, 4]]
    with pytest.raises(RuntimeError, match="returned 1 of 2 requests"):
        hf_continuous.generated_tokens({"req_0": _Output([7], [1, 2])}, inputs, 2)
    with pytest.raises(RuntimeError, match="request 1 got 1 tokens, not max_new_tokens 2"):
        hf_continuous.generated_tokens({"req_0": _Output([7], [1, 2]), "req_1": _Output([8, 9], [3])}, inputs, 2)
    with pytest.raises(RuntimeError, match="request 0 failed: out of blocks"):
        hf_continuous.generated_tokens({"req_0": _Output([7], [], "out of blocks"), "req_1": _Output([8, 9], [3, 4])},
                                       inputs, 2)
    swapped = {"req_1": _Output([8, 9], [3, 4]), "req_0": _Output([7], [1, 2])}
    with pytest.raises(RuntimeError, match="result 0 .* answers another prompt than request 0"):
        hf_continuous.generated_tokens(swapped, inputs, 2)


def test_engine_names_are_checked_before_anything_runs():
    from rollout_study.engines import REGISTRY

    assert {"hf-compile", "hf-continuous"} <= set(REGISTRY)
    with pytest.raises(ParameterError, match=re.escape(f"engines must be a non-empty list drawn from "
                                                       f"{', '.join(REGISTRY)}; got ['eager', 'hf-compiled']")):
        StudyParams.from_dict({"engines": ["eager", "hf-compiled"]})
    with pytest.raises(ParameterError, match="compile_backend must be one of inductor, aot_eager, eager"):
        StudyParams.from_dict({"engines": ["hf-compile"], "compile_backend": "cudagraphs"})
    assert StudyParams().engines == ["eager", "graph"]  # the peers are opt-in


def _with_peer(path: str, refreshes: tuple, stale: bool = False):
    """A hand-made GPU hazard result of one path: graph[recapture] plus hf-compile with its notes."""
    from result_fixture import make_call
    from test_hazards import BAD, hazard_result

    data = hazard_result(path, {"recapture": "dropped"}).to_dict()
    for cycle, phase, samples in ((0, "first", 1), (0, "steady", 2), (0, "first_after_update", 1),
                                  (0, "steady_after_update", 2), (1, "first_after_update", 1),
                                  (1, "steady_after_update", 2)):
        for index in range(samples):
            call = make_call("hf-compile", cycle, phase, index, 50.0, True)
            first_after = phase == "first_after_update"
            refresh = refreshes[cycle] if first_after else ("compiled" if phase == "first" else "kept")
            call["engine_notes"] = {"refresh": refresh, "dynamo_compiles": int(refresh == "compiled"),
                                    "cudagraph_recordings": int(refresh in ("compiled", "recorded"))}
            if stale and phase.endswith("after_update"):
                call["parity"] = dict(BAD)
            data["calls"].append(call)
    from rollout_study.result import Result

    return Result.from_dict(data)


def test_peer_verdicts_and_counts_per_sync_from_hand_made_results():
    from rollout_study.present import hazards as report

    recorded = _with_peer("assign", ("recorded", "recorded"))
    cells = hazards.matrix([recorded])
    assert [(c.policy, c.peer) for c in cells] == [("recapture", False), ("hf-compile", True)]
    peer = cells[1]
    assert peer.verdict == "re-recorded" and peer.compiles == (0, 0) and peer.recordings == (1, 1)
    mixed = hazards.matrix([_with_peer("reload", ("compiled", "kept"))])[1]
    assert mixed.verdict == "mixed" and mixed.detail == "cycle 0: compiled, cycle 1: kept" and mixed.compiles == (1, 0)
    stale = hazards.matrix([_with_peer("cast", ("kept", "kept"), stale=True)])[1]
    assert stale.verdict == "STALE" and "weights before the sync" in stale.detail
    assert hazards.problems([stale]) == [] and hazards.demonstrated_stale([stale]) == []  # a finding, not our failure
    frame = report.matrix_table(cells)
    assert list(frame.columns) == ["update path", "recapture", "hf-compile"]
    full = report.cells_table(cells)
    assert full.set_index("policy").loc["hf-compile", "CUDA-graph recordings per sync"] == "1, 1"
    text = report.summary({"spec": {"name": "h"}}, [recorded])
    assert "recapture and reuse: 0 of 1 cells wrong" in text
    assert ("hf-compile after every sync (compiles / CUDA-graph recordings per sync): assign re-recorded "
            "(0, 0 / 1, 1)") in text


def test_a_peer_mismatch_that_is_not_the_old_weights_tokens_is_wrong_not_stale():
    # a peer has no decision to read: STALE only where parity found the tokens of the weights before the sync
    result = _with_peer("cast", ("kept", "kept"), stale=True)
    for call in result.calls:
        if call.variant == "hf-compile" and call.parity is not None:
            call.parity.extra["matches_weights_before_update"] = False
    peer = hazards.matrix([result])[1]
    assert peer.verdict == "WRONG" and "neither old nor new weights' tokens" in peer.detail


def test_compiles_of_other_code_between_calls_are_not_counted_as_the_engines(small_model):
    """torch's counters are process-wide: another engine compiling between two calls must not show
    in this engine's notes (in a study, graph-compiled compiles beside hf-compile)."""
    params, model = small_model
    torch._dynamo.reset()
    workload = random_workload(2, 2, 8, params.vocab, seed=6)
    engine = HFCompileEngine(model, "cpu", 3, 0, backend="eager")
    _call(engine, workload)
    first = engine.call_notes()
    torch.compile(lambda x: x * 2 + 1, backend="eager")(torch.ones(3))  # someone else's compile
    _call(engine, workload)
    second = engine.call_notes()
    assert second["process_total"]["frames_compiled"] > first["process_total"]["frames_compiled"]
    assert second["in_call"]["frames_compiled"] == 0 and second["dynamo_compiles"] == 0
    assert second["engine_total"]["frames_compiled"] == first["in_call"]["frames_compiled"]


def test_a_refresh_is_named_by_the_most_that_happened():
    # on CUDA a first call both compiles and records its graphs: that is a compile
    assert [hf_compile._refresh(*counts) for counts in ((1, 1), (1, 0), (0, 2), (0, 0))] == \
        ["compiled", "compiled", "recorded", "kept"]


def test_a_generate_that_returns_fewer_tokens_is_an_error(monkeypatch):
    workload = random_workload(2, 2, 6, 100, seed=3)

    def short(model, batch, max_new_tokens, *args, **kwargs):
        return torch.cat([batch.input_ids, torch.zeros(batch.size, max_new_tokens - 1, dtype=torch.long)], 1)

    monkeypatch.setattr(hf_compile, "generate", short)
    engine = HFCompileEngine(None, "cpu", 3, 0, backend="eager")
    with pytest.raises(RuntimeError, match="generate\\(\\) returned 2 new tokens, not max_new_tokens 3"):
        _call(engine, workload)


class _Manager:
    def __init__(self):
        self.batch_processor, self.destroyed = None, False
        self.continuous_batching_config = types.SimpleNamespace(cuda_graph_booleans=(False,), use_async_batching=False)

    def _create_batch_processor(self):
        return types.SimpleNamespace(cache=types.SimpleNamespace(num_blocks=4))

    def warmup(self):
        pass

    def destroy(self):
        self.destroyed = True


class _BatchingModel:
    """What hf-continuous calls of a model, as transformers 5.20 answers it: generate_batch uses the manager cached on
    the model and answers each prompt with its last token, repeated."""
    config = types.SimpleNamespace(_attn_implementation="sdpa")

    def init_continuous_batching(self, generation_config, continuous_batching_config):
        return _Manager()

    def destroy_cached_continuous_batching_manager(self):
        self.__dict__.pop(hf_continuous.MANAGER_ATTRIBUTE).destroy()

    def generate_batch(self, inputs, generation_config, continuous_batching_config, persistent_manager,
                       max_new_tokens, progress_bar):
        assert persistent_manager and hf_continuous.MANAGER_ATTRIBUTE in self.__dict__
        return {f"req_{i}": _Output(prompt, [prompt[-1]] * max_new_tokens) for i, prompt in enumerate(inputs)}


class _Wrapper:
    """A PEFT-like wrapper: generate_batch is the inner model's."""
    config = _BatchingModel.config

    def __init__(self, inner):
        self.inner, self.generate_batch = inner, inner.generate_batch


def test_a_stale_manager_is_dropped_from_the_model_it_was_cached_on_and_its_cache_released():
    workload = random_workload(3, 2, 6, 100, seed=3)
    old = _BatchingModel()
    engine = hf_continuous.HFContinuousEngine(_Wrapper(old), "cpu", 3, 6, 2, 0)
    out, _ = _call(engine, workload)
    assert [s[:, -1].tolist() for s in out.sequences] == [b.input_ids[:, -1].tolist() for b in workload.batches]
    first = engine.manager
    assert old.__dict__[hf_continuous.MANAGER_ATTRIBUTE] is first  # where the wrapped model's generate_batch looks
    new = _BatchingModel()
    engine.weights_updated(new)
    _call(engine, workload)
    assert engine.call_notes()["refresh"] == "rebuilt" and engine.call_notes()["after_update"] == "new model object"
    assert first.destroyed and first.batch_processor is None  # the paged cache released now, not at collection
    assert hf_continuous.MANAGER_ATTRIBUTE not in old.__dict__  # the old model holds no manager any more
    assert new.__dict__[hf_continuous.MANAGER_ATTRIBUTE] is engine.manager
    _call(engine, workload)
    assert engine.call_notes()["refresh"] == "kept" and engine.call_notes()["after_update"] is None
    engine.close()
    assert hf_continuous.MANAGER_ATTRIBUTE not in new.__dict__


def test_closing_the_engine_takes_its_warning_filter_off_transformers_logger():
    from transformers.generation.continuous_batching.requests import logger

    engine = hf_continuous.HFContinuousEngine(_Wrapper(_BatchingModel()), "cpu", 3, 6, 2, 0)
    assert hf_continuous._not_the_persistent_warning in logger.filters
    engine.close()
    assert hf_continuous._not_the_persistent_warning not in logger.filters


def test_a_manager_generate_batch_does_not_keep_is_an_error():
    class Forgetful(_BatchingModel):
        def generate_batch(self, inputs, *args, **kwargs):
            results = super().generate_batch(inputs, *args, **kwargs)
            del self.__dict__[hf_continuous.MANAGER_ATTRIBUTE]
            return results

    engine = hf_continuous.HFContinuousEngine(Forgetful(), "cpu", 2, 6, 2, 0)
    with pytest.raises(RuntimeError, match="generate_batch did not keep the engine's manager"):
        _call(engine, random_workload(2, 2, 6, 100, seed=3))
    engine.close()


def test_the_manager_is_sized_for_the_workload():
    page = ContinuousBatchingConfig().page_size
    # prompt and tokens need two pages a request; twice the blocks the requests need
    engine = hf_continuous.HFContinuousEngine(_BatchingModel(), "cpu", 3, page, 1, 0)
    assert engine.describe()["sizes"] == {"page_size": page, "num_blocks": 2 * 3 * 2, "max_batch_tokens": 3 * page,
                                          "max_requests_per_batch": 3}
    engine.close()


def test_only_the_persistent_manager_warning_is_dropped_and_gc_time_only_while_entered():
    def record(message):
        return logging.LogRecord("transformers", logging.WARNING, __file__, 1, message, None, None)

    assert not hf_continuous._not_the_persistent_warning(record(hf_continuous.PERSISTENT_WARNING + ", the manager"))
    assert hf_continuous._not_the_persistent_warning(record("Request req_0 ran out of blocks"))
    with hf_continuous.GcTime() as collector:
        gc.collect()
    assert collector.seconds > 0
    spent = collector.seconds
    gc.collect()
    assert collector.seconds == spent
