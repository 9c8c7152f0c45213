"""Recapture against reuse phase by phase, and over many runs (policy_gap.py, present/policy_gaps.py)."""
from __future__ import annotations

import random

import pytest

from result_fixture import make_result_dict, set_samples, sweep_point, with_control
from rollout_study import policy_gap
from rollout_study.present import policy_gaps
from rollout_study.result import Result


def test_each_steady_phase_gives_recapture_over_reuse_per_engine_with_both_policies():
    data = with_control(make_result_dict(cuda_graph=True))
    phases = [(0, "steady"), (0, "steady_after_update"), (1, "steady_after_update"), (2, "steady_after_update")]
    for cycle, phase in phases:
        set_samples(data, "graph[recapture]", cycle, phase, [10.2, 10.3, 10.4])
        set_samples(data, "graph[reuse]", cycle, phase, [10.0, 10.1, 10.2])
    result = Result.from_dict(data)
    gaps = policy_gap.phase_gaps(result)
    assert [(g.engine, g.cycle, g.phase) for g in gaps] == [("graph", *phase) for phase in phases]
    assert all(g.ratio.point == pytest.approx(10.3 / 10.1) and g.ratio.low <= g.ratio.point <= g.ratio.high
               for g in gaps)
    # the table names the control cycle's phase as the other tables do, and has a row per phase
    table = policy_gaps.gaps_table([result])
    assert list(table["phase"]) == ["steady", "steady_after_update (control)", "steady_after_update",
                                    "steady_after_update"]
    assert table["recapture / reuse"].tolist() == pytest.approx([10.3 / 10.1] * 4)
    assert policy_gaps.gaps_markdown(result)[0] == f"## {policy_gaps.TITLE}"
    # an engine with one policy only has no row
    only_reuse = make_result_dict(cuda_graph=True)
    only_reuse["calls"] = [c for c in only_reuse["calls"] if c.get("policy") != "recapture"]
    assert policy_gap.phase_gaps(Result.from_dict(only_reuse)) == []
    assert policy_gaps.gaps_markdown(Result.from_dict(only_reuse)) == []


def _run(first: float, last: float) -> Result:
    """A sweep point whose recapture runs `first` x reuse's before the update and `last` x after it."""
    return sweep_point(4, 16, {"eager": (1, 100.0, 1, 100.0), "graph[recapture]": (1, 10.0 * first, 1, 10.0 * last),
                               "graph[reuse]": (1, 10.0, 1, 10.0)})


def test_an_offset_that_stays_through_the_recaptures_correlates_and_one_drawn_anew_does_not():
    rng = random.Random(1)
    offsets = [1 + rng.uniform(-0.03, 0.03) for _ in range(40)]
    (kept,) = policy_gap.persistence([_run(o, o * (1 + rng.gauss(0, 0.002))) for o in offsets])
    assert kept.engine == "graph" and kept.runs == 40 and kept.correlation > 0.95
    low, high = kept.interval
    assert low <= kept.correlation <= high and low > 0.8
    (anew,) = policy_gap.persistence([_run(1 + rng.uniform(-0.03, 0.03), 1 + rng.uniform(-0.03, 0.03))
                                      for _ in range(200)])
    assert abs(anew.correlation) < 0.5 and anew.interval[0] < 0 < anew.interval[1]
    assert kept.text.startswith("graph: over 40 runs, recapture / reuse mean ")
    # under 3 runs, or no spread: no correlation, said so
    (few,) = policy_gap.persistence([_run(1.01, 1.01), _run(0.99, 0.99)])
    assert few.correlation is None and few.interval is None and "too few" in few.text
    (flat,) = policy_gap.persistence([_run(1.0, 1.0 + d) for d in (0.01, 0.02, 0.03)])
    assert flat.correlation is None


def test_pearson_against_numpy():
    np = pytest.importorskip("numpy")
    rng = random.Random(2)
    xs = [rng.random() for _ in range(30)]
    ys = [x + rng.random() for x in xs]
    assert policy_gap.pearson(xs, ys) == pytest.approx(float(np.corrcoef(xs, ys)[0, 1]))
    assert policy_gap.pearson([1.0, 2.0], [2.0, 1.0]) is None


def test_the_sweep_table_has_a_row_per_engine_over_the_points():
    from rollout_study import sweep_curves as curves
    points = [curves.Point(f"b{i}", _run(1 + i / 100, 1 + i / 100)) for i in range(4)]
    table = policy_gaps.persistence_table(points)
    assert list(table.columns) == policy_gaps.SWEEP_COLUMNS and list(table["engine"]) == ["graph"]
    row = table.iloc[0]
    assert row["points"] == 4 and row["first mean"] == pytest.approx(1.015) and row["correlation"] == pytest.approx(1)
