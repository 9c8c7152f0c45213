import pytest
import torch

from rollout_study import training
from rollout_study.reference import reference
from rollout_study.workload import random_workload


def in_place_trainer(tiny, optimizer="sgd"):
    params, loaded = tiny(update_path="in-place", optimizer=optimizer, lr=1e-2)
    return loaded.model, training.Trainer(loaded.model, params, "cpu")


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_update_is_in_place_and_changes_the_model(tiny, optimizer):
    model, trainer = in_place_trainer(tiny, optimizer)
    w = random_workload(6, 4, 16, 1024, seed=1)
    rollout = reference(model, w.batches, 8, 0, "cpu").output
    before = {n: (p.data_ptr(), p._version, p.detach().clone()) for n, p in model.named_parameters()}
    stats = trainer.update(rollout)
    assert trainer.model is model and stats["sync_ms"] < stats["step_ms"]
    assert stats["loss"] > 0 and stats["ms"] > 0
    changed = 0
    for n, p in model.named_parameters():
        ptr, version, value = before[n]
        assert p.data_ptr() == ptr  # in place: the graph's addresses stay valid
        assert p._version > version
        changed += not torch.equal(p.detach(), value)
    assert changed > 0
    assert not model.training and not torch.is_grad_enabled()  # eval, no grad after the update
    assert all(p.grad is None for p in model.parameters())


def test_loss_counts_response_tokens_only(tiny):
    _, loaded = tiny()
    model = loaded.model
    seq = torch.randint(1, 1024, (2, 12))
    mask = torch.ones_like(seq)
    mask[0, :3] = 0
    with torch.no_grad():
        base = training.response_nll(model, seq, mask, 8)
        other = seq.clone()
        other[:, :7] = (other[:, :7] + 1) % 1024  # change the prompt only: the targets are unchanged
        other[0, :3] = seq[0, :3]
        assert torch.isfinite(base)
        changed_prompt = training.response_nll(model, other, mask, 8)
        assert changed_prompt != base  # the prompt is context...
        tail = seq.clone()
        tail[:, 9] = (tail[:, 9] + 1) % 1024
        assert training.response_nll(model, tail, mask, 8) != base  # ...and response tokens are targets


def test_non_finite_gradient_is_refused_and_not_applied(tiny):
    model, trainer = in_place_trainer(tiny)
    w = random_workload(4, 4, 16, 1024, seed=1)
    rollout = reference(model, w.batches, 4, 0, "cpu").output
    with torch.no_grad():
        model.model.norm.weight[0] = float("inf")
    snapshot = {n: p.detach().clone() for n, p in model.named_parameters()}
    with pytest.raises(training.NonFiniteUpdate, match="not applied"):
        trainer.update(rollout)
    for n, p in model.named_parameters():
        assert torch.equal(p.detach(), snapshot[n]) or torch.isinf(snapshot[n]).any()


def test_a_control_update_runs_forward_and_backward_but_leaves_the_weights(tiny):
    model, trainer = in_place_trainer(tiny, "adamw")
    w = random_workload(4, 4, 16, 1024, seed=3)
    rollout = reference(model, w.batches, 4, 0, "cpu").output
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    stats = trainer.update(rollout, apply=False)
    assert stats["loss"] > 0 and stats["ms"] > 0
    assert all(torch.equal(p.detach(), before[n]) for n, p in model.named_parameters())
    flags = training.optimizer_flags(trainer.optimizer)
    assert flags["class"] == "AdamW" and flags["eps"] == 1e-8  # float32 weights: PyTorch's default eps
    assert trainer.describe()["master_dtype"].startswith("none")
    params, loaded = tiny(update_path="in-place", optimizer="adamw")
    half = training.Trainer(loaded.model.half(), params, "cpu")
    assert training.optimizer_flags(half.optimizer)["eps"] == 1e-6  # 1e-8 underflows in 16-bit weights
