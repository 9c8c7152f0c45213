"""compare.py: two results' workloads and tokens, call by call, from the files alone."""
from __future__ import annotations

import copy
import json

from result_fixture import make_result_dict
from rollout_study.compare import compare, compare_sweeps
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


def test_a_result_from_before_a_parameter_existed_ran_with_its_first_value():
    a = _with_hashes(make_result_dict())
    b = copy.deepcopy(a)
    a["metadata"]["params"].pop("control_placement", None)  # written before control_placement existed
    b["metadata"]["params"]["control_placement"] = "first"
    assert compare(Result.from_dict(a), Result.from_dict(b)).same_workload
    b["metadata"]["params"]["control_placement"] = "interleaved"
    assert not compare(Result.from_dict(a), Result.from_dict(b)).same_workload


def test_files_without_hashes_compare_nothing():
    comparison = compare(Result.from_dict(make_result_dict()), Result.from_dict(make_result_dict()))
    assert comparison.compared == 0 and not comparison.tokens_match and "no calls to compare" in comparison.text()


def _sweep(folder, entries: list[dict], spec: dict | None = None, results: list[dict] | None = None):
    """A sweep folder by hand: sweep.json and, where given, each entry's result."""
    (folder / "points").mkdir(parents=True)
    points = [{"order": i, "slug": f"p{i}", "hash": f"h{i}", "file": f"points/p{i}.json", "status": "valid", **entry}
              for i, entry in enumerate(entries)]
    for point, data in zip(points, results or []):
        (folder / point["file"]).write_text(json.dumps(data), encoding="utf-8")
    record = {"spec": {"name": "sw", "report": "sweep", **(spec or {})}, "wall": {"executor": "local", "seconds": 2.0},
              "points": points}
    (folder / "sweep.json").write_text(json.dumps(record), encoding="utf-8")
    return folder


def test_a_resumed_sweep_that_kept_every_point_ran_the_sweep_files_launcher(tmp_path):
    """A kept entry names no launcher: the spec's is the one, so a fresh sweep reads fresh, not '-'."""
    kept = _sweep(tmp_path / "kept", [{"status": "kept from an earlier run"}] * 2)
    ray = _sweep(tmp_path / "ray", [{"launcher": "fresh"}] * 2)
    comparison = compare_sweeps(kept, ray)
    assert comparison.launchers == ("fresh", "fresh") and "launchers differ" not in comparison.text()
    forked = _sweep(tmp_path / "forked", [{"status": "kept from an earlier run"}] * 2, {"launcher": "fork-server"})
    assert compare_sweeps(forked, ray).launchers == ("fork-server", "fresh")


def _threads(torch_threads: int, omp: str | None, affinity: str | None = None) -> dict:
    data = _with_hashes(make_result_dict())
    data["metadata"]["threads"] = {"torch_threads": torch_threads, "torch_interop_threads": 1,
                                   "OMP_NUM_THREADS": omp, "MKL_NUM_THREADS": None,
                                   **({"cpu_affinity": affinity} if affinity else {})}
    return data


def test_points_run_with_other_thread_settings_are_flagged(tmp_path):
    """2 torch threads locally against 1 under Ray moved every median; compare said nothing."""
    local = _sweep(tmp_path / "local", [{"launcher": "fresh"}] * 2, results=[_threads(2, None)] * 2)
    ray = _sweep(tmp_path / "ray", [{"launcher": "fresh"}] * 2, results=[_threads(1, "1", "0-7")] * 2)
    text = compare_sweeps(local, ray).text()
    assert ("thread settings differ (A: torch 2, OMP -, MKL -; B: torch 1, OMP 1, MKL -, cores 0-7): eager "
            "generate()") in text
    assert " torch 2, OMP -, MKL - " in text.splitlines()[2]  # the table's threads column, under its rule
    assert "thread settings differ" not in compare_sweeps(local, local).text()
    assert "thread settings differ (A: torch 2, OMP -, MKL -; B: torch 1, OMP 1, MKL -, cores 0-7)" in compare(
        Result.from_dict(_threads(2, None)), Result.from_dict(_threads(1, "1", "0-7"))).text()
    older = _with_hashes(make_result_dict())
    older["metadata"].pop("threads", None)  # written before threads were recorded: nothing to tell
    assert "thread settings" not in compare(Result.from_dict(older), Result.from_dict(_threads(1, "1"))).text()


def test_the_first_difference_named_is_the_first_in_run_order_where_several_differ():
    a = _with_hashes(make_result_dict())
    b = copy.deepcopy(a)
    for index in (4, 9):
        b["calls"][index]["tokens_sha256"] = "other"
    comparison = compare(Result.from_dict(a), Result.from_dict(b))
    first, later = (f"cycle {c['cycle']} {c['phase']} #{c['index']}" for c in (b["calls"][4], b["calls"][9]))
    assert comparison.matching == comparison.compared - 2 and first != later
    assert comparison.first_difference.endswith(first)


def test_two_sweeps_agree_only_with_both_wall_times():
    # `compare` exits 0 on agrees: a sweep whose record kept no wall time gives no ratio, so nothing to agree on
    from rollout_study.compare import SweepComparison

    timed = {"executor": "local", "seconds": 2.0}
    assert SweepComparison(("a", "b"), (timed, timed), True, (2, 2)).agrees
    untimed = SweepComparison(("a", "b"), (timed, {"executor": "local"}), True, (2, 2))
    assert untimed.ratio is None and not untimed.agrees
    assert not SweepComparison(("a", "b"), (timed, timed), False, (2, 3)).agrees  # other points: no comparison
