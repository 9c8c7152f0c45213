"""record.py and result.py: the Result reads every committed file, writes atomically, derives validity."""
from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path

import pytest

from result_fixture import make_invalid_result_dict, make_result, make_result_dict
from rollout_study.param_values import DIAGNOSTIC_POLICIES
from rollout_study.record import ResultError
from rollout_study.result import Result

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("path", sorted((REPO / "reports").glob("*/result.json")), ids=lambda p: p.parent.name)
def test_committed_results_round_trip_unchanged(path):
    raw = json.loads(path.read_text(encoding="utf-8"))
    result = Result.from_dict(raw, str(path))
    assert result.to_dict() == raw  # every field, known or not, survives
    assert result.is_valid and result.variants()[0] == "eager"


def test_write_then_read_round_trip_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "r.json"
    make_result(cuda_graph=True).write(path)
    assert Result.read(path).to_dict() == make_result_dict(cuda_graph=True)
    assert os.listdir(tmp_path) == ["r.json"]


def test_a_crash_while_writing_leaves_the_old_file_intact(tmp_path):
    path = tmp_path / "r.json"
    make_result().write(path)
    bad = make_result()
    bad.calls[0].total_ms = float("nan")  # refused by the JSON encoder half-way through
    with pytest.raises(ValueError):
        bad.write(path)
    assert Result.read(path).calls[0].total_ms == make_result().calls[0].total_ms
    assert os.listdir(tmp_path) == ["r.json"]


@pytest.mark.parametrize("change, message", [
    (lambda r: r["calls"][0]["breakdown_ms"].update(other=r["calls"][0]["breakdown_ms"]["other"] + 1),
     "breakdown sums"),
    (lambda r: r["metadata"].update(label="mixed"), "metadata.label"),
    (lambda r: r.update(valid="false"), "valid must be true or false"),
    (lambda r: r["calls"][0].update(phase="warm"), "unknown phase"),
    (lambda r: r.update(metadata="text"), "metadata.label"),
    (lambda r: r.update(calls=None), "calls must be a list"),
    (lambda r: r.update(schema_version=99), "schema_version 99"),
    (lambda r: r["calls"][0].pop("total_ms"), "missing field(s) total_ms"),
    # a string "false" is true to Python: read as is, the call would pass its parity check
    (lambda r: r["calls"][0]["parity"].update(ok="false"), "parity: ok must be true or false, got 'false'"),
    (lambda r: r["cold_starts"][0].update(valid="false"), "cold start 0: valid must be true or false"),
    # only a part added later (compile) reads as zero where a file lacks it; a missing decode is no old file
    (lambda r: r["calls"][0]["breakdown_ms"].pop("decode"), "breakdown has ['allocation', 'capture', 'other'"),
])
def test_malformed_files_are_refused_with_the_reason(change, message):
    raw = make_result_dict()
    change(raw)
    with pytest.raises(ResultError, match=re.escape(message)):
        Result.from_dict(raw)


def test_non_object_files_are_refused(tmp_path):
    for text in ("null", '"text"', "[1]", "{"):
        path = tmp_path / "r.json"
        path.write_text(text, encoding="utf-8")
        with pytest.raises(ResultError):
            Result.read(path)


def test_validity_is_derived_not_trusted():
    assert make_result().validity_problems() == []
    forged = make_invalid_result_dict()
    forged["valid"] = True  # says valid beside a failed parity check
    result = Result.from_dict(forged)
    problems = result.validity_problems()
    assert not result.is_valid and "contradict" in problems[0] and "1 call(s) without parity" in problems[1]
    failing = make_result_dict()
    failing["failures"] = [{"engine": "graph", "policy": "reuse", "cycle": 0, "phase": "steady", "error": "OOM"}]
    assert "1 failure(s)" in " ".join(Result.from_dict(failing).validity_problems())
    cold = make_result_dict()
    cold["cold_starts"][0]["valid"] = False
    assert "cold-start" in " ".join(Result.from_dict(cold).validity_problems())
    honest = make_result_dict()
    honest["valid"] = False
    assert Result.from_dict(honest).validity_problems() == ["the file says invalid"]


def test_a_cold_starts_lost_parity_or_no_calls_at_all_is_invalid():
    cold = make_result_dict()
    cold["cold_starts"][1]["calls"][0]["parity"]["ok"] = False  # its run says valid: the call's parity decides
    assert Result.from_dict(cold).validity_problems() == ["the file says valid, but its records contradict it",
                                                          "1 cold-start run(s) invalid"]
    empty = make_result_dict()
    empty["calls"] = []
    assert "no measured calls" in Result.from_dict(empty).validity_problems()


@pytest.mark.parametrize("policy", DIAGNOSTIC_POLICIES)
def test_a_diagnostic_policys_stale_replays_are_its_finding_never_a_failure_of_the_run(policy):
    data = make_result_dict()
    stale = copy.deepcopy([c for c in data["calls"] if c["policy"] == "reuse"])
    for call in stale:
        call["policy"] = policy
        call["parity"]["ok"] = False
    data["calls"] += stale
    result = Result.from_dict(data)
    assert result.validity_problems() == [] and f"graph[{policy}]" not in result.checked_variants()
    assert len(result.stale_calls()) == len(stale) and result.unmatched_calls() == []
    data["calls"][0]["parity"]["ok"] = False  # a checked call's mismatch is no stale replay
    assert len(Result.from_dict(data).stale_calls()) == len(stale)


def test_what_a_result_says_of_its_run_at_a_glance():
    raw = make_result_dict()
    raw["metadata"]["workload"].update(requests=5, batch_size=2, batch_sizes=None)
    assert Result.from_dict(raw).batches_per_call == 3  # the last batch holds the fifth request alone
    assert make_result().machine == "CPU: Fixture CPU" and make_result(cuda_graph=True).machine == "NVIDIA H200"


@pytest.mark.parametrize("mismatch, words", [
    ({"kind": "tokens", "request": 56, "step": 33, "engine_token": 22408, "reference_token": 94886,
      "reference_top2_margin": 5.4836e-06},
     "request 56 step 33: token 22408 instead of 94886 (reference top-2 margin 5.48e-06)"),
    ({"kind": "tokens", "request": 2, "step": 7, "engine_token": None, "reference_token": 5},
     "request 2 step 7: token None instead of 5"),
    ({"kind": "response_offset", "request": 3, "engine": 9, "reference": 8}, "request 3: response at 9 instead of 8"),
    ({"kind": "response_offset", "request": 3, "engine": 8, "reference": 8},
     "request 3: the prompt before its response (at 8) differs"),
    ({"kind": "attention_mask", "request": 4, "position": 2}, "request 4: attention mask differs at position 2"),
    ({"kind": "batches", "engine": 1, "reference": 2}, "1 batch(es) instead of generate()'s 2"),
    (None, "no mismatch recorded"),
])
def test_the_first_mismatch_is_named_in_the_validity_problems(mismatch, words):
    data = make_invalid_result_dict()
    call = next(c for c in data["calls"] if not c["parity"]["ok"])
    call["parity"]["mismatch"] = mismatch
    problems = Result.from_dict(data).validity_problems()
    assert problems[0].endswith(f"#{call['index']}: {words})"), problems[0]


def test_queries_follow_run_and_registry_order():
    result = make_result()
    assert result.variants() == ["eager", "graph[recapture]", "graph[reuse]"]
    assert result.phase_groups()[:4] == [(0, "first"), (0, "steady"), (0, "first_after_update"),
                                         (0, "steady_after_update")]
    assert result.samples("graph[reuse]", 0, "first_after_update").values == (60.0,)
    assert result.samples("graph[reuse]", phase=("steady", "steady_after_update")).n == 9
    assert result.samples("nothing") is None
    firsts = result.cold_start_samples()
    assert firsts["eager"].values == (200.0, 210.0, 220.0)


def test_unknown_fields_survive_and_old_cold_start_key_is_read():
    raw = make_result_dict()
    raw["calls"][0]["token_hash"] = "abc"
    raw["future_block"] = {"x": 1}
    result = Result.from_dict(copy.deepcopy(raw))
    assert result.calls[0].extra["token_hash"] == "abc" and result.to_dict() == raw
    assert result.cold_starts[0].variant == raw["cold_starts"][0]["target"]


def test_cold_starts_are_given_with_and_without_initialization():
    raw = make_result_dict()
    for run in raw["cold_starts"]:
        run["startup"] = {"process_startup_ms": 1000.0, "initialization_ms": 400.0}
    raw["cold_starts"][0]["startup"] = None  # a process that reported no start-up is left out of the sum
    result = Result.from_dict(raw)
    plain, initialized = result.cold_start_samples(), result.cold_start_samples(with_initialization=True)
    assert plain["eager"].values == (200.0, 210.0, 220.0)
    assert initialized["eager"].values == (610.0, 620.0)
    raw["cold_starts"][0]["calls"].append({**copy.deepcopy(raw["cold_starts"][0]["calls"][0]), "phase": "steady"})
    assert Result.from_dict(raw).cold_start_samples()["eager"].values == (200.0, 210.0, 220.0)  # first calls only
