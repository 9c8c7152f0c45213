"""What a finished run records about itself (run_record.py), from a study whose records are made by hand: the
cases a CPU run cannot reach (profiles, a diagnostic policy's stale replays) or seldom does (a failure)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rollout_study import run_record
from rollout_study.params import StudyParams
from rollout_study.record import Call, Failure, Parity, Profile
from rollout_study.result import Result

STALE = Parity(False, False, True, True, {"kind": "tokens", "request": 0, "step": 0})


def _call(policy: str, parity: Parity) -> Call:
    return Call(engine="graph", policy=policy, cycle=0, phase="steady", index=0, total_ms=10.0,
                breakdown_ms={"decode": 10.0}, captures=0, memory_bytes={}, generated_tokens=8,
                tokens_per_s=800.0, parity=parity)


def _study(calls, failures=(), profiles=(), mode="measure", requested_prompt_len=None) -> SimpleNamespace:
    """What run_record reads of a finished protocol.Study."""
    params = StudyParams.from_dict({"device": "cpu", "engines": ["graph"], "policy": ["reuse", "unchecked"]})
    return SimpleNamespace(
        params=params, loaded=SimpleNamespace(info={"label": "synthetic", "name": "hand-made"}),
        device=torch.device("cpu"), requested_prompt_len=requested_prompt_len,
        workload=SimpleNamespace(describe=lambda: {"prompt_source": "random"}),
        trainer=SimpleNamespace(describe=lambda: {"update_path": params.update_path}), mode=mode, host_speed={},
        engines=[], untimed_ms={"collect": 1.0}, collector=SimpleNamespace(old_garbage=[]), command="a command",
        calls=list(calls), updates=[], profiles=list(profiles), failures=list(failures), instrumented=[],
        bandwidth=None, tracing=None)


def _result(study) -> Result:
    return run_record.result(study, "2026-01-01T00:00:00", "float32", {"model_load_ms": 5.0}, {"sm_mhz": 1755})


def test_a_diagnostic_policys_stale_replay_leaves_the_run_valid_and_a_failure_does_not():
    ok = Parity(True, True, True, True)
    result = _result(_study([_call("reuse", ok), _call("unchecked", STALE)]))
    assert result.valid and result.is_valid  # the stale replay is the hazard study's finding
    failed = _result(_study([_call("reuse", ok)], failures=[Failure("graph", "reuse", 0, "steady", "OOM")]))
    assert not failed.valid and not failed.is_valid
    stale = _result(_study([_call("reuse", STALE)]))
    assert not stale.valid and not stale.is_valid


def test_only_cycle_zeros_steady_profiles_are_the_results_profile_and_every_profile_is_kept():
    profiles = [Profile("graph", "reuse", 10.0, 8.0, 100, cycle=cycle, phase=phase)
                for cycle, phase in ((0, "first"), (0, "steady"), (0, "steady_after_update"))]
    profiles.append(Profile("graph", "unchecked", 12.0, 9.0, 100, cycle=0, phase="steady"))
    result = _result(_study([], profiles=profiles, mode="profile"))
    assert {variant: (p.cycle, p.phase) for variant, p in result.profile.items()} == {
        "graph[reuse]": (0, "steady"), "graph[unchecked]": (0, "steady")}
    assert len(result.extra["profiles"]) == 4 and result.metadata["mode"] == "profile"


@pytest.mark.parametrize("requested, said", [(None, "auto"), (48, 48)])
def test_the_metadata_says_what_was_asked_and_how_the_run_began(requested, said):
    meta = _result(_study([], requested_prompt_len=requested)).metadata
    assert meta["workload"]["prompt_len_requested"] == said and meta["command"] == "a command"
    assert meta["startup"] == {"model_load_ms": 5.0} and meta["time_start"] == "2026-01-01T00:00:00"
    assert meta["gpu_clocks"]["start"] == {"sm_mhz": 1755}  # the end's are read when the run ends
    assert meta["cuda_graph"] is False and "no CUDA graph" in meta["graph_note"]
