"""report.py: pure functions of result dicts (no GPU, no notebook), and the committed source notebooks."""
from __future__ import annotations

import os

import nbformat
import pytest

from result_fixture import MODELS, TIMES, UPDATE_MS, make_invalid_result, make_result
from rollout_study import report, results

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# -- break-even -------------------------------------------------------------------------------
@pytest.mark.parametrize("base_first, base_steady, first, steady, expected", [
    (240.0, 228.0, 262.0, 45.0, 2),   # 262 > 240 at U=1; 262+45=307 <= 240+228=468 at U=2
    (100.0, 10.0, 90.0, 20.0, 1),     # cheaper first call: pays off at once
    (10.0, 5.0, 20.0, 3.0, 6),        # tie at U=6: 20+5*3 = 35 = 10+5*5; U=5: 32 > 30
    (0.3, 0.2, 0.5, 0.1, 3),          # 0.2/0.1 is not exactly 2 in floats; the cost check decides
    (100.0, 10.0, 150.0, 10.0, None), # same steady state: never
    (100.0, 10.0, 150.0, 12.0, None), # slower steady state: never
])
def test_break_even_rollouts_hand_computed(base_first, base_steady, first, steady, expected):
    assert report.break_even_rollouts(base_first, base_steady, first, steady) == expected


def test_break_even_table_from_fixture():
    rows = {(r["candidate"], r["baseline"]): r for r in report.break_even_rows(make_result())}
    # recapture after an update: 130 first, 10 steady, against eager's 100 and 50: 130 > 100, 140 <= 150.
    assert rows[("graph[recapture]", "eager")]["break-even rollouts"] == 2
    assert rows[("graph[reuse]", "eager")]["break-even rollouts"] == 1
    assert rows[("graph[reuse]", "graph[recapture]")]["break-even rollouts"] == 1
    assert rows[("graph[recapture]", "eager")]["candidate first ms"] == 130.0
    frame = report.break_even_table([make_result()])
    assert list(frame["break-even rollouts"]) == [2, 1, 1]


# -- labels -----------------------------------------------------------------------------------
def test_mixing_synthetic_and_pretrained_is_refused():
    mixed = [make_result("synthetic"), make_result("pretrained")]
    for table in (report.summary_table, report.breakdown_table, report.memory_table, report.break_even_table,
                  report.updates_table, report.cold_start_table, report.profile_table):
        with pytest.raises(report.MixedLabelsError):
            table(mixed)
    with pytest.raises(report.MixedLabelsError):
        report.section_blocks("synthetic", mixed, "unused")
    with pytest.raises(report.MixedLabelsError):
        report.section_blocks("synthetic", [make_result("pretrained")], "unused")


def test_group_by_label_splits_and_orders():
    groups = report.group_by_label([make_result("pretrained", "p"), make_result("synthetic", "s")])
    assert list(groups) == ["synthetic", "pretrained"]
    assert [report.run_name(r) for r in groups["pretrained"]] == ["p"]
    assert report.section_heading("pretrained", groups["pretrained"]) == f"Pretrained model: {MODELS['pretrained']}"


# -- timeline ---------------------------------------------------------------------------------
@pytest.mark.parametrize("target", list(TIMES))
def test_timeline_sums_to_calls_plus_updates(target):
    result = make_result()
    frame = report.timeline(result, target)
    calls_total = sum(c["total_ms"] for c in result["calls"] if report.target_of(c) == target)
    assert frame["cumulative ms"].iloc[-1] == pytest.approx(calls_total + sum(UPDATE_MS))
    assert len(frame) == sum(1 for c in result["calls"] if report.target_of(c) == target) + len(UPDATE_MS)


def test_timeline_puts_each_update_before_its_first_call_after_update():
    frame = report.timeline(make_result(), "eager")
    phases = list(frame["phase"])
    assert phases[:5] == ["first", "steady", "steady", "steady", "update"]
    assert phases[5] == "first_after_update"
    assert phases.count("update") == 2 and phases[phases.index("update", 5) + 1] == "first_after_update"


# -- tables -----------------------------------------------------------------------------------
def test_summary_quotes_medians_and_flags_wide_iqr():
    result = make_result()
    steady = [c for c in result["calls"] if c["phase"] == "steady" and c["engine"] == "eager"]
    steady[0]["total_ms"], steady[0]["breakdown_ms"]["other"] = 90.0, steady[0]["breakdown_ms"]["other"] + 40.0
    table = report.summary_table([result])
    row = table[(table["target"] == "eager") & (table["phase"] == "steady")].iloc[0]
    assert row["median ms"] == 50.0 and row["spread"] == "wide IQR"
    assert set(table["run"]) == {"fixture"}


def test_cold_start_table_min_median_max():
    table = report.cold_start_table([make_result()])
    row = table[table["target"] == "graph[reuse]"].iloc[0]
    assert (row["processes"], row["min ms"], row["median ms"], row["max ms"]) == (3, 300.0, 310.0, 320.0)
    assert row["in-process first ms"] == 300.0


def test_cold_start_table_reads_one_process_for_all_targets_too():
    # Older result files ran every target's first call in one process per repeat.
    result = make_result()
    result["cold_starts"] = [{"process": 0, "valid": True, "calls": [run["calls"][0] for run in result["cold_starts"][:3]]}]
    assert list(report.cold_start_table([result])["target"]) == list(TIMES)


def test_profile_table_ratio_of_steady_median_to_kernel_time():
    table = report.profile_table([make_result(cuda_graph=True)])
    row = table[table["target"] == "graph[recapture]"].iloc[0]
    assert row["steady median ms"] == 10.0 and row["steady / kernel"] == pytest.approx(2.0)
    assert report.profile_table([make_result()]).empty


def test_invalid_result_shows_mismatch_details(tmp_path):
    result = make_invalid_result()
    mismatches = report.mismatch_table([result])
    assert len(mismatches) == 1 and '"reference_token": 42' in mismatches.iloc[0]["details"]
    blocks = report.section_blocks("synthetic", [result], str(tmp_path))
    assert any(b.kind == "warning" and b.text.startswith("INVALID") for b in blocks)


def test_breakdown_table_parts_sum_to_total():
    table = report.breakdown_table([make_result(cuda_graph=True)])
    parts = table[[f"{p} ms" for p in results.BREAKDOWN]].sum(axis=1)
    assert list(parts) == pytest.approx(list(table["total ms"]))


def test_metadata_names_model_machine_commit_and_command():
    fields = dict(report.metadata_rows(make_result(cuda_graph=True)))
    assert fields["model"] == MODELS["synthetic"] and fields["machine"] == "NVIDIA H200"
    assert fields["git commit"].startswith("000") and fields["command"] == "fixture"


# -- sections and figures ---------------------------------------------------------------------
def test_section_saves_every_figure_and_titles_carry_label_and_model(tmp_path):
    result = make_result()
    blocks = report.section_blocks("synthetic", [result], str(tmp_path))
    figures = [b for b in blocks if b.kind == "figure"]
    assert len(figures) == len(report.FIGURES)
    assert all(os.path.isfile(b.body) and os.path.dirname(b.body) == str(tmp_path) for b in figures)
    assert blocks[0].kind == "heading" and blocks[0].text.startswith("Synthetic model: ")
    assert any(b.kind == "warning" and b.text == report.NO_GRAPH_NOTE for b in blocks)
    for _, _, make in report.FIGURES:
        title = make(result).get_suptitle()
        assert "Synthetic model" in title and MODELS["synthetic"] in title


def test_graph_note_only_without_cuda_graph(tmp_path):
    blocks = report.section_blocks("pretrained", [make_result("pretrained", cuda_graph=True)], str(tmp_path))
    assert not any(b.text == report.NO_GRAPH_NOTE for b in blocks)
    assert blocks[0].text.startswith("Pretrained model: ")


def test_result_without_calls_still_reports_its_failures(tmp_path):
    result = make_result()
    result.update(calls=[], updates=[], cold_starts=[], valid=False,
                  failures=[{"engine": "eager", "policy": None, "cycle": 0, "phase": "first", "error": "OutOfMemoryError"}])
    blocks = report.section_blocks("synthetic", [result], str(tmp_path))
    failures = [b.body for b in blocks if b.kind == "table" and b.text == "Failures"][0]
    assert list(failures["error"]) == ["OutOfMemoryError"]


def test_empty_section_shows_nothing():
    assert report.section_blocks("pretrained", [], "unused") == []


def test_read_results_round_trip(tmp_path):
    path = results.write_atomic(make_result(), str(tmp_path / "result.json"))
    assert report.read_results([path])[0]["metadata"]["run_name"] == "fixture"


# -- committed notebooks ----------------------------------------------------------------------
@pytest.mark.parametrize("name, parameters", [("study.ipynb", ("params_file", "output_dir", "overrides")),
                                              ("report.ipynb", ("result_files", "figures_dir"))])
def test_source_notebooks_are_committed_without_outputs(name, parameters):
    notebook = nbformat.read(os.path.join(REPO, "notebooks", name), as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.outputs == [] and cell.execution_count is None for cell in code)
    tagged = [cell for cell in code if "parameters" in cell.metadata.get("tags", [])]
    assert len(tagged) == 1 and tagged[0] is code[0]
    assert all(f"{parameter} =" in tagged[0].source for parameter in parameters)
    assert notebook.metadata.kernelspec.name == "python3"
