"""effects.py: control cycles, after-update effects against them, instrumented calls, profiles, timing checks."""
from __future__ import annotations

import pytest

from result_fixture import (INSTRUMENTED, make_result, make_result_dict, retime, set_samples, with_control,
                            with_instruments)
from rollout_study import analysis, effects
from rollout_study.result import Result


def controlled() -> Result:
    return Result.from_dict(with_control(make_result_dict(cuda_graph=True)))


def test_control_cycles_from_updates_and_metadata():
    data = with_control(make_result_dict())
    result = Result.from_dict(data)
    assert effects.control_cycles(result) == {0} and effects.real_cycles(result) == [1, 2]
    data["metadata"]["training"]["control_cycles"] = 0  # the update record alone says so
    assert effects.control_cycles(Result.from_dict(data)) == {0}
    # interleaved: the control is the last update; the metadata's count must not also mark cycle 0
    for update in data["updates"]:
        update["control"] = update["cycle"] == 2
    data["metadata"]["training"]["control_cycles"] = 1
    assert effects.control_cycles(Result.from_dict(data)) == {2}
    for update in data["updates"]:  # a file from before updates said so: the first N the metadata names
        del update["control"]
    assert effects.control_cycles(Result.from_dict(data)) == {0}
    assert effects.control_cycles(make_result()) == set() and effects.real_cycles(make_result()) == [0, 1]


def test_effects_are_drift_when_real_and_control_agree():
    rows = {(e.variant, e.cycle): e for e in effects.effects(controlled())}
    assert rows[("eager", 0)].control and rows[("eager", 0)].verdict == effects.VERDICT_CONTROL
    assert rows[("eager", 1)].verdict == effects.VERDICT_DRIFT and rows[("eager", 1)].ratio.point == 1.0
    assert effects.effects(make_result())[0].verdict == effects.VERDICT_NO_CONTROL


def eager_after(controls: list[list[float]], *real: float) -> dict:
    """The fixture (generate()'s steady before: 50 ms x3) with these after-update samples for each control cycle,
    then every call of each real cycle's steady after the update at that many ms."""
    data = with_control(make_result_dict(), cycles=len(controls))
    for cycle, samples in enumerate(controls):
        set_samples(data, "eager", cycle, "steady_after_update", samples)
    for cycle, ms in enumerate(real, start=len(controls)):
        retime(data, "eager", "steady_after_update", ms, cycle=cycle)
    return data


def eager_rows(controls: list[list[float]], *real: float) -> dict:
    return {e.cycle: e for e in effects.effects(Result.from_dict(eager_after(controls, *real))) if e.variant == "eager"}


def test_a_real_effect_clears_the_control_interval():
    # eager before 50 (x3); control cycle 0 after: 49, 50, 51 -> ratios within 0.98..1.02;
    # real cycle 1 after: 80 (x3) -> 1.6 exactly: beyond drift. Real cycle 2 after: 50.5 x3: within the control's.
    data = eager_after([[49.0, 50.0, 51.0]], 80.0, 50.5)
    rows = eager_rows([[49.0, 50.0, 51.0]], 80.0, 50.5)
    control = rows[0].ratio
    assert 0.98 <= control.low <= 1.0 <= control.high <= 1.02
    assert rows[1].ratio == (1.6, 1.6, 1.6) and rows[1].verdict == effects.VERDICT_REAL
    assert rows[2].verdict == effects.VERDICT_DRIFT
    answer = analysis.headline(Result.from_dict(data))
    assert [(e.variant, e.cycle) for e in answer.beyond_drift] == [("eager", 1)] and answer.controls == 1


def test_an_effect_must_also_clear_the_margin_around_every_control():
    # Control after: 54, 55, 56 over 50 -> 1.1 (interval within 1.08..1.12). Cycle 1: 57.5 -> 1.15, clear of the
    # control's interval and 1.15 beyond 1, yet 1.15 / 1.1 = 1.045 lies within 5% of the control's: drift. Cycle 2:
    # 58 -> 1.16, 1.16 / 1.1 = 1.055: beyond the margin, a real effect.
    rows = eager_rows([[54.0, 55.0, 56.0]], 57.5, 58.0)
    assert rows[0].ratio.high < rows[1].ratio.low  # the interval alone would call it real
    assert rows[1].verdict == effects.margin_verdict()
    assert effects.margin_verdict() == "within drift (within 5% of a control's after / before: the margin)"
    assert rows[2].verdict == effects.VERDICT_REAL
    assert effects.within_margin(1.05) and effects.within_margin(1 / 1.05) and not effects.within_margin(1.051)
    assert effects.within_margin(1.155, 1.1) and not effects.within_margin(1.156, 1.1)  # around the reference


def test_with_several_controls_an_effect_must_clear_the_margin_of_each():
    # Controls after: 49, 50, 51 (1.0) and 55, 56, 57 (1.12). Real cycle 2: 58 -> 1.16, clear of both intervals and
    # 16% from the first control, yet 1.16 / 1.12 = 1.036 from the second: drift. Real cycle 3: 62 -> 1.24, beyond both.
    rows = eager_rows([[49.0, 50.0, 51.0], [55.0, 56.0, 57.0]], 58.0, 62.0)
    assert all(rows[2].ratio.excludes(rows[c].ratio) for c in (0, 1))
    assert rows[2].verdict == effects.margin_verdict()
    assert rows[3].verdict == effects.VERDICT_REAL


def test_a_control_without_a_positive_median_tells_no_effect_apart():
    assert effects.within_margin(1.6, 0.0) and effects.within_margin(float("nan"), 1.0)
    # A control whose after median is 0 ms: its interval is [0, 0], every real cycle clears it; no division by it.
    assert eager_rows([[0.0, 0.0, 0.0]], 80.0)[1].verdict == effects.margin_verdict()


def test_each_effect_carries_generates_move_in_the_same_cycle():
    data = with_control(make_result_dict(cuda_graph=True))
    retime(data, "eager", "steady_after_update", 80.0, cycle=1)  # generate() 1.6x after update 1: the host
    retime(data, "graph[reuse]", "steady_after_update", 20.0, cycle=1)
    rows = {(e.variant, e.cycle): e for e in effects.effects(Result.from_dict(data))}
    assert rows[("eager", 1)].generate_ratio is None  # generate() is not its own gauge
    assert rows[("graph[reuse]", 1)].generate_ratio == rows[("eager", 1)].ratio
    assert rows[("graph[reuse]", 1)].generate_ratio.point == 1.6 and rows[("graph[reuse]", 1)].ratio.point == 2.0
    assert rows[("graph[reuse]", 2)].generate_ratio == rows[("eager", 2)].ratio
    assert rows[("graph[reuse]", 0)].generate_ratio
    without = Result.from_dict(with_control(make_result_dict(cuda_graph=True)))
    without = Result.from_dict({**without.to_dict(), "calls": [c.to_dict() for c in without.calls
                                                               if c.engine != "eager"]})
    assert all(e.generate_ratio is None for e in effects.effects(without))


def test_after_update_costs_and_goals_use_real_cycles_only():
    data = with_control(make_result_dict(cuda_graph=True))
    # A control cycle with an absurd first call and a slow steady state: nothing real may see it.
    retime(data, "graph[reuse]", "first_after_update", 999.0, cycle=0)
    retime(data, "graph[reuse]", "steady_after_update", 20.0, cycle=0)
    result = Result.from_dict(data)
    assert analysis.costs_after_update(result)["graph[reuse]"] == (60.0, 10.0)
    goals = {g.name: g for g in analysis.goals(result)}
    assert "graph[reuse] first call after update 0 vs steady" not in goals
    assert goals["graph[reuse] first call after update 1 vs steady"].measured == pytest.approx(6.0)
    assert goals["graph[reuse] steady after an update within 0.5% of steady before"].met is True
    firsts = {f.variant: f for f in analysis.headline(result).first_after_update}
    assert firsts["graph[reuse]"].ms == analysis.Span(60.0, 60.0)


def test_reuse_drift_goal_reports_the_worst_real_cycle():
    data = with_control(make_result_dict(cuda_graph=True))
    retime(data, "graph[reuse]", "steady_after_update", 10.04, cycle=1)  # 0.4%: within
    retime(data, "graph[reuse]", "steady_after_update", 10.06, cycle=2)  # 0.6%: not
    goal = {g.name: g for g in analysis.goals(Result.from_dict(data))}[
        "graph[reuse] steady after an update within 0.5% of steady before"]
    assert goal.measured == pytest.approx(1.006) and goal.met is False and ("worst: update", 2, "") in goal.inputs
    assert goal.note == "control update 0 moved it 1.000x"  # what drift alone did, beside the miss
    retime(data, "graph[reuse]", "steady_after_update", 10.05, cycle=0)
    drifted = {g.name: g for g in analysis.goals(Result.from_dict(data))}[goal.name]
    assert drifted.note == "control update 0 moved it 1.005x" and drifted.met is False
    for update in data["updates"]:  # a control update that failed wrote nothing to compare: no note from it
        if update["cycle"] == 0:
            update.update(ms=None, applied=False)
    failed = {g.name: g for g in analysis.goals(Result.from_dict(data))}[goal.name]
    assert failed.note == "" and failed.measured == pytest.approx(1.006)
    assert goal.gpu_only


def test_instrumented_calls_profiles_and_timing_flags():
    result = Result.from_dict(with_instruments(with_control(make_result_dict(cuda_graph=True)), flagged=2))
    [row] = effects.instrumented_calls(result)
    assert row.variant == "eager" and row.untouched.median == 51.0 and row.instrumented.median == 55.0
    assert row.cost_ms == INSTRUMENTED["instrument_cost_ms"] and row.cost_share == pytest.approx(4 / 51)
    assert effects.untouched_variants(result) == {"eager"} and effects.untouched_variants(make_result()) == set()
    profiles = effects.all_profiles(result)
    assert len(profiles) == 3 * 4  # 3 variants x (cycle-0 steady + 3 steady-after phases)
    assert [(p.cycle, p.phase) for p in profiles[:4]] == [(0, "steady")] * 3 + [(0, "steady_after_update")]
    assert len(effects.all_profiles(make_result(cuda_graph=True))) == 3  # old files: the cycle-0 profiles
    assert len(effects.timing_checked(result)) == len(result.calls)
    assert len(effects.timing_flagged(result.calls)) == 2
    goal = {g.name: g for g in analysis.goals(result)}["timing: parts within 1% of the measured total on every call"]
    assert goal.met is False and goal.measured == "2/48 flagged" and not goal.gpu_only
    clean = Result.from_dict(with_instruments(make_result_dict()))
    assert {g.name: g for g in analysis.goals(clean)}[goal.name].met is True


def test_no_verdict_from_too_few_samples_and_failed_updates_are_not_real():
    from rollout_study import effects as fx
    from rollout_study.result import Result

    data = with_control(make_result_dict())
    for call in data["calls"]:  # two samples per steady phase: a bootstrap of a median of two says nothing
        if call["phase"] in ("steady", "steady_after_update") and call["index"] >= 2:
            call["index"] = -1
    data["calls"] = [c for c in data["calls"] if c["index"] != -1]
    result = Result.from_dict(data)
    assert {e.verdict for e in fx.effects(result) if not e.control} == {fx.VERDICT_FEW}
    failed = with_control(make_result_dict())
    last = max(u["cycle"] for u in failed["updates"])
    for update in failed["updates"]:
        if update["cycle"] == last:
            update.update(loss=None, ms=None, applied=False)
    failed["failures"] = [{"engine": None, "policy": None, "cycle": last, "phase": "update", "error": "OOM"}]
    assert last not in fx.real_cycles(Result.from_dict(failed))
    assert all(e.cycle != last for e in fx.effects(Result.from_dict(failed)))


def test_a_run_with_interleaved_controls_records_and_reads_them_where_they_ran():
    from rollout_study.params import StudyParams
    from rollout_study.protocol import run_in_process

    params = StudyParams.from_dict({"name": "interleaved", "device": "cpu", "engines": ["eager", "graph"],
                                    "policy": "reuse", "requests": 2, "batch_size": 2, "prompt_len": 8,
                                    "max_new_tokens": 2, "iterations": 3, "cycles": 2, "control_cycles": 1,
                                    "control_placement": "interleaved", "profile": False, "instrument": False})
    result = run_in_process(params)
    assert result.is_valid and [(u.cycle, u.extra["control"]) for u in result.updates] == [(0, False), (1, False),
                                                                                           (2, True)]
    assert result.metadata["training"]["control_placement"] == "interleaved"
    assert effects.control_cycles(result) == {2} and effects.real_cycles(result) == [0, 1]
    rows = {(e.variant, e.cycle): e for e in effects.effects(result)}
    assert rows[("eager", 2)].verdict == effects.VERDICT_CONTROL and not rows[("eager", 0)].control


def test_with_interleaved_controls_each_update_is_compared_with_the_phase_just_before_it():
    # Run order: real 0, real 1, control 2. Real update 0 slows generate() 10% for good (50 -> 55 ms): with cycle 0 as
    # every update's before, the control after it would read 1.1x too and call that lasting effect drift.
    data = eager_after([[54.0, 55.0, 56.0]], 55.0, 55.0)  # with_control's cycle 0 is the control: re-placed below
    set_samples(data, "eager", 0, "steady", [49.0, 50.0, 51.0])
    set_samples(data, "eager", 2, "steady_after_update", [54.5, 55.0, 55.5])  # the control, last
    for update in data["updates"]:
        update["control"] = update["cycle"] == 2
    first = {e.cycle: e for e in effects.effects(Result.from_dict(data)) if e.variant == "eager"}
    assert first[0].verdict == effects.VERDICT_DRIFT and first[2].ratio.point == pytest.approx(1.1)
    data["metadata"]["training"]["control_placement"] = "interleaved"
    placed = Result.from_dict(data)
    rows = {e.cycle: e for e in effects.effects(placed) if e.variant == "eager"}
    assert rows[0].before.median == 50.0 and rows[1].before.median == rows[2].before.median == 55.0
    assert rows[2].control and rows[2].ratio.point == 1.0
    assert rows[0].verdict == effects.VERDICT_REAL and rows[1].verdict == effects.VERDICT_DRIFT
    assert effects.before_text(placed) == "the steady phase just before the update"
    assert effects.before_text(Result.from_dict({**data, "metadata": {**data["metadata"], "training": {}}})) == \
        "cycle 0 steady"


def test_an_effect_inside_a_noisy_controls_interval_is_drift_though_it_clears_a_tight_ones():
    # Controls after: 50 x3 (1.0, tight) and 40, 55, 70 (1.1, interval 0.8..1.4). Real cycle 2: 65 -> 1.3, clear of
    # the tight control's interval and beyond the margin of both, yet inside the noisy one's: not clear of every
    # control's interval, so drift. A noisy control is the evidence that the host drifted that much.
    rows = eager_rows([[50.0, 50.0, 50.0], [40.0, 55.0, 70.0]], 65.0)
    assert rows[2].ratio.excludes(rows[0].ratio) and rows[1].ratio.contains(rows[2].ratio.point)
    assert not any(effects.within_margin(rows[2].ratio.point, rows[c].ratio.point) for c in (0, 1))
    assert rows[2].verdict == effects.VERDICT_DRIFT


def test_no_verdict_where_the_steady_phase_before_has_too_few_samples():
    # after the update 3 samples (enough), before it 2: a median of two says nothing, whichever side it is on
    data = with_control(make_result_dict())
    data["calls"] = [c for c in data["calls"] if not (c["phase"] == "steady" and c["index"] >= 2)]
    rows = [e for e in effects.effects(Result.from_dict(data)) if not e.control]
    assert rows and all(e.before.n == 2 and e.after.n >= 3 for e in rows)
    assert {e.verdict for e in rows} == {effects.VERDICT_FEW}


@pytest.mark.parametrize("marker", ["not applied", "no time", "failure record"])
def test_each_mark_of_a_failed_update_alone_makes_its_cycle_not_real(marker):
    # a run records all three together today; each alone must still count (an update refused after its write is
    # applied yet has no time, and older or merged files may carry one mark without the others)
    data = with_control(make_result_dict())
    last = max(u["cycle"] for u in data["updates"])
    (update,) = [u for u in data["updates"] if u["cycle"] == last]
    update["applied"] = marker != "not applied"
    if marker == "no time":
        update["ms"] = None
    if marker == "failure record":
        data["failures"] = [{"engine": None, "policy": None, "cycle": last, "phase": "update", "error": "OOM"}]
    result = Result.from_dict(data)
    assert effects.failed_updates(result) == {last}
    assert last not in effects.real_cycles(result) and all(e.cycle != last for e in effects.effects(result))
