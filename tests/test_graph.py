"""The graph engine's static path against generate(), and its parameter-version check (CPU)."""
import pytest
import torch

from rollout_study import parity
from rollout_study.engines.eager import EagerEngine
from rollout_study.reference import reference
from rollout_study.engines.graph import GraphEngine, parameter_signature
from rollout_study.timing import CallClock
from rollout_study.workload import random_workload


def rollout(engine, workload):
    clock = CallClock("cpu").start()
    out = engine(workload.batches, clock)
    clock.stop()
    return out


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("requests,batch_size,new_tokens", [(8, 4, 32), (7, 3, 12), (5, 5, 1)])
def test_static_path_reproduces_generate_exactly(tiny, attn, requests, batch_size, new_tokens):
    params, loaded = tiny(attn=attn)
    w = random_workload(requests, batch_size, 32, params.vocab, seed=11)
    ref = reference(loaded.model, w.batches, new_tokens, 0, "cpu")
    engine = GraphEngine(loaded.model, "cpu", "recapture", 32, new_tokens, attn=attn)
    result = parity.compare(rollout(engine, w), ref, [b.request_ids for b in w.batches])
    assert result == {"ok": True, "tokens": True, "attention_mask": True, "response_offsets": True, "mismatch": None}
    # The returned sequence carries the prompt as given, padding included.
    out = rollout(engine, w).to_cpu()
    assert torch.equal(out.sequences[-1][:, :32], w.batches[-1].input_ids)
    assert out.sequences[-1].shape[1] == 32 + new_tokens


def test_eager_engine_matches_reference(tiny):
    params, loaded = tiny()
    w = random_workload(6, 4, 32, params.vocab, seed=2)
    ref = reference(loaded.model, w.batches, 8, 0, "cpu")
    assert parity.compare(rollout(EagerEngine(loaded.model, "cpu", 8, 0), w), ref)["ok"]


class FakeGraph:
    """Stands in for a captured graph on the CPU, so the refresh policy can be observed."""
    resets = 0

    def reset(self):
        FakeGraph.resets += 1


def engine_with_fake_graph(model, policy):
    engine = GraphEngine(model, "cpu", policy, 32, 4)
    w = random_workload(4, 4, 32, 1024, seed=0)
    rollout(engine, w)  # records the signature and builds the runner
    engine.runners[4].graphs = (FakeGraph(), FakeGraph())
    return engine


def test_no_change_keeps_the_graph(tiny):
    _, loaded = tiny()
    for policy in ("recapture", "reuse"):
        engine = engine_with_fake_graph(loaded.model, policy)
        assert engine.check_parameters() == "unchanged"
        assert engine.runners[4].graphs is not None


def test_in_place_update_is_seen_by_both_policies(tiny):
    _, loaded = tiny()
    recapture = engine_with_fake_graph(loaded.model, "recapture")
    reuse = engine_with_fake_graph(loaded.model, "reuse")
    before = parameter_signature(loaded.model)
    with torch.no_grad():
        loaded.model.model.layers[0].mlp.up_proj.weight.add_(1e-3)
    after = parameter_signature(loaded.model)
    assert [s[0] for s in before] == [s[0] for s in after] and before != after  # same address, new version
    assert recapture.check_parameters() == "dropped" and recapture.runners[4].graphs is None
    assert reuse.check_parameters() == "kept" and reuse.runners[4].graphs is not None
    assert reuse.signature == after  # versions refreshed: the next check is clean
    assert reuse.check_parameters() == "unchanged"


@pytest.mark.parametrize("replace", ["parameter", "data", "load_state_dict_assign"])
def test_reuse_never_keeps_a_graph_whose_addresses_changed(tiny, replace):
    _, loaded = tiny()
    model = loaded.model
    engine = engine_with_fake_graph(model, "reuse")
    proj = model.model.layers[1].self_attn.q_proj
    with torch.no_grad():
        if replace == "parameter":
            proj.weight = torch.nn.Parameter(proj.weight.detach().clone())
        elif replace == "data":
            proj.weight.data = proj.weight.data.clone()
        else:
            state = {k: v.clone() for k, v in model.state_dict().items()}
            model.load_state_dict(state, assign=True)
    assert engine.check_parameters() == "dropped"
    assert engine.runners[4].graphs is None and engine.signature is None


def test_graph_engine_follows_an_update(tiny):
    """After an in-place update the engine's output is generate()'s with the new weights."""
    params, loaded = tiny()
    w = random_workload(8, 4, 32, params.vocab, seed=5)
    engine = GraphEngine(loaded.model, "cpu", "reuse", 32, 16)
    rollout(engine, w)
    with torch.no_grad():
        for p in loaded.model.parameters():
            p.mul_(1.5)
    ref = reference(loaded.model, w.batches, 16, 0, "cpu")
    assert parity.compare(rollout(engine, w), ref)["ok"]
    assert engine.last_check == "kept"


def test_recapture_drops_after_every_update_it_is_told_of_even_without_a_version_change(tiny):
    _, loaded = tiny()
    recapture = engine_with_fake_graph(loaded.model, "recapture")
    reuse = engine_with_fake_graph(loaded.model, "reuse")
    before = parameter_signature(loaded.model)
    # Nothing changes in the counters: what a fused optimizer's step looks like to them on CUDA.
    assert parameter_signature(loaded.model) == before
    assert recapture.check_parameters() == "unchanged"  # why the version counter alone is not enough
    recapture.runners[4].graphs = (FakeGraph(), FakeGraph())
    for engine in (recapture, reuse):
        engine.weights_updated()
    assert recapture.check_parameters() == "dropped" and recapture.runners[4].graphs is None
    assert reuse.check_parameters() == "kept" and reuse.runners[4].graphs is not None
    assert reuse.check_parameters() == "unchanged"  # told once, checked once


@pytest.mark.parametrize("change", ["transpose", "dtype"])
def test_reuse_drops_when_a_layout_changes_at_the_same_address(tiny, change):
    _, loaded = tiny()
    engine = engine_with_fake_graph(loaded.model, "reuse")
    proj = loaded.model.model.layers[0].mlp.up_proj
    address = proj.weight.data_ptr()
    with torch.no_grad():
        if change == "transpose":
            proj.weight.data = proj.weight.data.t()  # same storage, other shape and stride
        else:
            proj.weight.data = proj.weight.data.view(torch.bfloat16)  # same bytes read as another dtype
    assert proj.weight.data_ptr() == address
    assert engine.check_parameters() == "dropped"



def test_prefill_and_decode_are_charged_to_their_own_parts(tiny, call_parts):
    """With one new token there is no decode step; with many, decode outweighs prefill."""
    params, loaded = tiny()
    w = random_workload(4, 4, 32, params.vocab, seed=0)
    one = GraphEngine(loaded.model, "cpu", "recapture", 32, 1)
    call_parts(one, w)
    parts = call_parts(one, w)
    assert parts["prefill"] > 0 and parts["decode"] < 0.05 * parts["prefill"]
    many = GraphEngine(loaded.model, "cpu", "recapture", 32, 24)
    call_parts(many, w)
    parts = call_parts(many, w)
    assert parts["decode"] > 5 * parts["prefill"]
    assert parts["allocation"] == 0 and parts["capture"] == 0  # a steady call allocates and captures nothing
