"""The graph engine's static path against generate(), and its parameter-version check (CPU)."""
import copy
import types

import pytest
import torch

from rollout_study import masks, parity
from rollout_study.engines.eager import EagerEngine
from rollout_study.reference import reference
from rollout_study.engines.graph import GraphEngine, GraphRefused, check_replayable, parameter_signature
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


def test_positions_count_from_the_first_real_token_and_a_padding_query_sees_only_itself():
    # Neither shows in the tokens on CPU: RoPE reads only position differences, so every position shifted by one
    # gives generate()'s tokens; and CPU SDPA returns zeros, not NaN, for a query with no key at all (CUDA kernels
    # need not)
    mask2d = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    assert masks.positions(mask2d).tolist() == [[1, 1, 0, 1], [0, 1, 2, 3]]  # padding at 1, as generate() puts it
    allowed = masks.allowed_keys(mask2d, 4)
    assert allowed.shape == (2, 1, 4, 4)
    assert allowed[0, 0].int().tolist() == [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 1, 1]]
    assert torch.equal(allowed[1, 0], torch.ones(4, 4, dtype=torch.bool).tril())


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


def runner(engine):
    (only,) = engine.runners.values()
    return only


def engine_with_fake_graph(model, policy):
    engine = GraphEngine(model, "cpu", policy, 32, 4)
    w = random_workload(4, 4, 32, 1024, seed=0)
    rollout(engine, w)  # records the signature and builds the runner
    runner(engine).graphs = (FakeGraph(), FakeGraph())
    return engine


def test_no_change_keeps_the_graph(tiny):
    _, loaded = tiny()
    for policy in ("recapture", "reuse"):
        engine = engine_with_fake_graph(loaded.model, policy)
        assert engine.check_parameters() == "unchanged"
        assert runner(engine).graphs is not None


def test_in_place_update_is_seen_by_both_policies(tiny):
    _, loaded = tiny()
    recapture = engine_with_fake_graph(loaded.model, "recapture")
    reuse = engine_with_fake_graph(loaded.model, "reuse")
    before = parameter_signature(loaded.model)
    with torch.no_grad():
        loaded.model.model.layers[0].mlp.up_proj.weight.add_(1e-3)
    after = parameter_signature(loaded.model)
    assert [s[0] for s in before[0]] == [s[0] for s in after[0]] and before != after  # same address, new version
    assert recapture.check_parameters() == "dropped" and runner(recapture).graphs is None
    assert reuse.check_parameters() == "kept" and runner(reuse).graphs is not None
    assert reuse.signature == after  # versions refreshed: the next check is clean
    assert reuse.check_parameters() == "unchanged"


@pytest.mark.parametrize("replace", ["parameter", "data", "load_state_dict_assign", "module"])
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
        elif replace == "module":  # a new submodule: the walk must go down the new tree, not a remembered one
            model.model.layers[1].self_attn.q_proj = copy.deepcopy(proj)
        else:
            state = {k: v.clone() for k, v in model.state_dict().items()}
            model.load_state_dict(state, assign=True)
    assert engine.check_parameters() == "dropped"
    assert runner(engine).graphs is None and engine.signature is None


def test_the_walk_finds_what_named_modules_finds_in_its_order(tiny):
    from rollout_study.engines.graph import _walk

    _, loaded = tiny()
    model = loaded.model
    model.model.layers[0].shared = model.model.layers[1].mlp  # a module held twice is walked once
    model.model.layers[0].register_module("absent", None)
    expected = [t for _, module in model.named_modules() for t in
                [*module._parameters.values(), *module._buffers.values()] if t is not None]
    tensors, (model_id, training, adapters) = _walk(model)
    assert [id(t) for t in tensors] == [id(t) for t in expected] and len(expected) > 20
    assert (model_id, training, adapters) == (id(model), model.training, ())
    model.model.layers[1].mlp.merged_adapters = ["x"]  # set on the instance, as some adapters do
    assert _walk(model)[1][2] == (("model.layers.0.shared", "['x']", "None", "None"),)


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
    versions = engine_with_fake_graph(loaded.model, "version-only")
    before = parameter_signature(loaded.model)
    # Nothing changes in the counters: what a fused optimizer's step looks like to them on CUDA.
    assert parameter_signature(loaded.model) == before
    assert recapture.check_parameters() == "unchanged"  # why the version counter alone is not enough
    runner(recapture).graphs = (FakeGraph(), FakeGraph())
    for engine in (recapture, reuse, versions):
        engine.weights_updated()
    assert recapture.check_parameters() == "dropped" and runner(recapture).graphs is None
    assert reuse.check_parameters() == "kept" and runner(reuse).graphs is not None
    assert versions.check_parameters() == "unchanged"  # told, but it reads the counters alone
    assert reuse.check_parameters() == "unchanged"  # told once, checked once


def test_a_change_of_train_or_eval_mode_drops_the_graphs(tiny):
    # No tensor moves, but the captured forward took the other branch (dropout, for one).
    _, loaded = tiny()
    engine = engine_with_fake_graph(loaded.model, "reuse")
    loaded.model.train()
    assert engine.check_parameters() == "dropped" and runner(engine).graphs is None


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

    def steady_parts(engine) -> dict:
        """Each part's least over five steady calls: a busy host's pause only adds time (a median of three still
        read decode 1.4x prefill once, with two test runs sharing two cores)."""
        call_parts(engine, w)
        calls = [call_parts(engine, w) for _ in range(5)]
        return {name: min(parts[name] for parts in calls) for name in calls[0]}

    parts = steady_parts(GraphEngine(loaded.model, "cpu", "recapture", 32, 1))
    assert parts["prefill"] > 0 and parts["decode"] < 0.05 * parts["prefill"]
    parts = steady_parts(GraphEngine(loaded.model, "cpu", "recapture", 32, 24))
    # 23 decode steps against one prefill: about 4.5x on an idle CPU here; 2x leaves room for a busy host
    # while still failing if decode were charged to prefill (or to nothing).
    assert parts["decode"] > 2 * parts["prefill"]
    assert parts["allocation"] == 0 and parts["capture"] == 0  # a steady call allocates and captures nothing


def test_a_stride_change_at_the_same_address_and_shape_is_seen_by_reuse_but_not_by_versions(tiny):
    _, loaded = tiny()
    reuse = engine_with_fake_graph(loaded.model, "reuse")
    versions = engine_with_fake_graph(loaded.model, "version-only")
    proj = loaded.model.model.layers[0].self_attn.q_proj  # 128 x 128: transposed, the shape is the same
    address, shape = proj.weight.data_ptr(), proj.weight.shape
    proj.weight.data = proj.weight.data.t()
    assert proj.weight.data_ptr() == address and proj.weight.shape == shape
    assert reuse.check_parameters() == "dropped"
    assert versions.check_parameters() == "unchanged"  # what the former check missed


def test_version_only_and_unchecked_policies_decide_as_documented(tiny):
    _, loaded = tiny()
    model = loaded.model
    engines = {p: engine_with_fake_graph(model, p) for p in ("version-only", "unchecked")}
    for engine in engines.values():
        engine.weights_updated()  # told: neither listens
    assert {p: e.decide() for p, e in engines.items()} == {"version-only": "unchanged", "unchecked": "unchanged"}
    with torch.no_grad():
        model.model.norm.weight.add_(1.0)  # a version bump
    assert engines["version-only"].decide() == "drop" and engines["unchecked"].decide() == "unchanged"
    state = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(state, assign=True)  # new storage, and new parameters at version 0
    assert engines["unchecked"].decide() == "unchanged"


def test_a_new_model_object_is_read_from_then_on_and_drops_the_checked_graphs(tiny):
    from rollout_study import sync

    _, loaded = tiny()
    engine = engine_with_fake_graph(loaded.model, "reuse")
    fresh = sync.rebuild(loaded.model, {k: v.clone() for k, v in loaded.model.state_dict().items()})
    engine.weights_updated(fresh)
    assert engine.model is fresh and runner(engine).model is fresh
    assert engine.check_parameters() == "dropped"


def test_adapter_state_is_part_of_the_signature(tiny):
    from rollout_study import sync

    _, loaded = tiny()
    wrapped = sync.attach_lora(loaded.model, rank=4, seed=0)  # merged for rollouts
    model = wrapped.get_base_model()
    reuse = engine_with_fake_graph(model, "reuse")
    versions = engine_with_fake_graph(model, "version-only")
    wrapped.unmerge_adapter()  # weight.data -= delta: no address, no version moves; the forward branches anew
    assert reuse.check_parameters() == "dropped"
    assert versions.check_parameters() == "unchanged"


@pytest.mark.parametrize("policy", ["recapture", "reuse", "version-only"])
def test_a_checking_policy_refuses_when_it_cannot_tell(tiny, policy):
    _, loaded = tiny()
    engine = engine_with_fake_graph(loaded.model, policy)
    norm = loaded.model.model.norm
    norm.weight = torch.nn.Parameter(torch.empty_like(norm.weight, device="meta"))
    with pytest.raises(GraphRefused, match="model.norm.weight is on meta"):
        engine.decide()
    # The unchecked control replays regardless: it is what shows a stale replay.
    unchecked = GraphEngine(loaded.model, "cpu", "unchecked", 32, 4)
    unchecked.signature = ()
    assert unchecked.decide() == "unchanged"


def test_a_parameter_on_another_gpu_than_the_graphs_is_refused():
    # a CPU machine cannot place a tensor on cuda:1, but the check reads only devices: a stand-in model carries them.
    # Another GPU's tensor has an address that means nothing to the graphs' device, so addresses cannot tell.
    def model_on(device):
        tensor = types.SimpleNamespace(device=device)
        return types.SimpleNamespace(named_parameters=lambda: [("lm_head.weight", tensor)], named_buffers=lambda: [])

    graphs = torch.device("cuda", 0)
    for where in (torch.device("cuda", 0), torch.device("cuda")):  # the graphs' GPU, or one not numbered
        check_replayable(model_on(where), graphs, ([(0, 0, (), (), torch.float16, where)], None))
    other = torch.device("cuda", 1)
    with pytest.raises(GraphRefused, match="lm_head.weight is on cuda:1, the graphs on cuda:0"):
        check_replayable(model_on(other), graphs, ([(0, 0, (), (), torch.float16, other)], None))
    with pytest.raises(GraphRefused, match="is on cuda:1"):
        check_replayable(model_on(other), graphs)  # without a signature: the walk itself


def test_a_parameter_left_on_the_host_is_refused():
    # An offloaded parameter has a host address: the graphs on the GPU cannot tell whether it changed.
    host = torch.device("cpu")
    model = types.SimpleNamespace(named_parameters=lambda: [("lm_head.weight", types.SimpleNamespace(device=host))],
                                  named_buffers=lambda: [])
    with pytest.raises(GraphRefused, match="lm_head.weight is on cpu, the graphs on cuda:0"):
        check_replayable(model, torch.device("cuda", 0), ([(0, 0, (), (), torch.float16, host)], None))


def test_a_cpu_engine_describes_itself_as_running_its_steps_eagerly_and_notes_no_capture(tiny):
    params, loaded = tiny()
    engine = GraphEngine(loaded.model, "cpu", "reuse", 8, 4, length_bucket=8, steps_per_graph=0)
    rollout(engine, random_workload(2, 2, 8, params.vocab, seed=0))
    described = engine.describe()
    assert described["cuda_graph"] is False and described["cache"] == "static" and described["policy"] == "reuse"
    assert described["prefill"] == described["decode"] == "eager (no CUDA graph)"
    assert described["buckets"]["length_bucket"] == 8 and described["buckets"]["prefill_keys"] == 8
    assert engine.call_notes() == {}  # no capture notes, so a CPU run's calls carry no engine_notes
