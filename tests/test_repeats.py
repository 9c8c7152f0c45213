"""Points repeated alone: the rule against two runs alone, what a run ran with, who ran beside it, what a sweep
owes, and a result from other code refused."""
import pytest

from result_fixture import sweep_point as point
from rollout_study import repeats, sweep
from rollout_study.environment import core_count, core_ranges
from rollout_study.stats import ratio_interval

GRAPH = "graph[reuse]"


def _run(graph_ms: list[float], threads: dict | None = None, span: tuple[str, str] | None = None):
    result = point(1, 16, {"eager": (1, 1, 1, 1), GRAPH: (1, 1, 1, 1)},
                   steady_samples={(GRAPH, "steady"): graph_ms, ("eager", "steady"): [50.0, 50.1, 49.9, 50.0, 50.0]})
    result.metadata["threads"] = threads or {"torch_threads": 4, "OMP_NUM_THREADS": "4", "cpu_affinity": "0-3"}
    if span:
        result.metadata["time_start"], result.metadata["time_end"] = span
    return result


TIGHT = [0.0, 0.01, -0.01, 0.005, -0.005, 0.0]  # six samples: the least the rule gives a verdict from


def _at(ms: float) -> list[float]:
    return [ms + d for d in TIGHT]


def test_a_phase_moved_only_when_the_side_by_side_median_lies_beyond_every_run_alone():
    side = _run(_at(12.0))
    between = {s.variant: s for s in repeats.shifts_alone(side, [_run(_at(10.0)), _run(_at(14.0))])
               if s.phase == "steady"}
    # Against either run alone it reads moved (tight calls), but the runs alone differ by more: drift, not a neighbour
    alone = {(s.variant, s.phase): s for s in repeats.shifts(side, _run(_at(10.0)))}
    assert alone[GRAPH, "steady"].verdict == repeats.MOVED
    assert between[GRAPH].verdict == repeats.WITHIN
    assert between[GRAPH].run_to_run.point == pytest.approx(1.4, rel=1e-3)
    beyond = {s.variant: s for s in repeats.shifts_alone(side, [_run(_at(10.0)), _run(_at(10.2))])
              if s.phase == "steady"}
    assert beyond[GRAPH].verdict == repeats.MOVED
    assert beyond[GRAPH].alone.median == pytest.approx(10.2)  # the nearest run alone is the one shown
    assert [a.median for a in beyond[GRAPH].alones] == pytest.approx([10.0, 10.2])


def test_a_shift_smaller_than_the_runs_alone_differ_is_drift_and_three_samples_give_no_verdict():
    # beyond both runs alone, tight calls, yet 0.5% from the nearer while the runs alone differ by 2%: drift
    drift = {s.variant: s for s in repeats.shifts_alone(_run(_at(10.25)), [_run(_at(10.0)), _run(_at(10.2))])
             if s.phase == "steady"}
    assert drift[GRAPH].verdict == repeats.WITHIN and drift[GRAPH].run_to_run.point == pytest.approx(1.02, rel=1e-3)
    # With 3 samples a side the interval of medians is the samples' range at any level: no verdict, however far
    three = [10.0, 10.01, 9.99]
    few = {s.variant: s for s in repeats.shifts_alone(_run([20.0, 20.01, 19.99]), [_run(three), _run(three)])
           if s.phase == "steady"}
    assert few[GRAPH].verdict == repeats.FEW
    entry = {"order": 0, "slug": "p0"}
    (verdict,) = repeats.verdicts([(entry, _run([20.0, 20.01, 19.99]))], [({**entry, "run": n}, _run(three))
                                                                          for n in (1, 2)])
    assert verdict.verdict == "not compared" and verdict.why == "fewer than 6 samples a side"


def test_a_run_alone_with_other_threads_or_cores_is_not_compared():
    side = _run(_at(12.0), span=("2026-12-01T10:00:00+00:00", "2026-12-01T10:05:00+00:00"))
    ray_like = _run(_at(10.0), {"torch_threads": 1, "OMP_NUM_THREADS": "1", "cpu_affinity": "0-3"})
    fewer_cores = _run(_at(10.0), {"torch_threads": 4, "OMP_NUM_THREADS": "4", "cpu_affinity": "0-1"})
    assert repeats.settings_differ(side, _run(_at(10.0))) == ""
    assert repeats.settings_differ(side, ray_like) == ("torch_threads 4 side by side, 1 alone; OMP_NUM_THREADS 4 "
                                                       "side by side, 1 alone")
    assert repeats.settings_differ(side, fewer_cores) == "4 core(s) side by side, 2 alone"
    entry = {"order": 0, "slug": "p0"}
    (verdict,) = repeats.verdicts([(entry, side)], [({**entry, "run": 1}, ray_like), ({**entry, "run": 2}, ray_like)])
    assert verdict.verdict == "not compared" and verdict.why.startswith("ran with other settings: torch_threads 4")


def test_how_many_points_ran_beside_a_point_comes_from_their_recorded_times():
    side = _run(_at(1.0), span=("2026-12-01T10:00:00+00:00", "2026-12-01T10:05:00+00:00"))
    during = _run(_at(1.0), span=("2026-12-01T10:04:00+00:00", "2026-12-01T10:09:00+00:00"))
    after = _run(_at(1.0), span=("2026-12-01T10:05:00+00:00", "2026-12-01T10:09:00+00:00"))
    points = [({"order": 0}, side), ({"order": 1}, during), ({"order": 2}, after), ({"order": 3}, None)]
    assert repeats.beside(side, points) == 1
    untimed = _run(_at(1.0))
    untimed.metadata["time_end"] = None  # a result written before its end was recorded
    assert repeats.beside(side, [({"order": 0}, side), ({"order": 1}, untimed)]) is None


def test_a_sweep_owes_two_runs_alone_per_repeated_point_and_older_records_one():
    spec = {"report": "sweep", "repeat_alone": 2}
    one = [{"order": 0, "run": 1, "slug": "a", "status": "valid"},
           {"order": 0, "run": 2, "slug": "a", "status": "valid"},
           {"order": 3, "run": 1, "slug": "b", "status": "valid"}]
    assert repeats.problems({"spec": spec, "repeats": {"points": one}}) == [
        "repeat_alone is 2 (2 run(s) alone each) but 1 point(s) lack their runs (resume the sweep with --into)"]
    legacy = [{k: v for k, v in e.items() if k != "run"} for e in one[1:]]
    legacy[0]["order"] = 0
    assert repeats.problems({"spec": spec, "repeats": {"points": legacy}}) == []
    skipped = [{"order": 5, "run": 1, "slug": "c", "status": repeats.NOT_REPEATED}] + one[:2]
    assert repeats.problems({"spec": spec, "repeats": {"points": skipped}}) == []


def test_a_point_that_ran_other_code_is_recorded_failed_not_kept(tmp_path):
    spec = sweep.SweepSpec.from_dict({"name": "other", "sweep": {"batch_size": [1]}, "device": "cpu"})
    result = _run(_at(1.0))

    def launcher(params):
        result.metadata["git"] = {"commit": "abc", "code_sha256": "f" * 64}  # a cluster's other install
        return result

    record = sweep.run_local(spec, tmp_path, progress=False, launcher=launcher)
    (entry,) = record["points"]
    assert entry["status"] == "failed" and "ran other code (fingerprint ffffffffffff)" in entry["error"]
    assert not (tmp_path / entry["file"]).exists()


def test_a_core_set_is_written_as_taskset_writes_it_and_counted_back():
    assert core_ranges([0, 1, 2, 3, 8]) == "0-3,8" and core_ranges([5]) == "5" and core_ranges([]) == ""
    assert core_ranges([4, 0, 2, 3]) == "0,2-4"  # a core missing by one splits the range
    assert [core_count(r) for r in ("0-3,8", "5", "1,3", None)] == [5, 1, 2, None]


def test_each_interval_is_at_the_family_corrected_level_and_a_run_alone_whose_interval_holds_the_side_keeps_it():
    side = _run(_at(12.0))
    rows = repeats.shifts_alone(side, [_run(_at(10.0)), _run(_at(10.2))])
    (graph,) = [s for s in rows if (s.variant, s.phase) == (GRAPH, "steady")]
    # RULE: 1 - FAMILY / n, n the (variant, phase) pairs compared (4 here), not 95% per phase
    level = 1 - repeats.FAMILY / len(rows)
    assert len(rows) == 4 and graph.ratio == ratio_interval(graph.side, graph.alone, level=level)
    assert graph.ratio != ratio_interval(graph.side, graph.alone)  # the two levels give other bounds here
    # A noisy run alone (median 10.5) whose interval holds the side-by-side median: nearest of the two, and 14% from
    # it against a 5% run-to-run drift, yet the side is not beyond every run alone: within the spread, not moved.
    noisy = {(s.variant, s.phase): s for s in repeats.shifts_alone(
        side, [_run(_at(10.0)), _run([8.0, 9.0, 10.5, 10.5, 13.0, 14.0])])}[GRAPH, "steady"]
    assert noisy.alone.median == 10.5 and noisy.ratio.contains(1.0)
    assert noisy.verdict == repeats.WITHIN
    # fewer than MIN_SHIFT_SAMPLES on the side-by-side side alone (3 calls, 6 a run alone) is no verdict either
    few = {(s.variant, s.phase): s for s in repeats.shifts_alone(
        _run([20.0, 20.01, 19.99]), [_run(_at(10.0)), _run(_at(10.2))])}[GRAPH, "steady"]
    assert few.verdict == repeats.FEW


def test_a_point_that_ended_before_a_point_began_did_not_run_beside_it():
    side = _run(_at(1.0), span=("2026-12-01T10:00:00+00:00", "2026-12-01T10:05:00+00:00"))
    before = _run(_at(1.0), span=("2026-12-01T09:50:00+00:00", "2026-12-01T09:59:00+00:00"))
    during = _run(_at(1.0), span=("2026-12-01T09:58:00+00:00", "2026-12-01T10:01:00+00:00"))
    assert repeats.beside(side, [({"order": 0}, side), ({"order": 1}, before)]) == 0
    assert repeats.beside(side, [({"order": 0}, side), ({"order": 1}, before), ({"order": 2}, during)]) == 1
