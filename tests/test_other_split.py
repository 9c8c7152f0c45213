"""The report's split of a steady graph call's `other` (present/other_split.py), from calls' recorded splits."""
from __future__ import annotations

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
