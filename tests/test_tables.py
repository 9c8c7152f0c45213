"""present/tables.py: the report's DataFrames, one label at a time."""
from __future__ import annotations

import pytest

from result_fixture import MODELS, TIMES, make_invalid_result, make_result, make_result_dict
from rollout_study.present import tables
from rollout_study.record import PARTS
from rollout_study.result import Result
from result_fixture import add_engine, retime

ONE_LABEL_TABLES = (tables.summary_table, tables.breakdown_table, tables.memory_table, tables.updates_table,
                    tables.parity_table, tables.mismatch_table, tables.failures_table, tables.cold_start_table,
                    tables.profile_table, tables.break_even_table)


@pytest.mark.parametrize("table", ONE_LABEL_TABLES)
def test_mixing_synthetic_and_pretrained_is_refused(table):
    with pytest.raises(tables.MixedLabelsError):
        table([make_result("synthetic"), make_result("pretrained")])
    assert set(table([make_result("pretrained", "a"), make_result("pretrained", "b")])["run"]) <= {"a", "b"}


def test_summary_quotes_medians_and_flags_wide_iqr():
    data = make_result_dict()
    steady = [c for c in data["calls"] if c["phase"] == "steady" and c["engine"] == "eager"]
    steady[0]["total_ms"], steady[0]["breakdown_ms"]["other"] = 90.0, steady[0]["breakdown_ms"]["other"] + 40.0
    table = tables.summary_table([Result.from_dict(data)])
    row = table[(table["variant"] == "eager") & (table["phase"] == "steady")].iloc[0]
    assert row["median ms"] == 50.0 and row["spread"] == "wide IQR" and row["parity"] == "ok"
    assert list(table["variant"][:3]) == list(TIMES) and set(table["run"]) == {"fixture"}


def test_a_new_engine_appears_after_the_registered_ones():
    result = Result.from_dict(add_engine(make_result_dict(), "graph[reuse]", "newgraph"))
    assert list(tables.summary_table([result])["variant"][:4]) == [*TIMES, "newgraph[reuse]"]
    pairs = tables.break_even_table([result])[["candidate", "baseline"]].values.tolist()
    assert ["newgraph[reuse]", "eager"] in pairs


def test_breakdown_table_parts_sum_to_total():
    table = tables.breakdown_table([make_result(cuda_graph=True)])
    assert list(table[[f"{p} ms" for p in PARTS]].sum(axis=1)) == pytest.approx(list(table["total ms"]))


def test_memory_table_in_mib_and_empty_on_cpu():
    gpu = tables.memory_table([make_result(cuda_graph=True)])
    assert set(gpu["reserved MiB"]) == {128.0} and set(gpu["peak allocated MiB"]) == {110.0}
    assert gpu["allocated MiB"].isna().sum() == 0
    assert tables.memory_table([make_result()])["reserved MiB"].isna().all()


def test_cold_start_table_min_median_max():
    row = tables.cold_start_table([make_result()]).set_index("variant").loc["graph[reuse]"]
    assert (row["processes"], row["min ms"], row["median ms"], row["max ms"]) == (3, 300.0, 310.0, 320.0)
    assert row["in-process first ms"] == 300.0


def test_profile_table_ratio_of_steady_median_to_kernel_time():
    row = tables.profile_table([make_result(cuda_graph=True)]).set_index("variant").loc["graph[recapture]"]
    assert row["steady median ms"] == 10.0 and row["steady / kernel"] == pytest.approx(2.0)
    assert tables.profile_table([make_result()]).empty
    # a profile of the phase after an update sits beside that phase's steady median, not cycle 0's
    data = retime(make_result_dict(cuda_graph=True), "graph[recapture]", "steady_after_update", 20.0, cycle=1)
    data["profile"]["graph[recapture]"].update(cycle=1, phase="steady_after_update")
    row = tables.profile_table([Result.from_dict(data)]).set_index("variant").loc["graph[recapture]"]
    assert row["steady median ms"] == 20.0 and row["steady / kernel"] == pytest.approx(4.0)


def test_break_even_table_has_both_bounds():
    data = retime(make_result_dict(), "graph[reuse]", "steady_after_update", 12.0)
    table = tables.break_even_table([Result.from_dict(data)]).set_index(["candidate", "baseline"])
    assert table.loc[("graph[recapture]", "eager"), "pays off from U"] == 2
    assert table.loc[("graph[reuse]", "graph[recapture]"), "pays off up to U"] == 36
    assert str(table["pays off up to U"].dtype) == "Int64"


def test_invalid_result_shows_mismatch_details():
    mismatches = tables.mismatch_table([make_invalid_result()])
    assert len(mismatches) == 1 and '"reference_token": 42' in mismatches.iloc[0]["details"]
    parity = tables.parity_table([make_invalid_result()])
    row = parity[(parity["variant"] == "graph[recapture]") & (parity["phase"] == "first_after_update")].iloc[0]
    assert (row["calls"], row["matched"]) == (1, 0)


def test_per_phase_tables_go_in_run_order_then_registry_order():
    # the variants' calls of one phase side by side, as the run made them; not one variant's phases after another
    for table in (tables.breakdown_table, tables.memory_table, tables.parity_table):
        frame = table([make_result()])
        assert list(zip(frame["cycle"], frame["phase"], frame["variant"]))[:4] == [
            (0, "first", "eager"), (0, "first", "graph[recapture]"), (0, "first", "graph[reuse]"),
            (0, "steady", "eager")], table.__name__


def test_mismatch_and_parity_tables_tell_what_failed_and_what_was_never_checked():
    row = tables.mismatch_table([make_invalid_result()]).iloc[0]
    assert (row["tokens"], row["attention mask"], row["response offsets"]) == (False, True, True)
    data = make_result_dict()
    unchecked = next(c for c in data["calls"] if c["engine"] == "eager" and c["phase"] == "first")
    unchecked["parity"] = None
    result = Result.from_dict(data)
    parity = tables.parity_table([result]).set_index(["variant", "cycle", "phase"])
    assert tuple(parity.loc[("eager", 0, "first"), ["calls", "matched", "unchecked"]]) == (1, 0, 1)
    assert parity["unchecked"].sum() == 1
    assert list(tables.mismatch_table([result])["details"]) == ["no reference computed"]


def test_failures_table_lists_failed_cold_starts_only():
    data = make_result_dict()
    data["cold_starts"][1]["valid"] = False  # graph[recapture]'s first process, no failure recorded: its parity
    data["cold_starts"][5]["valid"] = False  # graph[reuse]'s second, with the failures that ended it
    data["cold_starts"][5]["failures"] = [{"engine": "graph", "policy": "reuse", "cycle": 0, "phase": "first",
                                           "error": error} for error in ("OutOfMemoryError", "RuntimeError")]
    table = tables.failures_table([Result.from_dict(data)])
    assert table[["where", "variant", "error"]].values.tolist() == [
        ["cold start 0", "graph[recapture]", "parity mismatch"],
        ["cold start 1", "graph[reuse]", "OutOfMemoryError; RuntimeError"]]
    assert tables.failures_table([make_result()]).empty


def test_updates_table_says_whether_the_sync_made_a_new_model_object():
    data = make_result_dict()
    data["updates"][0]["change"] = {"moved": 0, "version_bumped": 3, "same_object": True}
    data["updates"][1]["change"] = {"moved": 5, "version_bumped": 0, "same_object": False}
    table = tables.updates_table([Result.from_dict(data)])
    assert list(table["new model object"]) == [False, True] and list(table["tensors moved"]) == [0, 5]
    assert tables.updates_table([make_result()])["new model object"].isna().all()  # no change recorded


def test_failures_of_a_result_without_calls():
    data = {**make_result_dict(), "calls": [], "updates": [], "cold_starts": [], "valid": False,
            "failures": [{"engine": "eager", "policy": None, "cycle": 0, "phase": "first",
                          "error": "OutOfMemoryError"}]}
    assert list(tables.failures_table([Result.from_dict(data)])["error"]) == ["OutOfMemoryError"]


def test_goals_table_says_which_goals_need_a_gpu():
    table = tables.goals_table(make_result()).set_index("goal")
    assert table.loc["graph[reuse] steady speed-up over eager generate()", "met"] == "GPU only, not measured on CPU"
    assert table.loc["parity with generate() on every measured call", "GPU only"] == "no"
    assert "eager 50.000 ms" in table.loc["graph[reuse] steady speed-up over eager generate()", "detail"]


def test_metadata_names_model_machine_commit_and_command():
    fields = dict(tables.metadata_rows(make_result(cuda_graph=True)))
    assert fields["model"] == MODELS["synthetic"] and fields["machine"] == "NVIDIA H200"
    assert fields["git commit"].startswith("000") and fields["command"] == "fixture"
    assert fields["batch sizes"] == "[4, 2]"  # nested values become one plain cell


def current_result() -> Result:
    from result_fixture import with_control, with_instruments
    return Result.from_dict(with_instruments(with_control(make_result_dict(cuda_graph=True)), flagged=1))


def test_new_tables_refuse_mixed_labels():
    for table in (tables.effects_table, tables.instrumented_table, tables.profiles_table, tables.speedup_table):
        with pytest.raises(tables.MixedLabelsError):
            table([make_result("synthetic"), make_result("pretrained")])


def test_summary_marks_control_phases_and_counts_flagged_calls():
    table = tables.summary_table([current_result()])
    control = table[table["control"]]
    assert set(control["cycle"]) == {0} and set(control["phase"]) == {"first_after_update", "steady_after_update"}
    assert table["timing flagged"].sum() == 1 and str(table["timing flagged"].dtype) == "Int64"
    old = tables.summary_table([make_result()])
    assert not old["control"].any() and old["timing flagged"].isna().all()


def test_effects_speedup_instrumented_and_profiles_tables():
    result = current_result()
    effects = tables.effects_table([result]).set_index(["variant", "cycle"])
    assert effects.loc[("eager", 0), "control"] and effects.loc[("eager", 1), "verdict"] == "within drift (control)"
    assert effects.loc[("graph[reuse]", 2), "after / before"] == 1.0 == effects.loc[("graph[reuse]", 2), "95% low"]
    assert effects[tables.GENERATE_COLUMN].isna().sum() == 3  # generate()'s own rows: it is not its own gauge
    from result_fixture import retime, with_control
    slow_host = Result.from_dict(retime(with_control(make_result_dict(cuda_graph=True)), "eager", "steady_after_update",
                                        75.0, cycle=2))
    gauged = tables.effects_table([slow_host]).set_index(["variant", "cycle"])
    assert gauged.loc[("graph[reuse]", 2), tables.GENERATE_COLUMN] == 1.5 == gauged.loc[("eager", 2), "after / before"]
    speedups = tables.speedup_table([result])
    assert len(speedups) == 2 * 4 and set(speedups["speed-up"]) == {5.0} and set(speedups["95% high"]) == {5.0}
    [row] = tables.instrumented_table([result]).to_dict("records")
    assert (row["prefill ms"], row["decode ms"], row["other ms"]) == (5.0, 40.0, 10.0)
    assert row["instrument cost %"] == pytest.approx(400 / 51) and row["untouched median ms"] == 51.0
    profiles = tables.profiles_table([result])
    assert len(profiles) == 12 and profiles["control"].sum() == 3
    assert set(profiles["steady / kernel"]) == {10.0, 2.0}
    assert tables.instrumented_table([make_result()]).empty
    assert len(tables.profiles_table([make_result(cuda_graph=True)])) == 3  # old files: the cycle-0 profiles
    assert list(tables.updates_table([result])["control"]) == [True, False, False]


def test_goal_detail_states_the_interval_and_what_was_resampled():
    table = tables.goals_table(current_result()).set_index("goal")
    detail = table.loc["graph[reuse] first call after update 1 vs steady", "detail"]
    # one first call against 3 steady ones: the interval is their whole range, named so
    assert "whole range 6.000..6.000 (the numerator is one sample: only the denominator's samples are resampled)" \
        in detail


def test_goals_read_with_their_unit_and_start_up_as_milliseconds_not_json():
    from rollout_study.present import markdown

    goals = tables.goals_table(make_result()).set_index("goal")
    assert goals.loc["graph[recapture] steady speed-up over eager generate()", "measured"] == "5.000x"  # >= 12.0x
    assert goals.loc["graph[reuse] captures after an update", "measured"] == 0  # threshold "0": a count
    assert "| graph[recapture] steady speed-up over eager generate() | 5.000x | >= " in markdown.summary(make_result())
    data = make_result_dict()
    data["metadata"]["startup"] = {"process_startup_ms": 4319.999999999709, "model_load_ms": 12.5}
    rows = dict(tables.metadata_rows(Result.from_dict(data)))
    assert rows["start-up ms"] == "process start-up 4,320, model load 12"
