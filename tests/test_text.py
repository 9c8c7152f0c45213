"""present/text.py: the console summary, the headline answer and the invalid-result paragraph."""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pandas as pd  # a table's blanks: a nullable integer's NA, a time column's NaT

from result_fixture import (make_invalid_result, make_invalid_result_dict, make_result, make_result_dict, retime,
                            with_control, with_instruments)
from rollout_study import analysis, effects
from rollout_study.present import text
from rollout_study.result import Result
from rollout_study.stats import Ratio


def test_number_formats_every_value_a_reader_sees():
    assert text.number(3181.1851350149) == "3,181.185"
    assert text.number(5160.000000000004) == "5,160.000"
    assert text.number(0.0001) == "0.0001" and text.number(0.01) == "0.010" and text.number(0.0) == "0.000"
    assert text.number(np.int64(88224)) == "88,224" and text.number(np.float64(1.5)) == "1.500"
    assert text.number(None) == "-" and text.number(float("nan")) == "-" and text.number(True) == "yes"
    assert text.number(pd.NA) == "-" and text.number(pd.NaT) == "-"
    assert text.number(1225.6, 0) == "1,226" and text.number("graph[reuse]") == "graph[reuse]"


def test_console_columns_never_run_together():
    data = make_result_dict()
    for variant, ms in (("eager", 3181.1851350149), ("graph[recapture]", 1350.149), ("graph[reuse]", 1350.149)):
        retime(data, variant, "steady", ms)
    summary = text.console_summary(Result.from_dict(data))
    table = summary.split("\nupdate cycle")[0].splitlines()[1:]
    assert "3,181.185" in summary and "1,350.149" in summary
    assert not re.search(r"\.\d{3}[\d,]", "\n".join(table))  # 3181.1851350.149 was the old output
    header, rule = table[0], table[1]
    assert set(rule) == {"-"} and len(rule) == len(header)
    rows = [line for line in table[2:] if line.startswith("graph[reuse]")]
    assert len(rows) == 6 and all(len(line) <= len(header) for line in rows)


def test_console_summary_ends_with_the_answer():
    result = make_result()
    lines = text.console_summary(result).splitlines()
    answer = text.headline_lines(result)
    assert [line.strip() for line in lines[-len(answer):]] == answer
    assert lines[-len(answer) - 1] == "answer:"
    assert "update cycle 0: sgd lr=0.010 loss=6.0000 40.000 ms" in lines


def test_headline_text_of_the_fixture():
    lines = text.headline_text(make_result()).splitlines()
    # Every sample of a phase takes the same time: the intervals have zero width at the ratio, the samples' whole
    # range (3 a side), and say so.
    assert lines[0] == ("graph[recapture]: 5.00x generate()'s speed in steady state "
                        "(95% bootstrap intervals, each its samples' whole range, span 5.00x over its steady phases)")
    each = "95% bootstrap intervals, each its samples' whole range, span"
    assert lines[2] == (f"first call after an update: graph[recapture] 130.000 ms (13.00x steady, {each} 13.00x); "
                        f"graph[reuse] 60.000 ms (6.00x steady, {each} 6.00x); intervals resample the steady samples "
                        "only (the first call is one sample)")
    assert lines[3] == "no control cycle in this run: after-update effects cannot be told from drift"
    assert lines[4] == "training update: first 40.000 ms, later 20.000 ms"
    assert lines[5] == "break-even graph[recapture] vs eager: pays off from 2 rollouts per update"
    assert lines[-2] == "parity: 36/36 calls matched generate(); valid"
    assert lines[-1] == text.NO_GRAPH_NOTE
    assert text.NO_GRAPH_NOTE not in text.headline_text(make_result(cuda_graph=True))


def test_headline_shows_ranges_and_the_bounded_break_even():
    data = retime(retime(make_result_dict(), "eager", "steady_after_update", 80.0, cycle=1),
                  "graph[reuse]", "steady_after_update", 12.0)
    lines = text.headline_lines(Result.from_dict(data))
    assert lines[0] == ("graph[recapture]: 5.00..8.00x generate()'s speed in steady state "
                        "(95% bootstrap intervals, each its samples' whole range, span 5.00..8.00x over its steady "
                        "phases)")
    slower = retime(make_result_dict(), "graph[recapture]", "steady_after_update", 60.0, cycle=1)
    assert text.headline_lines(Result.from_dict(slower))[0].startswith(  # a low end under 1x: no "faster"
        "graph[recapture]: 0.83..5.00x generate()'s speed in steady state")
    assert ("break-even graph[reuse] vs graph[recapture]: only up to U=36 rollouts per update: "
            "its steady state is slower") in lines


def test_invalid_summary_names_the_first_mismatch():
    summary = text.invalid_summary(make_invalid_result())
    assert summary.startswith("the result is invalid")
    assert ("1 call(s) without parity (first: graph[recapture] cycle 0 first_after_update #0: request 1 step 3: "
            "token 17 instead of 42 (reference top-2 margin 0.01))") in summary
    assert 'the first mismatch as recorded: {"kind": "tokens"' in summary
    assert '"reference_top2_tokens": [42, 17]' in summary
    assert text.headline_lines(make_invalid_result())[-2].startswith("parity: 35/36 calls matched generate(); INVALID")
    data = make_invalid_result_dict()
    next(c for c in data["calls"] if not c["parity"]["ok"])["parity"] = None
    summary = text.invalid_summary(Result.from_dict(data))
    assert "first_after_update #0); the first was compared with no reference (none computed)" in summary


def test_headline_and_console_show_controls_intervals_and_timing_flags():
    data = with_instruments(with_control(make_result_dict()), flagged=2)
    retime(data, "eager", "steady_after_update", 80.0, cycle=1)  # a real effect: 1.6x, the control's is 1.0x
    result = Result.from_dict(data)
    lines = text.headline_lines(result)
    assert "after-update effects beyond drift: eager c1 1.600x (whole range 1.600..1.600x) of steady before" in lines
    retime(data, "graph[recapture]", "steady_after_update", 20.0, cycle=1)  # 2.0x, beside generate()'s 1.6x
    beside = text.headline_lines(Result.from_dict(data))
    assert ("after-update effects beyond drift: eager c1 1.600x (whole range 1.600..1.600x) of steady before; "
            "graph[recapture] c1 2.000x (whole range 2.000..2.000x) of steady before (generate() 1.600x in that cycle)"
            ) in beside
    retime(data, "graph[recapture]", "steady_after_update", 16.5, cycle=1)  # 1.65x: within 5% of generate()'s 1.6x
    near = text.headline_lines(Result.from_dict(data))
    assert ("graph[recapture] c1 1.650x (whole range 1.650..1.650x) of steady before (generate() 1.600x in that cycle, "
            "within 5% of it)") in "\n".join(near)
    summary = text.console_summary(result)
    assert "timing check: 2 of 48 calls flagged (measured parts over the measured total by more than 1%)" in summary
    assert "update cycle 0: sgd lr=0.010 loss=6.5000 15.000 ms (control: no optimizer step)" in summary
    assert "steady_after_update (control)" in summary and "1      steady_after_update (control)" not in summary
    quiet = text.headline_lines(Result.from_dict(with_control(make_result_dict())))
    assert ("after-update effects beyond drift: none (1 control cycle(s); every real update with a verdict within a "
            "control's interval or within 5% of its after / before, the margin)") in quiet


def test_ratio_text_says_when_there_is_no_interval():
    assert text.ratio(Ratio(1.0041, 1.001, 1.0086)) == "1.004x (95% 1.001..1.009x)"
    assert text.ratio(Ratio(1.5, None, None)) == "1.500x (no interval: one sample each)"


def test_the_headline_says_when_generate_does_not_reproduce_itself():
    """Token sets of generate()'s calls, per set of weights: one each is silence; more is said, per weights."""
    data = make_result_dict()
    for call in data["calls"]:
        call["tokens_sha256"] = f"{call['engine']}-{call['cycle'] if 'after' in call['phase'] else 'before'}"
    same = Result.from_dict(data)
    assert all(sets == 1 for _, sets, _ in analysis.generate_token_sets(same))
    assert not any("not reproducible" in line for line in text.headline_lines(same))
    eager = [c for c in data["calls"] if c["engine"] == "eager"]
    after = [c for c in eager if c["phase"] == "steady_after_update" and c["cycle"] == 1]
    after[0]["tokens_sha256"] = "a flipped tie"
    # the graph engines' own differences are parity's business, not generate()'s reproducibility
    next(c for c in data["calls"] if c["engine"] == "graph")["tokens_sha256"] = "graph differs"
    sets = analysis.generate_token_sets(Result.from_dict(data))
    calls_after_1 = sum(1 for c in eager if "after" in c["phase"] and c["cycle"] == 1)
    assert ("after update 1", 2, calls_after_1) in sets and sets[0] == ("before the updates", 1, sets[0][2])
    line = [line for line in text.headline_lines(Result.from_dict(data)) if "not reproducible" in line]
    assert line == [f"generate() is not reproducible run to run here: its calls with the same weights gave 2 different "
                    f"token sets in {calls_after_1} calls after update 1 (a mismatch at a near-tie may be that noise, "
                    f"not an engine's error)"]


def test_the_effects_rule_follows_the_margin(monkeypatch):
    assert "differs by more than 5% either way from every control's after / before" in text.effects_rule()
    monkeypatch.setattr(effects, "STEADY_MARGIN", 0.1)
    assert "differs by more than 10% either way" in text.effects_rule()
    assert effects.margin_verdict() == "within drift (within 10% of a control's after / before: the margin)"


def test_the_controls_line_counts_real_cycles_without_a_verdict():
    answer = analysis.headline(Result.from_dict(with_control(make_result_dict())))
    few = [dataclasses.replace(e, verdict=effects.VERDICT_FEW) if e.cycle == 1 else e for e in answer.effects]
    line = text.controls_line(dataclasses.replace(answer, effects=few))
    assert line.endswith("the margin; without a verdict: 3 too few samples)")  # one per variant in cycle 1
    beyond = [dataclasses.replace(e, verdict=effects.VERDICT_REAL) if e.cycle == 2 else e for e in few]
    line = text.controls_line(dataclasses.replace(answer, effects=beyond))
    assert line.startswith("after-update effects beyond drift: eager c2") and line.endswith(
        "; without a verdict: 3 too few samples")
    # generate()'s move beside an effect: no closeness claimed from a ratio that is no positive number
    [one] = [e for e in beyond if e.variant != "eager" and e.cycle == 2][:1]
    nan = dataclasses.replace(one, generate_ratio=effects.Ratio(float("nan"), None, None))
    assert "within" not in text.controls_line(dataclasses.replace(answer, effects=[nan]))


def test_counts_are_singular_only_for_one():
    assert text.counted(1, "cycle") == "1 cycle"
    assert text.counted(0, "cycle") == "0 cycles" and text.counted(1024, "request") == "1,024 requests"
    assert text.counted(None, "cycle") == "- cycles"


def test_only_a_control_cycles_after_update_phases_are_marked_control():
    # cycle 0 holds the before-update phases too: a control there must not relabel them
    assert text.phase_name({0}, 0, "steady") == "steady" and text.phase_name({0}, 0, "first") == "first"
    assert text.phase_name({0}, 0, "first_after_update") == "first_after_update (control)"
    assert text.phase_name({0}, 1, "steady_after_update") == "steady_after_update"


def test_a_pipe_or_newline_in_a_cell_cannot_split_a_markdown_row():
    lines = text.table(["name", "error"], [["graph|reuse", "line one\nline two"]])
    assert lines[2] == "| graph\\|reuse | line one line two |"
    assert len(lines) == 3


def test_one_real_update_still_reports_its_time():
    data = make_result_dict()
    data["calls"] = [c for c in data["calls"] if c["cycle"] == 0]
    data["updates"] = data["updates"][:1]
    data["metadata"]["workload"]["cycles"] = 1
    assert "training update: first 40.000 ms" in text.headline_lines(Result.from_dict(data))


def test_control_cycles_are_not_counted_among_real_cycles_without_a_verdict():
    answer = analysis.headline(Result.from_dict(with_control(make_result_dict())))
    few = [dataclasses.replace(e, verdict=effects.VERDICT_FEW) for e in answer.effects]
    assert any(e.control for e in few)
    # two real cycles of three variants; the control cycle's three are no real update's missing verdict
    assert text.controls_line(dataclasses.replace(answer, effects=few)).endswith(
        "without a verdict: 6 too few samples)")


def test_kernel_time_shows_only_on_the_profiled_phase():
    table = text.console_summary(make_result(cuda_graph=True)).split("\nupdate cycle")[0].splitlines()[3:]
    shown = {tuple(line.split()[:3]) for line in table if line.split()[-2] != "-"}
    assert shown == {("eager", "0", "steady"), ("graph[recapture]", "0", "steady"), ("graph[reuse]", "0", "steady")}


def test_a_failed_update_says_so_in_the_console():
    data = make_result_dict()
    data["updates"][1]["loss"] = None
    assert "update cycle 1: sgd lr=0.010 FAILED (non-finite)" in text.console_summary(Result.from_dict(data))
