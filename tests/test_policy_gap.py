"""Recapture against reuse phase by phase, and over many runs (policy_gap.py, present/policy_gaps.py)."""
from __future__ import annotations

import random

import pytest

from result_fixture import make_result_dict, set_samples, sweep_point, with_control
from rollout_study import policy_gap
from rollout_study import sweep_curves as curves
from rollout_study.present import notebook, policy_gaps
from rollout_study.result import Result

PHASES = [(0, "steady"), (0, "steady_after_update"), (1, "steady_after_update"), (2, "steady_after_update")]


def _with_gaps(gaps: list[float]) -> dict:
    """The fixture's GPU run with a control cycle: reuse 10.0, 10.1, 10.2 ms in every steady phase and recapture
    that times each phase's gap (PHASES' order)."""
    data = with_control(make_result_dict(cuda_graph=True))
    for (cycle, phase), gap in zip(PHASES, gaps):
        set_samples(data, "graph[recapture]", cycle, phase, [10.0 * gap, 10.1 * gap, 10.2 * gap])
        set_samples(data, "graph[reuse]", cycle, phase, [10.0, 10.1, 10.2])
    return data


def test_each_steady_phase_gives_recapture_over_reuse_per_engine_with_both_policies(tmp_path):
    result = Result.from_dict(_with_gaps([1.02] * 4))
    gaps = policy_gap.phase_gaps(result)
    assert [(g.engine, g.cycle, g.phase) for g in gaps] == [("graph", *phase) for phase in PHASES]
    assert all(g.ratio.point == pytest.approx(1.02) and g.ratio.low <= g.ratio.point <= g.ratio.high for g in gaps)
    # the table names the control cycle's phase as the other tables do, and has a row per phase
    table = policy_gaps.gaps_table([result])
    assert list(table["phase"]) == ["steady", "steady_after_update (control)", "steady_after_update",
                                    "steady_after_update"]
    assert table["recapture / reuse"].tolist() == pytest.approx([1.02] * 4)
    assert policy_gaps.gaps_markdown(result)[0] == f"## {policy_gaps.TITLE}"
    assert any(b.text.startswith(policy_gaps.TITLE) for b in notebook.run_blocks(result, str(tmp_path)))
    # an engine with one policy only has no row, no section and no block
    only_reuse = make_result_dict(cuda_graph=True)
    only_reuse["calls"] = [c for c in only_reuse["calls"] if c.get("policy") != "recapture"]
    alone = Result.from_dict(only_reuse)
    assert policy_gap.phase_gaps(alone) == [] and policy_gaps.gaps_markdown(alone) == []
    assert not any(b.text.startswith(policy_gaps.TITLE) for b in notebook.run_blocks(alone, str(tmp_path)))


def test_before_is_cycle_0s_steady_phase_and_after_the_last_phase_after_an_update():
    # the control's and the middle phase's gaps are neither
    assert policy_gap.before_and_after(Result.from_dict(_with_gaps([1.01, 1.05, 1.04, 0.99]))) == {
        "graph": (pytest.approx(1.01), pytest.approx(0.99))}
    # without cycle 0's steady phase (its calls failed, say) the run has no pair: no 'before' read from later
    data = _with_gaps([1.01, 1.05, 1.04, 0.99])
    data["calls"] = [c for c in data["calls"] if (c["cycle"], c["phase"]) != (0, "steady")]
    assert policy_gap.before_and_after(Result.from_dict(data)) == {}
    # nor with no phase after an update
    data = _with_gaps([1.01, 1.05, 1.04, 0.99])
    data["calls"] = [c for c in data["calls"] if c["phase"] != "steady_after_update"]
    assert policy_gap.before_and_after(Result.from_dict(data)) == {}


def _run(before: float, after: float) -> Result:
    """A sweep point whose recapture runs `before` x reuse's before the update and `after` x after it."""
    return sweep_point(4, 16, {"eager": (1, 100.0, 1, 100.0),
                               "graph[recapture]": (1, 10.0 * before, 1, 10.0 * after),
                               "graph[reuse]": (1, 10.0, 1, 10.0)})


def test_a_gap_that_stays_through_the_recaptures_correlates_and_one_drawn_anew_does_not():
    rng = random.Random(1)
    offsets = [1 + rng.uniform(-0.03, 0.03) for _ in range(40)]
    (kept,) = policy_gap.persistence([_run(o, o * (1 + rng.gauss(0, 0.002))) for o in offsets])
    assert kept.engine == "graph" and kept.runs == 40 and kept.pearson > 0.95 and kept.spearman > 0.9
    low, high = kept.interval
    assert 0.8 < low <= kept.pearson <= high <= 1
    (anew,) = policy_gap.persistence([_run(1 + rng.uniform(-0.03, 0.03), 1 + rng.uniform(-0.03, 0.03))
                                      for _ in range(100)])
    assert abs(anew.pearson) < 0.3 and anew.interval[0] < 0 < anew.interval[1]
    assert anew.interval[1] - anew.interval[0] < 0.5
    # under 3 runs, or no spread: no correlation; under MIN_RUNS_FOR_INTERVAL: no interval (resamples of a few runs
    # are mostly +-1)
    (few,) = policy_gap.persistence([_run(1.01, 1.01), _run(0.99, 0.99)])
    assert few.pearson is None and few.interval is None
    (flat,) = policy_gap.persistence([_run(1.0, 1.0 + d) for d in (0.01, 0.02, 0.03)])
    assert flat.pearson is None
    short = [_run(1 + d, 1 + d) for d in range(policy_gap.MIN_RUNS_FOR_INTERVAL - 1)]
    (under,) = policy_gap.persistence(short)
    assert under.pearson == pytest.approx(1) and under.interval is None
    (enough,) = policy_gap.persistence(short + [_run(0.5, 0.5)])
    assert enough.interval is not None


def test_one_outlying_run_moves_pearson_more_than_spearman():
    # twelve runs whose gap stays, and one far out before that lands mid-range after
    rows = [_run(1 + d / 100, 1 + d / 100 + 0.001 * (-1) ** d) for d in range(12)] + [_run(1.5, 1.05)]
    (p,) = policy_gap.persistence(rows)
    assert p.pearson < 0.3 and p.spearman > 0.85


def test_pearson_and_spearman_against_numpy():
    np = pytest.importorskip("numpy")
    rng = random.Random(2)
    xs = [rng.random() for _ in range(30)]
    ys = [x + rng.random() for x in xs]
    assert policy_gap.pearson(xs, ys) == pytest.approx(float(np.corrcoef(xs, ys)[0, 1]))
    rx, ry = np.argsort(np.argsort(xs)), np.argsort(np.argsort(ys))
    assert policy_gap.spearman(xs, ys) == pytest.approx(float(np.corrcoef(rx, ry)[0, 1]))
    assert policy_gap.ranks([3.0, 1.0, 3.0, 2.0]) == [3.5, 1.0, 3.5, 2.0]  # ties share their mean rank
    assert policy_gap.pearson([1.0, 2.0], [2.0, 1.0]) is None
    with pytest.raises(ValueError, match="pairs"):
        policy_gap.pearson([1.0, 2.0, 3.0], [1.0, 2.0])


def test_the_sweep_table_has_a_row_per_engine_over_the_points():
    points = [curves.Point(f"b{i}", _run(1 + i / 100, 1 + i / 100)) for i in range(4)]
    table = policy_gaps.persistence_table(points)
    assert list(table.columns) == policy_gaps.SWEEP_COLUMNS and list(table["engine"]) == ["graph"]
    row = table.iloc[0]
    assert row["points"] == 4 and row["before mean"] == pytest.approx(1.015)
    assert row["before sd"] == pytest.approx(0.01118, abs=1e-5)  # the population's: these are every point
    assert row["Pearson"] == pytest.approx(1) and row["Spearman"] == pytest.approx(1)


def test_pearson_stays_within_its_bounds_where_rounding_steps_past_them():
    # Perfectly (anti-)correlated gaps whose sums round to a ratio 2e-16 past 1: the interval and the table read it
    xs = [1.0068, 0.9758, 1.0225, 1.0252]
    assert policy_gap.pearson(xs, xs) == 1.0
    zs = [0.9766, 1.0215, 1.0039, 0.9908, 1.0113, 1.0182]
    assert policy_gap.pearson(zs, [-z for z in zs]) == -1.0


def test_the_sweep_tables_after_columns_are_the_last_phases_and_its_interval_columns_low_then_high():
    # before and after apart, and noisy enough for an interval that is not a point: a swap of either pair shows
    rng = random.Random(3)
    offsets = [1 + rng.uniform(-0.03, 0.03) for _ in range(policy_gap.MIN_RUNS_FOR_INTERVAL + 2)]
    afters = [1.05 + (o - 1) * rng.uniform(0, 1) for o in offsets]
    points = [curves.Point(f"b{i}", _run(o, a)) for i, (o, a) in enumerate(zip(offsets, afters))]
    (p,) = policy_gap.persistence([point.result for point in points])
    row = policy_gaps.persistence_table(points).iloc[0]
    assert row["before mean"] == pytest.approx(sum(offsets) / len(offsets))
    assert row["after mean"] == pytest.approx(sum(afters) / len(afters))
    assert (row["95% low"], row["95% high"]) == p.interval and row["95% low"] < row["95% high"]


def test_a_phase_only_one_policy_measured_has_no_gap():
    # reuse's calls of one phase lost (failed, say): that phase has nothing to compare, the others keep theirs
    data = _with_gaps([1.02] * 4)
    data["calls"] = [c for c in data["calls"]
                     if not (c.get("policy") == "reuse" and (c["cycle"], c["phase"]) == PHASES[2])]
    gaps = policy_gap.phase_gaps(Result.from_dict(data))
    assert [(g.cycle, g.phase) for g in gaps] == [PHASES[0], PHASES[1], PHASES[3]]
