"""present/markdown.py: summary.md and the README's results tables."""
from __future__ import annotations

import os
import re

import pytest

from result_fixture import add_engine, make_invalid_result, make_result, make_result_dict, set_samples, with_control
from rollout_study.present import markdown, run_facts, text
from rollout_study.result import Result

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMITTED = [os.path.join(REPO, "reports", name, "result.json") for name in ("reference-tiny", "pretrained-smollm2")]


def test_summary_starts_with_the_answer():
    result = make_result()
    summary = markdown.summary(result)
    assert summary.startswith("# fixture: synthetic model tiny-llama-fixture\n\n## Answer\n")
    assert summary.index("## Answer") < summary.index("- valid:") < summary.index("## Per variant and phase")
    for line in text.headline_lines(result):
        assert f"- {line}\n" in summary


def test_summary_of_a_cpu_run_does_not_claim_gpu_goals():
    summary = markdown.summary(make_result())
    assert "**no CUDA graph**" in summary
    for row in ("| eager | 0 | first |", "| graph[recapture] | 0 | steady |",
                "| graph[reuse] | 1 | steady_after_update |"):
        assert row in summary
    assert ("| graph[reuse] steady speed-up over eager generate() | 5.000x | >= 12.0x | GPU only, not measured on "
            "CPU |") in summary
    assert "**no**" not in summary and "| no |" not in summary
    assert "| parity with generate() on every measured call | 36/36 | all | yes |  |" in summary


def test_summary_of_a_gpu_run_marks_missed_goals():
    summary = markdown.summary(make_result(cuda_graph=True))
    assert "| graph[reuse] steady speed-up over eager generate() | 5.000x | >= 12.0x | **no** | " in summary
    assert "GPU only" not in summary and "no CUDA graph" not in summary
    assert "## Profiled steady call" in summary


def test_summary_lists_mismatches_failures_and_break_even():
    summary = markdown.summary(make_invalid_result())
    assert "## Parity mismatches\n\n- graph[recapture] first_after_update #0: {" in summary
    assert "| graph[recapture] | eager | 130.000 | 10.000 | 100.000 | 50.000 | pays off from 2 rollouts per update |" \
        in summary


@pytest.mark.parametrize("path", COMMITTED + [os.path.join(REPO, "tests", "data", "old-reference-tiny.json")])
def test_summary_of_committed_results_has_no_raw_floats(path):
    summary = markdown.summary(Result.read(path))
    assert not re.search(r"\d\.\d{6,}", summary)
    assert "| graph[reuse] | graph[recapture] |" in summary and "pays off" in summary


def test_command_line_writes_the_summary(capsys):
    assert markdown.main([COMMITTED[0]]) == 0
    assert capsys.readouterr().out == markdown.summary(Result.read(COMMITTED[0]))
    assert markdown.main([]) == 2


def test_readme_results_take_every_registered_and_new_engine():
    result = Result.from_dict(add_engine(make_result_dict(cuda_graph=True), "graph[reuse]", "newgraph"))
    header = markdown.readme_results(result, with_original=True).splitlines()[0]
    assert header == ("| phase | original eager, A4500 | original graph, A4500 | eager, NVIDIA H200 | "
                      "graph[recapture], NVIDIA H200 | graph[reuse], NVIDIA H200 | newgraph[reuse], NVIDIA H200 |")
    table = markdown.readme_results(result, with_original=False)
    assert "| first after update | 100.000 | 130.000 | 60.000 | 60.000 |" in table
    # 3 speed-ups, 3 kernel ratios, 2 first calls x 2 reuse variants, 2 capture counts, 2 after/before, timing,
    # parity: 16 goals; met: both reuse variants' captures and after/before (10 ms both), and parity.
    assert "goals met 5/16" in table


def test_readme_figures_are_the_committed_results():
    """Every results table in the README is regenerated from the result file committed beside it."""
    readme = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    blocks = re.findall(r"<!-- readme-results (\S+)( original)? -->\n(.*?)\n<!-- end readme-results -->", readme, re.S)
    assert blocks, "the README has no results tables"
    for name, original, table in blocks:
        result = Result.read(os.path.join(REPO, "reports", name, "result.json"))
        assert result.metadata["hardware"]["gpu"], f"{name}: README figures must come from a GPU run"
        assert table == markdown.readme_results(result, with_original=bool(original))


def test_summary_of_a_current_run_has_effects_instruments_profiles_and_timing():
    from result_fixture import with_control, with_instruments
    summary = markdown.summary(Result.from_dict(with_instruments(with_control(make_result_dict(cuda_graph=True)),
                                                                 flagged=1)))
    assert "| eager | 0 | control | 50.000 | 50.000 | 1.000 | 1.000 | 1.000 | - | control (drift) |" in summary
    assert ("| graph[reuse] | 1 | real | 10.000 | 10.000 | 1.000 | 1.000 | 1.000 | 1.000 | within drift (control) |"
            in summary)  # generate()'s after / before in that cycle beside it
    assert "differs by more than 5% either way from every control's after / before (the margin" in summary
    # prefill 5, decode 40, other 10; untouched median 51, instrumented 55, cost 4 = 7.843% of 51.
    assert "| eager | 5.000 | 40.000 | 10.000 | 51.000 | 55.000 | 4.000 | 7.843 |" in summary
    assert "| graph[reuse] | 0 | steady_after_update (control) | 11.000 | 5.000 | 1,000 | 10.000 | 2.000 |" in summary
    assert "## Profiled steady call" not in summary  # every profile is in the new section instead
    assert "Timing check: 1 of 48 calls flagged" in summary and "Measured calls of eager are untouched" in summary
    assert "| timing: parts within 1% of the measured total on every call | 1/48 flagged | 0 flagged | **no** |" \
        in summary
    assert "| 0 | sgd | 0.010 | 6.5000 | 15.000 | control |" in summary


OLD_FORMAT = os.path.join(REPO, "tests", "data", "old-reference-tiny.json")  # before controls and instruments


def test_an_old_result_file_still_renders_without_the_new_sections():
    summary = markdown.summary(Result.read(OLD_FORMAT))
    assert "no control in this run" in summary and "## Speed-up over generate() per steady phase" in summary
    assert "## Instrumented calls" not in summary and "## Profiles before and after" not in summary
    assert "## Profiled steady call" in summary and "(control)" not in summary and "Timing check" not in summary


def test_a_run_off_the_default_order_says_so_and_one_on_it_says_nothing():
    assert "- order:" not in markdown.summary(make_result())  # no training keys: an earlier run, the defaults
    data = make_result_dict()
    data["metadata"]["training"].update(control_placement="first", turn_order="fixed")
    assert "- order:" not in markdown.summary(Result.from_dict(data))
    data["metadata"]["training"]["turn_order"] = "reverse"
    (line,) = [x for x in markdown.summary(Result.from_dict(data)).splitlines() if x.startswith("- order:")]
    assert line == ("- order: turns reverse (in each round the engines call in the reverse of the order they were "
                    "built in)")
    for turns in ("rotate", "rotate-run"):  # each order in its own words
        data["metadata"]["training"]["turn_order"] = turns
        (line,) = [x for x in markdown.summary(Result.from_dict(data)).splitlines() if x.startswith("- order:")]
        assert line.startswith(f"- order: turns {turns} (each round starts one engine later")
        assert ("counted over the whole run" in line) == (turns == "rotate-run")
    data["metadata"]["training"].update(control_placement="interleaved", turn_order="fixed")
    (line,) = [x for x in markdown.summary(Result.from_dict(data)).splitlines() if x.startswith("- order:")]
    assert line.startswith("- order: control cycles interleaved with the real updates") and "turns" not in line


def test_the_run_block_counts_in_the_singular_where_there_is_one():
    # A published one-cycle run read "1 cycles": every count word of the Run block agrees with its count.
    data = make_result_dict()
    data["metadata"]["workload"].update(requests=1, max_new_tokens=1, iterations=1, cycles=1)
    data["metadata"]["model"].update(layers=1, parameters=1)
    data["metadata"]["hardware"]["cores"] = 1
    summary = markdown.summary(Result.from_dict(data))
    (model,) = [x for x in summary.splitlines() if x.startswith("- model:")]
    (machine,) = [x for x in summary.splitlines() if x.startswith("- machine:")]
    (workload,) = [x for x in summary.splitlines() if x.startswith("- workload:")]
    assert ", 1 layer, " in model and ", 1 parameter, " in model
    assert machine.endswith(", 1 core")
    assert workload.startswith("- workload: 1 request, batch size 4,")  # the fixture records no prompt source
    assert "prompts" not in workload and " -" not in workload  # left out, not stated as "-"
    assert ", 1 new token, 1 iteration per phase, 1 cycle, no control cycle, seed 0" in workload
    (workload,) = [x for x in markdown.summary(make_result()).splitlines() if x.startswith("- workload:")]
    assert "6 requests," in workload
    assert ", 8 new tokens, 3 iterations per phase, 2 cycles, no control cycle, seed 0" in workload
    assert [text.counted(n, "cycle") for n in (0, 1, 2, 1024, None)] == ["0 cycles", "1 cycle", "2 cycles",
                                                                         "1,024 cycles", "- cycles"]


def test_a_runs_speed_up_intervals_that_are_their_samples_whole_range_are_said_to_be():
    # the fixture's 3 steady calls a phase: every speed-up's interval is its samples' whole range, and the section
    # and the headline say so (stats.whole_range_note, tested there, says nothing where none is)
    summary = markdown.summary(make_result())
    section = summary[summary.index("## Speed-up over generate() per steady phase"):]
    assert section.split("\n")[2].startswith("Every 95% interval here is its samples' whole range (with as few as 3")
    assert "95% bootstrap intervals, each its samples' whole range, span" in summary


def test_a_single_runs_workload_and_update_read_as_a_report_of_several_runs_states_them():
    data = make_result_dict()
    data["metadata"]["workload"].update(true_prompt_lengths=[13, 16], prompt_source="chat")
    result = Result.from_dict(data)
    lines = markdown.summary(result).splitlines()
    shared = run_facts.lines([result], lambda name, values: "")
    (workload,) = [x for x in lines if x.startswith("- workload:")]
    (update,) = [x for x in lines if x.startswith("- update:")]
    assert workload.replace(" (true lengths [13, 16])", "") == "- " + shared[2]
    assert "prompt length 16 (true lengths [13, 16])," in workload and ", chat prompts, " in workload
    assert update.startswith("- " + shared[3] + "; commit ")


def phase_rows(summary: str) -> list[str]:
    """The rows of summary.md's phase table: after its heading, below the table's header and rule."""
    return summary[summary.index("## Per variant and phase"):].split("\n\n")[1].splitlines()[2:]


def test_the_phase_table_marks_the_phase_whose_call_lost_parity_and_no_other():
    # an invalid run's summary.md is what its reader opens to see where parity failed: the phase table's last column
    rows = phase_rows(markdown.summary(make_invalid_result()))
    failed = [row for row in rows if row.rstrip(" |").endswith("FAIL")]
    assert [row.split(" | ")[:3] for row in failed] == [["| graph[recapture]", "0", "first_after_update"]]
    assert len(rows) > len(failed) and all(row.rstrip(" |").endswith("ok") for row in rows if row not in failed)


def test_the_phase_table_flags_a_wide_spread_on_its_phase_alone():
    # the reader's cue that a median is unsteady; before this, only the published summaries carried the marker
    data = set_samples(make_result_dict(), "eager", 0, "steady", [40.0, 50.0, 60.0])  # IQR 10 ms, 20% of 50
    wide = [row.split(" | ")[:5] for row in phase_rows(markdown.summary(Result.from_dict(data))) if "(wide IQR)" in row]
    assert wide == [["| eager", "0", "steady", "3", "50.000 (wide IQR)"]]


def test_the_run_block_counts_the_control_cycles_a_run_made():
    # every other test of the Run block reads a run without controls ("no control cycle"): a run with them says so
    for cycles, said in ((1, ", 1 control cycle, "), (2, ", 2 control cycles, ")):
        summary = markdown.summary(Result.from_dict(with_control(make_result_dict(), cycles=cycles)))
        (workload,) = [x for x in summary.splitlines() if x.startswith("- workload:")]
        assert said in workload and "no control cycle" not in workload


def test_runs_from_before_the_update_path_was_recorded_read_as_what_they_did():
    # such runs updated in place with no master copy: leaving that out would make them look unknown
    (update,) = [line for line in run_facts.lines([make_result()], lambda name, values: "")
                 if line.startswith("update: ")]
    assert update == "update: sgd, lr 0.010, update path in-place, master weights none"


def test_a_differing_setting_names_every_value_up_to_the_limit_without_counting_more():
    values = [str(b) for b in range(run_facts.SHOWN, 0, -1)]
    assert run_facts._values(values) == ", ".join(sorted(values, key=int))
    assert run_facts._values(values + ["99"]).endswith(" and 1 more")
