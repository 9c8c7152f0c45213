"""CUDA-only checks of the graph engine: capture, replay timing, refresh after updates, stale replays.

Skipped without a GPU (CI has none); run on the lent H200 with `pytest -m cuda`, and their output
is committed beside the reports.
"""
from __future__ import annotations

import pytest
import torch

from rollout_study import parity, training
from rollout_study.engines.graph import GraphEngine
from rollout_study.params import StudyParams
from rollout_study.reference import reference
from rollout_study.timing import CallClock
from rollout_study.workload import random_workload

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
NEW = 16


@pytest.fixture
def setup():
    from rollout_study import models

    params = StudyParams.from_dict({"device": "cuda"})
    loaded = models.load(params, "cuda", "float16")
    workload = random_workload(8, 4, 32, params.vocab, seed=7)
    return loaded.model, workload


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
def test_each_update_path_under_each_policy(setup, path):
    """recapture and reuse match generate() after every sync; the weaker checks replay stale graphs where expected."""
    model, workload = setup
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
    assert engine.describe()["cuda_graph"] == "inductor CUDA graph trees" and engine.describe()["emulate_precision_casts"]
    first, clock = _peer_matches(model, engine, workload)
    notes = engine.call_notes()
    assert notes["dynamo_compiles"] >= 1 and clock.breakdown["compile"] > 0
    assert notes["cudagraph_recordings"] >= 1 and clock.breakdown["capture"] > 0  # the trees record during the call
    assert first["ok"], first["mismatch"]
    steady, clock = _peer_matches(model, engine, workload)
    assert engine.call_notes()["dynamo_compiles"] == 0 and clock.breakdown["compile"] == 0
    assert not engine.call_notes()["recompile_limit_hit"] and steady["ok"], steady["mismatch"]


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
