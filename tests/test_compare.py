"""compare.py: two results' workloads and tokens, call by call, from the files alone."""
from __future__ import annotations

import copy

from result_fixture import make_result_dict
from rollout_study.compare import compare
from rollout_study.result import Result


def _with_hashes(data: dict, salt: str = "") -> dict:
    for i, call in enumerate(data["calls"]):
        call["tokens_sha256"] = f"{salt}{i}"
    data["metadata"]["params"] = {"model": "synthetic", "requests": 6, "seed": 0, "iterations": 3}
    return data


def test_identical_tokens_and_workload():
    a = _with_hashes(make_result_dict())
    b = copy.deepcopy(a)
    b["metadata"]["params"]["iterations"] = 5  # more samples, same generation
    comparison = compare(Result.from_dict(a), Result.from_dict(b))
    assert comparison.same_workload and comparison.tokens_match
    assert comparison.compared == len(a["calls"]) and "same workload" in comparison.text()


def test_one_differing_call_and_a_different_seed_are_named():
    a = _with_hashes(make_result_dict())
    b = copy.deepcopy(a)
    b["calls"][4]["tokens_sha256"] = "other"
    b["metadata"]["params"]["seed"] = 1
    comparison = compare(Result.from_dict(a), Result.from_dict(b))
    assert not comparison.same_workload and comparison.workload_differences == {"seed": (0, 1)}
    assert comparison.matching == comparison.compared - 1 and not comparison.tokens_match
    call = b["calls"][4]
    assert comparison.first_difference.endswith(f"cycle {call['cycle']} {call['phase']} #{call['index']}")


def test_a_control_cycle_makes_a_different_workload():
    a = _with_hashes(make_result_dict())
    b = copy.deepcopy(a)
    b["metadata"]["params"]["control_cycles"] = 1  # its real updates have other cycle numbers
    assert not compare(Result.from_dict(a), Result.from_dict(b)).same_workload


def test_files_without_hashes_compare_nothing():
    comparison = compare(Result.from_dict(make_result_dict()), Result.from_dict(make_result_dict()))
    assert comparison.compared == 0 and not comparison.tokens_match and "no calls to compare" in comparison.text()
