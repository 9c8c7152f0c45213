"""The report's split of a steady graph call's `other` (present/other_split.py), from calls' recorded splits."""
from __future__ import annotations

import copy
import statistics

import pytest

from result_fixture import make_result_dict
from rollout_study.present import markdown, other_split
from rollout_study.result import Result


def _with_splits(variant: str) -> tuple[Result, list[dict]]:
    """The GPU fixture with a split on each of `variant`'s cycle-0 steady calls (each call's own figures)."""
    data = make_result_dict(cuda_graph=True)
    splits = []
    for call in data["calls"]:
        name = call["engine"] + (f"[{call['policy']}]" if call.get("policy") else "")
        if name == variant and call["cycle"] == 0 and call["phase"] == "steady":
            other = call["breakdown_ms"]["other"]
            split = {"before_first_part_ms": 0.5 * other + len(splits), "between_parts_ms": 0.3 * other,
                     "after_last_part_ms": 0.2 * other - len(splits)}
            call["other_split"] = split  # a call's extra fields sit beside its own in the file
            splits.append(split)
    return Result.from_dict(data), splits


def test_rows_are_the_medians_of_the_calls_that_carry_a_split():
    result, splits = _with_splits("graph[reuse]")
    assert len(splits) >= 3
    rows = other_split.split_rows(result)
    assert [row[0] for row in rows] == ["graph[reuse]"]  # the variants without splits have no row
    calls = result.calls_of("graph[reuse]", 0, "steady")
    variant, count, total, other, *shares = rows[0]
    assert count == len(calls) and total == statistics.median(c.total_ms for c in calls)
    assert other == statistics.median(c.breakdown_ms["other"] for c in calls)
    assert shares == [pytest.approx(statistics.median(s[key] for s in splits)) for key in other_split.KEYS]
    frame = other_split.split_table([result])
    assert list(frame.columns) == ["run"] + other_split.COLUMNS and str(frame["calls"].dtype) == "Int64"


def test_the_summary_has_the_section_only_where_calls_were_split():
    result, _ = _with_splits("graph[recapture]")
    lines = other_split.split_markdown(result)
    assert lines[0] == f"## {other_split.TITLE}" and any(line.startswith("| graph[recapture] |") for line in lines)
    plain = Result.from_dict(make_result_dict(cuda_graph=True))
    assert other_split.split_rows(plain) == [] and other_split.split_markdown(plain) == []
    assert f"## {other_split.TITLE}" in markdown.summary(result)
    assert other_split.TITLE not in markdown.summary(plain)


def test_the_report_notebook_has_the_table_only_where_calls_were_split(tmp_path):
    from rollout_study.present import notebook

    result, _ = _with_splits("graph[reuse]")
    blocks = notebook.run_blocks(result, str(tmp_path))
    table = [b for b in blocks if b.text == other_split.TITLE]
    assert len(table) == 1 and list(table[0].body["variant"]) == ["graph[reuse]"]
    assert other_split.NOTE in [b.text for b in blocks]
    plain = Result.from_dict(make_result_dict(cuda_graph=True))
    assert other_split.TITLE not in [b.text for b in notebook.run_blocks(plain, str(tmp_path))]


def test_a_row_counts_and_takes_its_medians_over_the_split_cycle_0_steady_calls_only_each_under_its_own_name():
    """Five cycle-0 steady calls of graph[reuse], four carrying a split, their values skewed (a mean is not their
    median); splits on the steady calls after the updates and on a diagnostic policy's calls as well: none of those
    is counted, and each median sits under the column that names it."""
    data = make_result_dict(cuda_graph=True)
    reuse = [c for c in data["calls"] if (c["engine"], c["policy"], c["phase"]) == ("graph", "reuse", "steady")]
    data["calls"] += [{**copy.deepcopy(reuse[0]), "index": index} for index in range(len(reuse), 5)]
    reuse = [c for c in data["calls"] if (c["engine"], c["policy"], c["phase"]) == ("graph", "reuse", "steady")]
    totals, others = (10.0, 12.0, 13.0, 50.0, 100.0), (3.0, 4.0, 5.0, 20.0, 60.0)
    splits = ((1.0, 0.1, 0.5), (2.0, 0.2, 0.6), (3.0, 0.4, 0.9), (30.0, 5.0, 9.0))
    for call, total, other in zip(reuse, totals, others):
        call["total_ms"] = total
        call["breakdown_ms"].update(prefill=0.0, decode=total - other, other=other)
    for call, split in zip(reuse, splits):  # the fifth call has none
        call["other_split"] = dict(zip(("before_first_part_ms", "between_parts_ms", "after_last_part_ms"), split))
    unchecked = [{**copy.deepcopy(c), "policy": "unchecked"} for c in reuse[:4]]
    later = [c for c in data["calls"] if c["policy"] == "reuse" and c["phase"] == "steady_after_update"]
    for call in later:  # steady too, but after an update: not the cycle-0 calls the note names
        call["other_split"] = {key: 500.0 for key in other_split.KEYS}
    data["calls"] += unchecked
    result = Result.from_dict(data)
    assert {c.variant for c in result.calls} >= {"graph[unchecked]"} and later
    frame = other_split.split_table([result])
    assert list(frame["variant"]) == ["graph[reuse]"]  # the diagnostic policy is the hazard report's
    (row,) = frame.to_dict("records")
    assert row["calls"] == 4 and row["total ms"] == 12.5 and row["other ms"] == 4.5
    assert (row["before first part ms"], row["between parts ms"], row["after last part ms"]) == pytest.approx(
        (2.5, 0.3, 0.75))
    assert other_split.NOTE in other_split.split_markdown(result)  # what each column is, in the summary too
