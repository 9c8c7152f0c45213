import copy

import pytest

from rollout_study import targets


def call(target, phase, total, cycle=0, captures=0, ok=True):
    engine, _, policy = target.partition("[")
    return {"engine": engine, "policy": policy.rstrip("]") or None, "cycle": cycle, "phase": phase,
            "total_ms": total, "captures": captures, "parity": {"ok": ok}}


def result(calls, profile=None):
    return {"calls": calls, "profile": profile or {}}


def by_name(rows):
    return {r["target"]: r for r in rows}


def test_targets_met_and_missed_are_told_apart():
    calls = [call("eager", "steady", 240.0), call("eager", "steady", 250.0),
             call("graph[reuse]", "steady", 15.0), call("graph[reuse]", "steady", 16.0),
             call("graph[reuse]", "first_after_update", 16.0), call("graph[reuse]", "steady_after_update", 15.0)]
    rows = by_name(targets.check(result(calls, {"graph[reuse]": {"kernel_ms": 12.0, "kernels": 100}})))
    speed = rows["graph[reuse] steady speed-up over eager generate()"]
    assert speed["measured"] == pytest.approx(245 / 15.5) and speed["met"]
    kernel = rows["graph[reuse] steady over summed kernel time"]
    assert kernel["measured"] == pytest.approx(15.5 / 12) and kernel["met"] is True
    first = rows["graph[reuse] first call after update 0 vs steady"]
    assert first["measured"] == pytest.approx(16 / 15) and first["met"]
    assert rows["graph[reuse] captures after an update"]["met"]
    assert rows["parity with generate() on every measured call"]["met"]
    slow = copy.deepcopy(calls)
    slow[4]["total_ms"], slow[4]["captures"], slow[0]["parity"]["ok"] = 30.0, 2, False
    rows = by_name(targets.check(result(slow, {"graph[reuse]": {"kernel_ms": 10.0, "kernels": 100}})))
    assert not rows["graph[reuse] first call after update 0 vs steady"]["met"]
    assert not rows["graph[reuse] captures after an update"]["met"]
    assert not rows["graph[reuse] steady over summed kernel time"]["met"]
    assert not rows["parity with generate() on every measured call"]["met"]


def test_missing_profile_is_not_a_pass():
    rows = by_name(targets.check(result([call("eager", "steady", 10.0), call("graph[recapture]", "steady", 5.0)])))
    assert rows["graph[recapture] steady over summed kernel time"]["met"] is None
