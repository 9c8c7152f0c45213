"""CUDA-only checks of the graph engines: capture, replay timing, refresh after updates, stale replays,
length buckets, and graph-compiled with inductor.

Skipped without a GPU (CI has none); run on the lent H200 with `pytest -m cuda`, and their output
is committed beside the reports.
"""
from __future__ import annotations

import time

import pytest
import torch

from rollout_study import parity, training
from rollout_study.engines.graph import GraphEngine
from rollout_study.engines.graph_compiled import GraphCompiledEngine
from rollout_study.engines.static_runner import decode_limits
from rollout_study.params import StudyParams
from rollout_study.reference import reference
from rollout_study.timing import CallClock
from rollout_study.workload import random_workload

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
NEW = 16


def _setup(dtype: str):
    from rollout_study import models

    params = StudyParams.from_dict({"device": "cuda"})
    loaded = models.load(params, "cuda", dtype)
    workload = random_workload(8, 4, 32, params.vocab, seed=7)
    return loaded.model, workload


@pytest.fixture
def setup():
    return _setup("float16")


@pytest.fixture
def setup_fp32():
    """For tests that read staleness off parity after a real update. The tiny model's near-uniform logits
    tie in FP16 (params/sweep-h200.yaml), and the update need not be bit-reproducible on the GPU (attention's
    backward may accumulate with atomics), so in FP16 a fresh graph can leave generate()'s tokens at a tie
    in one run and not the next: a possible cause of the one failure of the assign case (2026-12-02, its
    traceback lost to a later abort; it passed in the rerun and in the run before). In FP32 no engine has
    left generate()'s tokens on this model."""
    return _setup("float32")


def _call(engine, workload):
    clock = CallClock("cuda").start()
    out = engine(workload.batches, clock)
    clock.stop()
    return out.to_cpu(), clock


def _matches(model, engine, workload) -> dict:
    out, _ = _call(engine, workload)
    ref = reference(model, workload.batches, NEW, 0, "cuda")
    return parity.compare(out, ref, [b.request_ids for b in workload.batches])


def test_capture_then_replays_reproduce_generate_and_time_on_events(setup):
    model, workload = setup
    engine = GraphEngine(model, "cuda", "recapture", 32, NEW)
    first, clock = _call(engine, workload)
    assert first.captures == 2 and clock.breakdown["capture"] > 0 and clock.breakdown["warmup"] > 0
    out, clock = _call(engine, workload)
    assert out.captures == 0 and clock.breakdown["capture"] == 0
    assert clock.breakdown["decode"] > clock.breakdown["prefill"] > 0
    assert not clock.overlap_check(clock.breakdown)["flagged"]
    assert _matches(model, engine, workload)["ok"]


def test_device_parts_reuse_the_events_of_the_call_before():
    """A call's timing events are the ones an earlier call read and gave back: none is created (the CUDA event
    behind it made at its first record) inside a measured call once one call has run."""
    x = torch.randn(256, 256, device="cuda")

    def timed():
        clock = CallClock("cuda").start()
        for part in ("prefill", "decode"):
            with clock.device_part(part):
                x @ x
        used = [event for _, begin, end in clock._events for event in (begin, end)]  # held: ids stay unique
        clock.stop()
        return used, clock

    timed()
    used, clock = timed()
    again, _ = timed()
    assert len({id(event) for event in used}) == 4 and {id(e) for e in again} == {id(e) for e in used}
    assert clock.breakdown["prefill"] > 0 and clock.breakdown["decode"] > 0
    assert not clock.overlap_check(clock.breakdown)["flagged"]


def test_other_is_split_where_the_device_waited_for_the_host():
    """Host sleeps before, between and after two device parts: each lands in its own share of `other`, which the
    three make up; a call with a synchronized host part gets no split (no event sees that host time)."""
    x = torch.randn(256, 256, device="cuda")
    waits = {"before_first_part_ms": 30.0, "between_parts_ms": 20.0, "after_last_part_ms": 10.0}
    CallClock("cuda").start().stop()  # a start event in the pool (the parts' events are made inside their parts)
    clock = CallClock("cuda").start()
    time.sleep(waits["before_first_part_ms"] / 1e3)
    with clock.device_part("prefill"):
        x @ x
    time.sleep(waits["between_parts_ms"] / 1e3)
    with clock.device_part("decode"):
        x @ x
    time.sleep(waits["after_last_part_ms"] / 1e3)
    _, parts = clock.stop()
    split = clock.other_split
    assert sum(split.values()) == pytest.approx(parts["other"], abs=1e-6)
    for key, slept in waits.items():  # each at least its sleep, and short of the next larger one
        assert slept <= split[key] < slept + 10, split
    mixed = CallClock("cuda").start()
    with mixed.part("capture"):
        x @ x
    with mixed.device_part("decode"):
        x @ x
    mixed.stop()
    assert mixed.other_split is None


@pytest.mark.parametrize("flavour", ["foreach", "fused"])
def test_both_policies_follow_fused_and_foreach_optimizers(setup, flavour):
    model, workload = setup
    engines = {p: GraphEngine(model, "cuda", p, 32, NEW) for p in ("recapture", "reuse")}
    for engine in engines.values():
        _call(engine, workload)
    params = StudyParams.from_dict({"device": "cuda", "update_path": "in-place", "optimizer_impl": flavour})
    rollout = reference(model, workload.batches, NEW, 0, "cuda").output
    training.Trainer(model, params, "cuda").update(rollout)
    for engine in engines.values():
        engine.weights_updated(model)
    assert engines["recapture"].decide() == "drop"  # told, whatever the version counters say
    assert engines["reuse"].decide() == "kept"
    for engine in engines.values():
        assert _matches(model, engine, workload)["ok"], engine.policy


def test_recapture_after_a_drop_and_a_stale_replay_when_the_check_is_bypassed(setup):
    model, workload = setup
    engine = GraphEngine(model, "cuda", "reuse", 32, NEW)
    _call(engine, workload)
    state = {k: v.clone() * 1.5 for k, v in model.state_dict().items()}
    model.load_state_dict(state, assign=True)  # new storage: the captured graphs read the old memory
    stale = GraphEngine.__new__(GraphEngine)
    stale.__dict__.update(engine.__dict__)
    stale.decide = lambda: "unchanged"  # the control: the check disabled on purpose
    stale_result = _matches(model, stale, workload)
    assert not stale_result["tokens"] and stale_result["mismatch"]["kind"] == "tokens"
    engine.weights_updated()
    assert engine.decide() == "drop"
    out, clock = _call(engine, workload)
    assert out.captures == 2 and clock.breakdown["capture"] > 0
    assert _matches(model, engine, workload)["ok"]


def test_static_cache_is_cleared_beyond_the_prompt(setup):
    model, workload = setup
    engine = GraphEngine(model, "cuda", "recapture", 32, NEW)
    _call(engine, workload)
    for runner in engine.runners.values():
        for tensor in (*runner.cache.keys, *runner.cache.values):
            tensor[:, :, 32:].fill_(float("inf"))  # what an earlier FP16 overflow can leave behind
    assert _matches(model, engine, workload)["ok"]


# After two syncs by each path: which policies replayed stale graphs (STALE) on a real GPU.
STALE_UNDER = {
    "in-place": set(), "copy": set(), "data-copy": set(), "load-state-dict": set(), "lora-merge": set(),
    "assign": {"unchecked", "version-only"},  # new storage; the second sync leaves every version at 0
    "reload": {"unchecked", "version-only"},
    "move": {"unchecked"},  # new storage on the way back; the write bumps the versions
    "cast": {"unchecked"},  # new storage (the old is kept while diagnostics run); the write bumps the versions
}


@pytest.mark.parametrize("path", list(STALE_UNDER))
def test_each_update_path_under_each_policy(setup_fp32, path):
    """recapture and reuse match generate() after every sync; the weaker checks replay stale graphs where expected."""
    model, workload = setup_fp32
    params = StudyParams.from_dict({"device": "cuda", "update_path": path, "policy": "all", "lr": 0.05})
    trainer = training.Trainer(model, params, "cuda")
    model = trainer.rollout_model
    engines = {p: GraphEngine(model, "cuda", p, 32, NEW) for p in params.policies}
    for engine in engines.values():
        _call(engine, workload)
    stale = set()
    for _ in range(2):
        before = reference(trainer.rollout_model, workload.batches, NEW, 0, "cuda")
        trainer.update(before.output)
        for engine in engines.values():
            engine.weights_updated(trainer.rollout_model)
        after = reference(trainer.rollout_model, workload.batches, NEW, 0, "cuda")
        assert parity.requests_changed(before.output, after.output) > 0  # parity can tell old from new
        for policy, engine in engines.items():
            out, _ = _call(engine, workload)
            if not parity.compare(out, after, [b.request_ids for b in workload.batches])["ok"]:
                stale.add(policy)
    assert stale == STALE_UNDER[path]


def test_copy_bandwidth_on_the_device_agrees_with_a_synchronized_host_clock():
    from rollout_study import bandwidth

    events = bandwidth.copy_bandwidth("cuda")
    assert events["buffer_bytes"] >= 2 ** 30 and len(events["samples_ms"]) == bandwidth.REPEATS
    assert events["gb_per_s"] == events["best_gb_per_s"] >= events["median_gb_per_s"] > 0
    assert "CUDA events" in events["method"] and events["device"] == torch.cuda.get_device_name()
    # The same copies between synchronized host clock readings: launch and synchronization only add time,
    # so the host's best is at most the events' (a small tolerance for clock granularity), and not far below.
    host = bandwidth.copy_bandwidth("cuda", timer=bandwidth.host_timer(torch.device("cuda")))
    assert 0.5 * events["best_gb_per_s"] <= host["best_gb_per_s"] <= 1.02 * events["best_gb_per_s"]
    assert torch.cuda.memory_allocated() < 2 ** 30  # both buffers released before anything else runs


def test_the_profiler_records_every_kernel_of_each_replay_of_the_tracing_check():
    from rollout_study import tracing

    records = tracing.measure("cuda")
    assert [r["kind"] for r in records] == list(tracing.KINDS)
    for record in records:
        assert "error" not in record, record
        # every step's kernels seen by the profiler inside the graph (one each, two for a split-K product)
        assert record["steps"] == tracing.STEPS and record["kernels"] == tracing.STEPS * record["kernels_per_step"]
        assert record["kernels_per_step"] == 1 or record["kind"] == "gemv"
        assert len(record["replay_us_per_kernel_samples"]) == tracing.REPLAYS
        assert len(record["recorded_us_per_kernel_samples"]) == tracing.PROFILED
        assert 0 < record["replay_us_per_kernel"] < 100 and 0 < record["recorded_us_per_kernel"] < 100
        # launched one at a time, the same kernels, as many of them (each step waited for)
        assert len(record["alone_us_per_kernel_samples"]) == tracing.PROFILED
        assert 0 < record["alone_us_per_kernel"] < 100
        print("tracing:", {k: v for k, v in record.items() if k != "replay_us_per_kernel_samples"})


def test_the_profiling_process_records_bandwidth_parameter_bytes_and_a_floor_below_the_kernels():
    from rollout_study import floors, tracing
    from rollout_study.protocol import run_in_process

    params = StudyParams.from_dict({"device": "cuda", "requests": 4, "batch_size": 2, "max_new_tokens": 8,
                                    "iterations": 2, "cycles": 1})
    result = run_in_process(params, mode="profile")
    assert result.extra["bandwidth"]["gb_per_s"] > 0 and result.metadata["model"]["parameter_bytes"] > 0
    assert [r["kind"] for r in result.extra["tracing"]] == list(tracing.KINDS)
    rows = floors.floor_rows(result)
    assert {row.variant for row in rows} == {"eager", "graph[recapture]"} and not floors.floor_of(result).absent
    for row in rows:
        assert row.steps == 2 * 8 and row.kernels_per_step > 1
        # Kernels cannot beat streaming the weights once per step: the floor is below them, and the wall above them.
        assert row.kernel_over_floor > 1 and row.wall_ms > row.kernel_ms
    # The graph's steady calls are all device parts: their `other` is split; generate()'s calls have no parts.
    from rollout_study.present import other_split
    steady = {v: result.calls_of(v, 0, "steady") for v in ("eager", "graph[recapture]")}
    assert all("other_split" not in c.extra for c in steady["eager"])
    for call in steady["graph[recapture]"]:
        assert sum(call.extra["other_split"].values()) == pytest.approx(call.breakdown_ms["other"], abs=1e-6)
    assert [row[0] for row in other_split.split_rows(result)] == ["graph[recapture]"]


def _in_place_update(model, workload):
    params = StudyParams.from_dict({"device": "cuda", "update_path": "in-place"})
    before = reference(model, workload.batches, NEW, 0, "cuda").output
    training.Trainer(model, params, "cuda").update(before)


def test_compiled_with_inductor_reproduces_generate_and_charges_compile_apart(setup):
    model, workload = setup
    engine = GraphCompiledEngine(model, "cuda", "reuse", 32, NEW, backend="inductor")
    assert engine.describe()["compile"]["inductor_options"] == {"triton.cudagraphs": False,
                                                                "emulate_precision_casts": True}
    first, clock = _call(engine, workload)
    notes = engine.call_notes()
    assert first.captures == 2 and clock.breakdown["compile"] > 0 and clock.breakdown["capture"] > 0
    assert notes["compile"]["compiled"] == ["prefill (batch 4)", f"decode[0:{32 + NEW}] (batch 4)"]
    assert notes["compile"]["compiles_in_rollout"] == 0 and not notes["compile"]["recompiled"]
    # the decode step's seven products per layer (4 rows) as reductions, and the vocabulary projection of both
    # steps (4 rows: the prefill's logits are the last position's); the prefill's layers (4 x 32 rows) left.
    # Each compile traced anew (AOTAutograd's cache, which would skip the tracing, is off for it).
    layers = model.config.num_hidden_layers
    matmuls = notes["compile"]["matmuls"]
    assert matmuls == {"as_reductions": 7 * layers + 2, "left_to_inductor": 7 * layers}, matmuls
    print("matrix products traced:", matmuls)
    out, clock = _call(engine, workload)
    assert out.captures == 0 and clock.breakdown["compile"] == clock.breakdown["capture"] == 0
    assert not clock.overlap_check(clock.breakdown)["flagged"]
    result = _matches(model, engine, workload)
    assert result["ok"], result["mismatch"]


def test_buckets_capture_one_decode_graph_each_with_its_time_and_pool_growth(setup):
    model, workload = setup
    engine = GraphEngine(model, "cuda", "recapture", 32, NEW, length_bucket=4)
    limits = decode_limits(32, NEW, 4)
    assert limits == [36, 40, 44, 48]
    first, _ = _call(engine, workload)
    captured = engine.call_notes()["captures"]
    assert first.captures == 1 + len(limits)
    assert [n["graph"] for n in captured] == ["prefill"] + [f"decode[0:{k}]" for k in limits]
    assert all(n["capture_ms"] > 0 and isinstance(n["pool_bytes"], int) and n["batch"] == 4 for n in captured)
    assert captured[0]["pool_bytes"] > 0  # a new pool takes its first segment
    print("captures per bucket:", captured)
    out, _ = _call(engine, workload)
    assert out.captures == 0 and engine.call_notes() == {}
    assert _matches(model, engine, workload)["ok"]
    engine.weights_updated(model)  # recapture: every bucket's graph again
    again, _ = _call(engine, workload)
    assert again.captures == 1 + len(limits) and len(engine.call_notes()["captures"]) == 1 + len(limits)
    assert _matches(model, engine, workload)["ok"]


def test_compiled_with_buckets_reproduces_generate_and_reuse_keeps_after_in_place(setup):
    model, workload = setup
    engine = GraphCompiledEngine(model, "cuda", "reuse", 32, NEW, length_bucket=8, backend="inductor")
    limits = decode_limits(32, NEW, 8)
    first, clock = _call(engine, workload)
    notes = engine.call_notes()
    assert first.captures == 1 + len(limits) and clock.breakdown["compile"] > 0
    assert notes["compile"]["graphs_compiled"] == 1 + len(limits)
    assert [n["graph"] for n in notes["captures"]] == ["prefill"] + [f"decode[0:{k}]" for k in limits]
    result = _matches(model, engine, workload)
    assert result["ok"], result["mismatch"]
    _in_place_update(model, workload)
    engine.weights_updated(model)
    assert engine.decide() == "kept"
    out, clock = _call(engine, workload)
    assert out.captures == 0 and clock.breakdown["compile"] == 0
    assert engine.call_notes()["compile"]["graphs_compiled"] == 0
    result = _matches(model, engine, workload)
    assert result["ok"], result["mismatch"]


@pytest.mark.parametrize("compiled", [False, True])
def test_several_steps_per_graph_capture_fewer_graphs_and_match_generate(setup, compiled):
    model, workload = setup
    kwargs = dict(length_bucket=8, steps_per_graph=0)
    engine = (GraphCompiledEngine(model, "cuda", "reuse", 32, NEW, backend="inductor", **kwargs) if compiled
              else GraphEngine(model, "cuda", "reuse", 32, NEW, **kwargs))
    limits = decode_limits(32, NEW, 8)  # [40, 48]: steps 1-8 in the first bucket, 9-15 in the second
    first, _ = _call(engine, workload)
    captured = engine.call_notes()["captures"]
    assert [(n["graph"], n["steps"]) for n in captured] == [("prefill", 1), (f"decode[0:{limits[0]}]x8", 8),
                                                            (f"decode[0:{limits[1]}]x7", 7)]
    assert first.captures == 3 and engine.runners[(4, torch.float16, engine.device)].step_graphs == [1, 2]
    result = _matches(model, engine, workload)
    assert result["ok"], result["mismatch"]
    _in_place_update(model, workload)
    engine.weights_updated(model)
    out, _ = _call(engine, workload)
    assert out.captures == 0
    result = _matches(model, engine, workload)
    assert result["ok"], result["mismatch"]


# -- the Hugging Face peers (hf-compile, hf-continuous) ------------------------------------------
def _peer_matches(model, engine, workload) -> tuple[dict, object]:
    out, clock = _call(engine, workload)
    ref = reference(model, workload.batches, NEW, 0, "cuda")
    return parity.compare(out, ref, [b.request_ids for b in workload.batches]), clock


def _nudge(model, scale: float = 0.05) -> None:
    """New weights, different enough that generate()'s tokens change (so parity can tell old from new)."""
    generator = torch.Generator(device="cuda").manual_seed(3)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator, device="cuda", dtype=param.dtype) * scale)


def test_hf_compile_compiles_records_and_matches_generate(setup):
    """inductor with CUDA graph trees: compile and recordings charged to their parts, counted in the notes."""
    from rollout_study.engines.hf_compile import HFCompileEngine

    model, workload = setup
    torch._dynamo.reset()  # the dynamo cache is process-wide: this test sees its own first compile
    engine = HFCompileEngine(model, "cuda", NEW, 0, backend="inductor")
    assert engine.describe()["cuda_graph"] == "inductor CUDA graph trees"
    assert engine.describe()["emulate_precision_casts"]
    first, clock = _peer_matches(model, engine, workload)
    notes = engine.call_notes()
    assert notes["dynamo_compiles"] >= 1 and clock.breakdown["compile"] > 0
    assert notes["cudagraph_recordings"] >= 1 and clock.breakdown["capture"] > 0  # the trees record during the call
    assert first["ok"], first["mismatch"]
    steady, clock = _peer_matches(model, engine, workload)
    assert engine.call_notes()["dynamo_compiles"] == 0 and clock.breakdown["compile"] == 0
    assert not engine.call_notes()["recompile_limit_hit"] and steady["ok"], steady["mismatch"]


def test_kernel_sums_agree_with_torch_and_leave_out_annotation_spans_but_see_no_compiled_call_spans(setup):
    """A steady hf-compile call profiled as `profile_call` profiles (no input shapes), inside a
    `record_function` range: the study's sums of the raw events equal torch's own over its parsed device
    events that are not user annotations; the range is on the device as an annotation span, left out;
    inductor's per-call "Call CompiledFxGraph" ranges are not spans at all (without input shapes torch
    keeps them as CPU ops), so the sums published before annotations were left out did not count them."""
    from torch.autograd import DeviceType

    from rollout_study.engines.hf_compile import HFCompileEngine
    from rollout_study.timing import device_totals

    model, workload = setup
    engine = HFCompileEngine(model, "cuda", NEW, 0, backend="inductor")
    _call(engine, workload)
    _call(engine, workload)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        with torch.profiler.record_function("rollout call"):
            _call(engine, workload)
    ours = device_totals(prof.profiler.kineto_results.events())
    device = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    spans = sorted({e.name for e in device if e.is_user_annotation})
    assert "rollout call" in spans and not any("CompiledFxGraph" in name for name in spans), spans
    kernels = [e for e in device if not e.is_user_annotation and not e.name.startswith(("Memcpy", "Memset"))]
    assert ours["kernels"] == len(kernels) > 0
    assert ours["kernel_ms"] == pytest.approx(sum(e.time_range.elapsed_us() for e in kernels) / 1e3, rel=1e-6)


@pytest.mark.parametrize("path", ["in-place", "assign"])
def test_hf_compile_reads_new_weights_after_a_write_and_after_new_storage(setup, path):
    """No stale replay: after an in-place write (same addresses) and after assign (new storage), the
    compiled rollout matches generate() with the new weights; the notes say what torch did."""
    from rollout_study.engines.hf_compile import HFCompileEngine

    model, workload = setup
    engine = HFCompileEngine(model, "cuda", NEW, 0, backend="inductor")
    _call(engine, workload)
    before = reference(model, workload.batches, NEW, 0, "cuda")
    if path == "assign":
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        model.load_state_dict(state, assign=True)
    _nudge(model)
    engine.weights_updated(model)
    result, _ = _peer_matches(model, engine, workload)
    after = reference(model, workload.batches, NEW, 0, "cuda")
    assert parity.requests_changed(before.output, after.output) > 0
    assert result["ok"], (result["mismatch"], engine.call_notes())
    assert engine.call_notes()["after_update"] == "same model object"


def test_hf_continuous_captures_its_graphs_and_matches_generate(setup):
    from rollout_study.engines.hf_continuous import HFContinuousEngine

    model, workload = setup
    engine = HFContinuousEngine(model, "cuda", workload.requests, 32, NEW, 0)
    try:
        first, clock = _peer_matches(model, engine, workload)
        assert engine.describe()["resolved"]["use_cuda_graph"] == [True, True]
        assert clock.breakdown["capture"] > 0 and engine.call_notes()["refresh"] == "rebuilt"
        assert first["ok"], first["mismatch"]
        steady, clock = _peer_matches(model, engine, workload)
        assert clock.breakdown["capture"] == 0 and engine.call_notes()["refresh"] == "kept"
        assert steady["ok"], steady["mismatch"]
        _nudge(model)
        engine.weights_updated(model)
        after, _ = _peer_matches(model, engine, workload)
        assert engine.call_notes()["refresh"] == "rebuilt" and after["ok"], after["mismatch"]
    finally:
        engine.close()


def test_a_named_shape_initializes_on_the_gpu_repeatably_and_the_tiny_model_as_on_the_host():
    """Named real shapes draw their random weights on the GPU (the 1B shape's host init took half a
    minute a sweep point); the same seed gives the same weights there, whatever the generators held
    before, and the load leaves the generators as it found them. The tiny model still draws on the
    host, so its weights are those of the published runs, whatever device it runs on."""
    from rollout_study import models

    named = StudyParams.from_dict({"device": "cuda", "model": "synthetic-smollm2-135m"})
    torch.manual_seed(99)
    states = torch.get_rng_state(), torch.cuda.get_rng_state()
    first = models.load(named, "cuda", "float32")
    assert torch.equal(torch.get_rng_state(), states[0]) and torch.equal(torch.cuda.get_rng_state(), states[1])
    torch.manual_seed(7)  # other generator states: the seed alone must fix the weights
    second = models.load(named, "cuda", "float32")
    assert first.info["init_device"] == "cuda" and first.info["init_gpu"] == torch.cuda.get_device_name()
    assert all(torch.equal(a, b) for a, b in zip(first.model.state_dict().values(), second.model.state_dict().values()))
    on_host = models.load(StudyParams.from_dict({"device": "cpu", "model": "synthetic-smollm2-135m"}), "cpu", "float32")
    embedding = "model.embed_tokens.weight"
    # Drawn on the GPU
    assert not torch.equal(first.model.state_dict()[embedding].cpu(), on_host.model.state_dict()[embedding])
    tiny = StudyParams.from_dict({"device": "cuda"})
    on_gpu = models.load(tiny, "cuda", "float32")
    on_host = models.load(StudyParams.from_dict({"device": "cpu"}), "cpu", "float32")
    assert on_gpu.info["init_device"] == "cpu" and "init_gpu" not in on_gpu.info
    assert all(torch.equal(a.cpu(), b)
               for a, b in zip(on_gpu.model.state_dict().values(), on_host.model.state_dict().values()))


def _workspace_case(mode: str) -> tuple[int, dict | None, str]:
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent
    # The package from this checkout, however the child's interpreter finds its own
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(here.parent), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(here / "workspace_child.py"), mode], capture_output=True, text=True,
                          timeout=600, cwd=here.parent, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, (json.loads(lines[-1]) if lines else None), done.stderr[-2000:]


def test_a_graphs_replay_survives_hf_compiles_clearing_of_cublas_workspaces():
    # The smoke sweep's corner points (batch 64; the 1B shape and SmolLM2) aborted with an illegal address:
    # the first graph replay after hf-compile and hf-continuous ran. The graphs' GEMMs keep the address of
    # the workspace cuBLAS had at capture; torch.compile's CUDA graph trees free every workspace. Each case
    # runs in its own process (tests/workspace_child.py).
    import warnings

    code, unprotected, err = _workspace_case("unprotected")
    if unprotected and "skip" in unprotected:
        pytest.skip(unprotected["skip"])
    # Whether the old capture's replay wrote into memory handed out again (or died of it): said either way,
    # not asserted (cuBLAS may choose GEMMs without a workspace at these shapes)
    warnings.warn(f"cuBLAS workspace, the capture as before: exit {code}, {unprotected or err[-300:]}")
    if code == 0 and unprotected and not unprotected["workspace_in_default_pool"]:
        pytest.skip("no cuBLAS workspace of the expected size seen in the default pool after the old capture: "
                    f"this test cannot see workspaces here ({unprotected})")
    code, protected, err = _workspace_case("protected")
    assert code == 0, err
    assert protected == {"mode": "protected", "captures": [2, 0], "workspace_in_default_pool": 0,
                         "junk_on_that_block": False, "same_tokens": True, "junk_written": 0}


def test_a_fork_server_child_runs_a_point_on_the_gpu_with_its_own_cuda():
    """The sweep's fork-server launcher on the GPU machine: the server's imports (torch, transformers, the
    package, as installed there) set up no CUDA, or its children would be refused; each child's study runs
    on the GPU with parity, and a second child from the same server does too. The caller has CUDA set up, as
    the sweep's parent has once it asked torch whether CUDA is there."""
    from rollout_study import forkserver

    torch.cuda.init()
    params = StudyParams.from_dict({"device": "cuda", "engines": ["eager", "graph"], "policy": "reuse",
                                    "max_new_tokens": 8, "requests": 2, "batch_size": 2, "iterations": 1,
                                    "cold_starts": 0, "profile": False, "instrument": False})
    for _ in range(2):  # the second child comes from the same server
        result = forkserver.run_forked(params, "measure")
        assert result.valid and result.metadata["device"] == "cuda"
        assert result.metadata["command"] == "fresh process (fork server)"
        assert {c.engine for c in result.calls} == {"eager", "graph"}
