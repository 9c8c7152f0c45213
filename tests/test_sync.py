"""Every update path on the CPU: the rollout model ends with the trainer's weights, and its tensors
moved (or not) exactly as the path says; the graph policies decide accordingly."""
import time

import pytest
import torch

from rollout_study import sync, training
from rollout_study.engines.graph import GraphEngine, parameter_signature
from rollout_study.param_values import UPDATE_PATHS
from rollout_study.reference import reference
from rollout_study.workload import random_workload

# path -> (same storage, versions bumped, same model object)
EXPECTED = {
    "in-place": (True, True, True),
    "copy": (True, True, True),
    "data-copy": (True, False, True),
    "load-state-dict": (True, True, True),
    "assign": (False, None, True),
    "reload": (False, None, False),
    # The wide copy frees the old storage before the narrow one is made: the allocator may hand the
    # same address back, or not. Both happen; the signature tells them apart, not the path's name.
    "cast": (None, None, True),
    "move": (True, True, True),  # a CPU run has no other device: the round trip stays, the write bumps
}


def trained(tiny, path, **overrides):
    params, loaded = tiny(update_path=path, optimizer="adamw", lr=1e-2, **overrides)
    trainer = training.Trainer(loaded.model, params, "cpu")
    w = random_workload(4, 4, 16, params.vocab, seed=2)
    rollout = reference(trainer.rollout_model, w.batches, 6, 0, "cpu").output
    return params, trainer, rollout


def weights(model) -> dict:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("path", list(EXPECTED))
def test_each_path_writes_the_trainers_weights_and_moves_what_it_says(tiny, path):
    _, trainer, rollout = trained(tiny, path)
    model = trainer.rollout_model
    before = {n: (p.data_ptr(), p._version) for n, p in model.named_parameters()}
    old_values = weights(model)
    stats = trainer.update(rollout)
    new = trainer.rollout_model
    same_storage, bumped, same_object = EXPECTED[path]
    assert (new is model) == same_object
    assert stats["change"]["same_object"] == same_object
    assert stats["step_ms"] > 0 and stats["sync_ms"] >= 0
    assert stats["ms"] == pytest.approx(stats["step_ms"] + stats["sync_ms"])  # disjoint parts, nothing else timed
    master = dict(trainer.model.named_parameters())
    for name, param in new.named_parameters():
        assert torch.equal(param.detach(), master[name].detach().to(param.dtype)), name
        ptr, version = before[name]
        if same_storage is not None:
            assert (param.data_ptr() == ptr) == same_storage, name
        if bumped is not None and same_storage:
            assert (param._version != version) == bumped, name
    assert any(not torch.equal(p.detach(), old_values[n]) for n, p in new.named_parameters())
    if same_storage is not None:
        assert (stats["change"]["moved"] == 0) == same_storage
    if bumped is not None and same_storage:  # what the summary's sync table reports, per path
        assert stats["change"]["version_bumped"] == (len(list(new.parameters())) if bumped else 0)
    if path != "in-place":
        assert trainer.model is not new and next(trainer.model.parameters()).dtype == torch.float32


def test_lora_merge_trains_the_adapter_and_merges_it_into_the_same_storage(tiny):
    _, trainer, rollout = trained(tiny, "lora-merge", lora_rank=4)
    model = trainer.rollout_model
    q = model.model.layers[0].self_attn.q_proj
    base = q.base_layer.weight
    address, version, value = base.data_ptr(), base._version, base.detach().clone()
    assert q.merged  # rollouts read merged weights
    stats = trainer.update(rollout)
    assert q.merged and base.data_ptr() == address and base._version == version  # weight.data += delta
    assert not torch.equal(base.detach(), value)
    delta = q.get_delta_weight("default")
    assert torch.allclose(base.detach(), value + delta.to(value.dtype), atol=1e-6)
    assert stats["change"]["moved"] == 0 and stats["sync_ms"] > 0
    assert trainer.describe()["adapter"]["rank"] == 4


def test_lora_merges_unmerge_and_merge_are_timed_as_the_sync_not_the_step(tiny, monkeypatch):
    _, trainer, rollout = trained(tiny, "lora-merge", lora_rank=4)

    def slowed(method):
        def run(*args, **kwargs):
            time.sleep(0.03)  # a stand-in for a merge that takes time on a large model
            return method(*args, **kwargs)
        return run

    for name in ("unmerge_adapter", "merge_adapter"):
        monkeypatch.setattr(trainer.adapter, name, slowed(getattr(trainer.adapter, name)))
    stats = trainer.update(rollout)
    assert stats["sync_ms"] >= 60 and stats["ms"] == pytest.approx(stats["step_ms"] + stats["sync_ms"])


@pytest.mark.parametrize("path", ["copy", "assign", "reload", "lora-merge", "in-place"])
def test_a_control_update_writes_nothing(tiny, path):
    _, trainer, rollout = trained(tiny, path)
    model = trainer.rollout_model
    before = weights(model)
    addresses = [p.data_ptr() for p in model.parameters()]
    stats = trainer.update(rollout, apply=False)
    assert trainer.rollout_model is model and stats["loss"] > 0
    assert [p.data_ptr() for p in model.parameters()] == addresses
    assert all(torch.equal(p.detach(), before[n]) for n, p in model.named_parameters())


def test_bfloat16_master_weights_step_float32_optimizer_state(tiny):
    params, trainer, rollout = trained(tiny, "copy", master_dtype="bfloat16")
    assert next(trainer.model.parameters()).dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in trainer.trainable)
    trainer.update(rollout)
    state = trainer.optimizer.state[trainer.trainable[0]]
    assert state["exp_avg"].dtype == torch.float32 and state["exp_avg_sq"].dtype == torch.float32
    # The bfloat16 weights are the float32 copies rounded, and the rollout got them.
    for master, (name, weight) in zip(trainer.trainable, trainer.model.named_parameters()):
        assert torch.equal(weight.detach(), master.detach().to(torch.bfloat16)), name
    assert trainer.describe()["master_dtype"] == "bfloat16"


@pytest.mark.parametrize("impl", ["plain", "foreach", "fused"])
def test_optimizer_implementations_are_forced_and_recorded(tiny, impl):
    _, trainer, rollout = trained(tiny, "copy", optimizer_impl=impl)
    trainer.update(rollout)
    flags = trainer.describe()["optimizer_flags"]
    assert flags["fused"] is (True if impl == "fused" else None)
    assert flags["foreach"] is {"plain": False, "foreach": True, "fused": None}[impl]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_adamw_five_cycles_stay_finite_with_master_weights(tiny, dtype):
    """The H200 showed NaN at the second AdamW update on plain FP16 weights; with master weights, none."""
    for lr in (1e-6, 1e-3):
        params, loaded = tiny(update_path="copy", optimizer="adamw", lr=lr)
        model = loaded.model.to(getattr(torch, dtype))
        trainer = training.Trainer(model, params, "cpu")
        w = random_workload(4, 4, 16, params.vocab, seed=4)
        for _ in range(5):
            rollout = reference(trainer.rollout_model, w.batches, 6, 0, "cpu").output
            stats = trainer.update(rollout)  # raises NonFiniteUpdate on inf or NaN anywhere
            assert stats["loss"] == stats["loss"]
        assert next(trainer.rollout_model.parameters()).dtype == getattr(torch, dtype)


def test_synced_weights_that_overflow_the_rollout_dtype_are_refused(tiny):
    params, loaded = tiny(update_path="copy")
    model = loaded.model.to(torch.float16)
    trainer = training.Trainer(model, params, "cpu")
    with torch.no_grad():
        trainer.model.model.norm.weight[0] = 1e6  # beyond float16's 65504
    before = weights(model)
    with pytest.raises(training.NonFiniteUpdate, match="an overflow.*the sync was not made") as refused:
        trainer.update(reference(model, random_workload(4, 4, 16, 1024, seed=1).batches, 4, 0, "cpu").output)
    assert not refused.value.weights_changed
    assert all(torch.equal(p.detach(), before[n]) for n, p in model.named_parameters())  # nothing was written


def test_reload_builds_a_new_object_with_buffers_and_tied_weights(tiny):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    model = LlamaForCausalLM(config).eval()
    state = sync.cast_state(model.state_dict(), torch.float32, "cpu")
    assert state["lm_head.weight"] is state["model.embed_tokens.weight"]  # one copy of a tied matrix, not two
    fresh = sync.rebuild(model, state)
    assert fresh is not model and fresh.lm_head.weight is fresh.model.embed_tokens.weight
    assert torch.equal(fresh.model.rotary_emb.inv_freq, model.model.rotary_emb.inv_freq)
    ids = torch.randint(0, 256, (1, 8))
    with torch.no_grad():
        assert torch.equal(fresh(ids).logits, model(ids).logits)


def test_the_graph_policies_decide_per_path_as_the_hazard_matrix_expects(tiny):
    """On the CPU nothing goes stale, but each policy's decision after each path is the logic the H200 tests."""
    decided = {}
    for path in ("copy", "data-copy", "assign", "reload"):
        params, trainer, rollout = trained(tiny, path, policy="all")
        engines = {p: GraphEngine(trainer.rollout_model, "cpu", p, 16, 6) for p in params.policies}
        for engine in engines.values():
            engine.signature = parameter_signature(trainer.rollout_model)  # as at a capture
        for _ in range(2):  # the second assign leaves every version at 0: the former check misses it
            trainer.update(rollout)
            for engine in engines.values():
                engine.weights_updated(trainer.rollout_model)
            decided[path] = {p: e.check_parameters() for p, e in engines.items()}
            for engine in engines.values():
                if engine.signature is None:
                    engine.signature = parameter_signature(trainer.rollout_model)
    assert decided["copy"] == {"recapture": "dropped", "reuse": "kept", "version-only": "dropped",
                               "unchecked": "unchanged"}
    assert decided["data-copy"] == {"recapture": "dropped", "reuse": "kept", "version-only": "unchanged",
                                    "unchecked": "unchanged"}
    for path in ("assign", "reload"):
        assert decided[path] == {"recapture": "dropped", "reuse": "dropped", "version-only": "unchanged",
                                 "unchecked": "unchanged"}, path


def test_bfloat16_master_weights_are_what_is_stored(tiny):
    """The float32 copies are reloaded from the bfloat16 weights before every step: bfloat16 is the
    stored weight (a float32 copy kept across steps would be a float32 master under another name)."""
    params, loaded = tiny(update_path="copy", optimizer="sgd", lr=1e-9, master_dtype="bfloat16")
    trainer = training.Trainer(loaded.model, params, "cpu")
    rollout = reference(loaded.model, random_workload(4, 4, 16, 1024, seed=2).batches, 6, 0, "cpu").output
    trainer.update(rollout)
    norm = trainer.model.model.norm.weight
    norm.data.fill_(2.0)  # what is stored in bfloat16 now
    trainer.update(rollout)
    assert torch.equal(norm.detach(), torch.full_like(norm, 2.0))  # a 1e-9 step rounds away from 2.0
    assert torch.equal(trainer.rollout_model.model.norm.weight.detach(), torch.full_like(norm, 2.0).float())


def test_a_lora_control_after_a_real_update_leaves_16_bit_weights_exactly(tiny):
    params, loaded = tiny(update_path="lora-merge", optimizer="adamw", lr=1e-2, lora_rank=4)
    model = loaded.model.to(torch.bfloat16)
    trainer = training.Trainer(model, params, "cpu")
    rollout = reference(trainer.rollout_model, random_workload(4, 4, 16, 1024, seed=2).batches, 6, 0, "cpu").output
    trainer.update(rollout)  # B is no longer zero: unmerge + merge would round
    before = weights(trainer.rollout_model)
    trainer.update(rollout, apply=False)
    assert all(torch.equal(p.detach(), before[n]) for n, p in trainer.rollout_model.named_parameters())


def test_the_cast_path_goes_through_a_wider_dtype_and_back(tiny, monkeypatch):
    # on a float32 rollout (every CPU run) a "wider" float32 would be no cast at all: a plain copy under another name
    _, trainer, rollout = trained(tiny, "cast")
    seen, cast = [], sync.cast_parameters
    monkeypatch.setattr(sync, "cast_parameters", lambda model, dtype: seen.append(dtype) or cast(model, dtype))
    trainer.update(rollout)
    assert seen == [torch.float64, torch.float32]
    assert {p.dtype for p in trainer.rollout_model.parameters()} == {torch.float32}


def test_a_move_on_a_cpu_run_is_recorded_as_staying_on_the_device():
    # the run's metadata says whether the move path really left the device; on the CPU it cannot
    assert not sync.moved_away("move", "cpu") and sync.moved_away("move", "cuda:0")
    # no other path leaves the device: each writes the rollout's tensors where they are
    assert not any(sync.moved_away(path, "cuda:0") for path in UPDATE_PATHS if path != "move")
