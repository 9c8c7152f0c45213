"""The parity check must catch one changed token, a changed mask and a shifted offset."""
import copy

import pytest
import torch

from rollout_study import parity
from rollout_study.engines.base import RolloutOutput
from rollout_study.engines.eager import generate
from rollout_study.record import Parity
from rollout_study.reference import reference
from rollout_study.workload import random_workload


@pytest.fixture
def tiny_and_workload(tiny):
    params, loaded = tiny()
    return loaded, random_workload(6, 4, 16, params.vocab, seed=4)


@pytest.fixture
def ref_and_ids(tiny_and_workload):
    loaded, w = tiny_and_workload
    return reference(loaded.model, w.batches, 8, 0, "cpu"), [b.request_ids for b in w.batches]


def clone(output: RolloutOutput) -> RolloutOutput:
    return copy.deepcopy(output)


def test_identical_output_passes(ref_and_ids):
    ref, ids = ref_and_ids
    assert parity.compare(clone(ref.output), ref, ids)["ok"]


def test_one_changed_token_is_caught_with_diagnosis(ref_and_ids, tiny_and_workload):
    ref, ids = ref_and_ids
    out = clone(ref.output)
    step, row, batch = 5, 1, 1
    original = int(out.sequences[batch][row, 16 + step])
    out.sequences[batch][row, 16 + step] = (original + 1) % 1024
    result = parity.compare(out, ref, ids)
    assert not result["ok"] and not result["tokens"] and result["attention_mask"] and result["response_offsets"]
    m = result["mismatch"]
    assert m["kind"] == "tokens" and m["request"] == ids[batch][row] and m["step"] == step
    assert m["reference_token"] == original and m["engine_token"] == (original + 1) % 1024
    # The reference keeps only the top two of each step: they are those of generate()'s whole logits
    loaded, w = tiny_and_workload
    out = generate(loaded.model, w.batches[batch], 8, 0, "cpu", return_dict_in_generate=True, output_logits=True)
    top = torch.topk(out.logits[step][row].float(), 2)
    assert m["reference_top2_tokens"] == [int(t) for t in top.indices] and m["reference_top2_tokens"][0] == original
    assert m["reference_top2_margin"] == pytest.approx(float(top.values[0] - top.values[1]))
    assert m["reference_top2_margin"] >= 0
    assert Parity.from_dict(result).describe_mismatch() == (
        f"request {ids[batch][row]} step {step}: token {(original + 1) % 1024} instead of {original} "
        f"(reference top-2 margin {m['reference_top2_margin']:.3g})")


def test_a_changed_mask_is_caught(ref_and_ids):
    ref, ids = ref_and_ids
    out = clone(ref.output)
    out.attention_masks[0][2, 3] = 1 - out.attention_masks[0][2, 3]
    result = parity.compare(out, ref, ids)
    assert not result["ok"] and result["tokens"] and not result["attention_mask"]
    assert result["mismatch"] == {"kind": "attention_mask", "request": ids[0][2], "position": 3}
    assert Parity.from_dict(result).describe_mismatch() == f"request {ids[0][2]}: attention mask differs at position 3"


def test_a_shifted_offset_is_caught(ref_and_ids):
    ref, ids = ref_and_ids
    out = clone(ref.output)
    out.response_offsets[1][0] += 1
    result = parity.compare(out, ref, ids)
    assert not result["ok"] and not result["response_offsets"]
    assert not result["tokens"]  # read from the wrong offset, the response no longer matches either
    assert result["mismatch"]["kind"] == "tokens" and result["mismatch"]["request"] == ids[1][0]


def test_a_sequence_that_drops_its_prompt_is_caught_even_with_a_right_offset(ref_and_ids):
    """The offset is checked against the sequence itself: the prompt must stand before it, unchanged."""
    ref, ids = ref_and_ids
    out = clone(ref.output)
    out.sequences[0] = out.sequences[0].clone()
    out.sequences[0][1, 0] = (out.sequences[0][1, 0] + 1) % 1024  # the echoed prompt differs, the response not
    result = parity.compare(out, ref, ids)
    assert result["tokens"] and not result["response_offsets"] and not result["ok"]
    assert result["mismatch"]["kind"] == "response_offset" and result["mismatch"]["request"] == ids[0][1]
    assert Parity.from_dict(result).describe_mismatch() == (
        f"request {ids[0][1]}: the prompt before its response (at {out.response_offsets[0][1]}) differs")


def test_a_missing_batch_is_caught_and_named(ref_and_ids):
    ref, ids = ref_and_ids
    out = clone(ref.output)
    out.sequences, out.attention_masks, out.response_offsets = (
        out.sequences[:1], out.attention_masks[:1], out.response_offsets[:1])
    result = parity.compare(out, ref, ids)
    assert not result["ok"] and result["mismatch"] == {"kind": "batches", "engine": 1, "reference": 2}
    assert Parity.from_dict(result).describe_mismatch() == "1 batch(es) instead of generate()'s 2"


def test_the_tokens_hash_follows_the_generated_tokens_and_only_them(ref_and_ids):
    # compare.py and generate()'s determinism check (analysis.generate_token_sets) tell runs apart by this hash alone
    ref, _ = ref_and_ids
    same = parity.tokens_hash(ref.output)
    assert parity.tokens_hash(clone(ref.output)) == same and len(same) == 64
    changed = clone(ref.output)
    changed.sequences[1][1, 16 + 3] = (changed.sequences[1][1, 16 + 3] + 1) % 1024  # one generated token
    assert parity.tokens_hash(changed) != same
    prompt = clone(ref.output)
    prompt.sequences[0][0, 0] = (prompt.sequences[0][0, 0] + 1) % 1024  # the echoed prompt: not a generated token
    assert parity.tokens_hash(prompt) == same


def _output(*sequences):
    return RolloutOutput([torch.tensor(s) for s in sequences], [torch.ones_like(torch.tensor(s)) for s in sequences],
                         [[1] * len(s) for s in sequences])


def test_requests_changed_counts_rows_and_a_reshaped_batch_whole():
    before = _output([[1, 2, 3], [1, 4, 5]], [[7, 8, 9]])
    assert parity.requests_changed(before, before) == 0
    # one row of the first batch changed one token: one request
    assert parity.requests_changed(before, _output([[1, 2, 3], [1, 4, 6]], [[7, 8, 9]])) == 1
    # a batch whose sequences came back another length (another stop): every request of it
    assert parity.requests_changed(before, _output([[1, 2, 3], [1, 4, 5]], [[7, 8, 9, 10]])) == 1
    assert parity.requests_changed(before, _output([[1, 2], [1, 4]], [[7, 8, 9]])) == 2
