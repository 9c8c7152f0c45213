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


def test_the_loss_counts_the_first_response_token_and_no_padding_after_a_finished_response():
    # position t predicts token t+1: with the response from token 3, predictions 2, 3 and 4 are counted; a row
    # that finished early has padding at its end, which is no target
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 0]])
    assert training.response_keep(mask, 3).tolist() == [[False, False, True, True, True],
                                                        [False, False, True, True, False]]


def test_the_updates_loss_and_gradient_are_the_mean_over_the_rollouts_batches(tiny):
    # so the learning rate means the same step whatever the number of batches, and the loss reported is theirs
    model, trainer = in_place_trainer(tiny)
    w = random_workload(10, 5, 16, 1024, seed=3)  # two batches of five
    rollout = reference(model, w.batches, 6, 0, "cpu").output
    batches = list(zip(rollout.sequences, rollout.attention_masks, rollout.response_offsets))
    with torch.no_grad():
        per_batch = [float(training.response_nll(model, seq, mask, offsets[0])) for seq, mask, offsets in batches]
    assert len(per_batch) == 2 and per_batch[0] != pytest.approx(per_batch[1])
    assert trainer.update(rollout, apply=False)["loss"] == pytest.approx(sum(per_batch) / 2, rel=1e-5)
    with torch.enable_grad():
        training._backward(model, rollout, "cpu")
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        model.zero_grad(set_to_none=True)
        mean = sum(training.response_nll(model, seq, mask, offsets[0]) for seq, mask, offsets in batches) / 2
        mean.backward()
    assert grads
    for name, param in model.named_parameters():
        torch.testing.assert_close(grads[name], param.grad, rtol=1e-4, atol=1e-6)
    model.zero_grad(set_to_none=True)


def test_an_update_cut_into_chunks_of_rows_has_the_whole_batchs_loss_and_gradient(tiny):
    # The update holds at most BACKWARD_TOKENS tokens at a time (the 1B shape at batch 64 would not fit an
    # H200 whole); each chunk divides by the batch's response tokens, so nothing but the summation order moves.
    _, loaded = tiny()
    model = loaded.model
    w = random_workload(10, 5, 16, 1024, seed=3)  # two batches of five, left-padded to other lengths
    rollout = reference(model, w.batches, 6, 0, "cpu").output

    def update(chunk_tokens):
        model.zero_grad(set_to_none=True)
        with torch.enable_grad():
            losses = training._backward(model, rollout, "cpu", chunk_tokens=chunk_tokens)
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        model.zero_grad(set_to_none=True)
        return losses, grads

    width = rollout.sequences[0].shape[1]
    whole_losses, whole = update(10 ** 6)
    for chunk_tokens in (1, 2 * width, 3 * width):  # a row at a time; rows 2, 2 and 1; rows 3 and 2
        losses, cut = update(chunk_tokens)
        assert losses == pytest.approx(whole_losses, rel=1e-5)
        assert cut.keys() == whole.keys() and whole
        for name, grad in whole.items():
            torch.testing.assert_close(cut[name], grad, rtol=1e-4, atol=1e-6)
    # ...and a chunk that divided by its own tokens, not the batch's, would give other numbers
    with torch.no_grad():
        seq, mask, offset = rollout.sequences[0], rollout.attention_masks[0], rollout.response_offsets[0][0]
        own = training.response_nll(model, seq[:2], mask[:2], offset)
        shared = training.response_nll(model, seq[:2], mask[:2], offset, training.response_keep(mask, offset).sum())
    assert float(own) != pytest.approx(float(shared))


def test_a_batch_is_cut_into_the_fewest_chunks_under_the_budget_with_its_rows_shared_evenly(monkeypatch):
    assert training.backward_chunks(8, 64) == 1  # the tiny reference workload: one piece
    assert training.backward_chunks(16, 544, 8192) == 2  # 15 rows fit: two chunks of 8
    assert training.backward_chunks(64, 544, 8192) == 5  # the 1B shape's corner: 13 rows (7,072 tokens) at most
    assert training.backward_chunks(5, 3000, 8192) == 3  # 2 rows fit: 2, 2, 1 (never 3 rows, 9,000 tokens)
    assert training.backward_chunks(3, 10_000, 8192) == 3  # a row over the budget is still one chunk
    monkeypatch.setattr(training, "BACKWARD_TOKENS", 544)  # the budget is read at each call
    assert training.backward_chunks(4, 544) == 4


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
