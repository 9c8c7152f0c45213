import dataclasses
from types import SimpleNamespace

import pytest
import torch

from rollout_study import preparation, workload
from rollout_study.param_values import ParameterError
from rollout_study.params import StudyParams
from rollout_study.preparation import build_workload
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


@pytest.mark.parametrize("prompt_len", [2, 3, 5, 16])
def test_every_batch_has_differing_lengths_within_half_to_all_of_the_prompt_over_many_seeds(prompt_len):
    # short prompts draw equal lengths often: the fix-up, not luck, keeps masks in play in every batch. Lengths are
    # drawn from ceil(prompt_len / 2) up; the fix-up may take a batch's first row one below that.
    low, seen = -(-prompt_len // 2), set()
    for seed in range(30):
        w = random_workload(requests=8, batch_size=2, prompt_len=prompt_len, vocab=100, seed=seed)
        seen.update(w.true_lengths)
        for batch in w.batches:
            first, *rest = batch.true_lengths
            assert low - 1 <= first <= prompt_len and all(low <= n <= prompt_len for n in rest), (seed, batch)
            assert len(set(batch.true_lengths)) == 2, (seed, w.true_lengths)
    assert prompt_len in seen  # rows without padding are drawn too


def test_request_ids_number_the_requests_across_batches():
    # parity names a mismatching request by these: the third batch's first row is request 6, not 0
    w = random_workload(requests=7, batch_size=3, prompt_len=16, vocab=100, seed=3)
    assert [b.request_ids for b in w.batches] == [[0, 1, 2], [3, 4, 5], [6]]


class _ChatTokenizer:
    """What chat_rows reads of a tokenizer: a chat template and one token per character."""

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        return f"<user>{messages[0]['content']}<assistant>"

    def __call__(self, text, add_special_tokens):
        return {"input_ids": [ord(c) for c in text]}


def test_chat_requests_cycle_through_the_prompts_and_a_prompt_len_that_just_holds_them_is_kept():
    texts, rows = workload.chat_rows(_ChatTokenizer(), 3, ("ab", "cde"))
    assert texts == ["ab", "cde", "ab"] and [len(r) for r in rows] == [len("<user>ab<assistant>"),
                                                                       len("<user>cde<assistant>"),
                                                                       len("<user>ab<assistant>")]
    assert workload.check_chat_prompt_len(20, 20) == 20 and workload.check_chat_prompt_len(None, 20) == 20
    with pytest.raises(ParameterError, match="prompt_len must be >= 21"):
        workload.check_chat_prompt_len(20, 21)


def _loaded(tokenizer):
    """What build_workload reads of a loaded model: its tokenizer, vocabulary, pad id and name."""
    return SimpleNamespace(tokenizer=tokenizer, model=SimpleNamespace(config=SimpleNamespace(vocab_size=50)),
                           pad_token_id=7, info={"name": "ckpt"})


def test_a_runs_workload_is_chat_prompts_where_its_model_has_a_tokenizer_else_seeded_random_ones():
    params = StudyParams.from_dict({"device": "cpu", "requests": 5, "batch_size": 2, "seed": 3})  # auto, auto
    w = build_workload(params, _loaded(None))  # random, the reference's 32 long, in the model's vocabulary
    expected = random_workload(5, 2, 32, 50, 3, pad_token_id=7)
    assert w.source == "random" and w.pad_token_id == 7 and [b.size for b in w.batches] == [2, 2, 1]
    assert all(torch.equal(a.input_ids, b.input_ids) for a, b in zip(w.batches, expected.batches))
    w = build_workload(params, _loaded(_ChatTokenizer()))  # chat, as long as the longest
    rendered = [len(f"<user>{text}<assistant>") for text in workload.CHAT_PROMPTS[:5]]
    assert w.source == "chat" and w.true_lengths == rendered and w.prompt_len == max(rendered) and w.pad_token_id == 7
    w = build_workload(dataclasses.replace(params, prompts="random", prompt_len=12), _loaded(_ChatTokenizer()))
    assert w.source == "random" and w.prompt_len == 12
    with pytest.raises(ParameterError, match="prompts: 'chat' needs a model with a tokenizer; ckpt has none"):
        build_workload(dataclasses.replace(params, prompts="chat"), _loaded(None))


def test_initialization_is_one_plain_forward_of_the_first_batch_timed_to_the_devices_end(monkeypatch):
    w = random_workload(requests=3, batch_size=2, prompt_len=8, vocab=50, seed=0)
    seen = []

    def model(**inputs):
        seen.append(("forward", inputs, torch.is_grad_enabled()))

    clock = iter([10.0, 10.25])
    monkeypatch.setattr(preparation.time, "perf_counter", lambda: seen.append("clock") or next(clock))
    monkeypatch.setattr(preparation, "synchronize", lambda device: seen.append(("synchronize", device)))
    assert preparation.initialize(model, w, torch.device("cpu")) == 250.0
    assert [step if isinstance(step, str) else step[0] for step in seen] == ["clock", "forward", "synchronize",
                                                                             "clock"]
    (_, inputs, grad), first = seen[1], w.batches[0]
    assert torch.equal(inputs["input_ids"], first.input_ids) and torch.equal(inputs["attention_mask"],
                                                                             first.attention_mask)
    assert inputs["use_cache"] is False and grad is False and seen[2][1] == torch.device("cpu")
