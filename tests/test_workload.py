import torch

from rollout_study.workload import random_workload


def test_left_padding_varied_lengths_and_partial_last_batch():
    w = random_workload(requests=7, batch_size=3, prompt_len=16, vocab=100, seed=3)
    assert [b.size for b in w.batches] == [3, 3, 1]
    for batch in w.batches:
        assert batch.input_ids.shape == (batch.size, 16)
        for row, n in enumerate(batch.true_lengths):
            mask = batch.attention_mask[row]
            assert mask.sum() == n
            assert torch.all(mask[16 - n:] == 1) and torch.all(mask[:16 - n] == 0)  # padding on the left
            assert torch.all(batch.input_ids[row, :16 - n] == w.pad_token_id)
            assert torch.all(batch.input_ids[row, 16 - n:] != w.pad_token_id)
        if batch.size > 1:
            assert len(set(batch.true_lengths)) > 1  # masks matter in every full batch
            assert min(batch.true_lengths) < 16


def test_same_seed_same_prompts_other_seed_other_prompts():
    a = random_workload(8, 4, 32, 1024, seed=0)
    b = random_workload(8, 4, 32, 1024, seed=0)
    c = random_workload(8, 4, 32, 1024, seed=1)
    assert all(torch.equal(x.input_ids, y.input_ids) for x, y in zip(a.batches, b.batches))
    assert not all(torch.equal(x.input_ids, y.input_ids) for x, y in zip(a.batches, c.batches))
    assert a.requests == 8 and len(a.true_lengths) == 8
