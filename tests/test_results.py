import json
import os

import pytest

from rollout_study import results


def minimal_result(total=3.0):
    call = {"engine": "graph", "policy": "reuse", "cycle": 0, "phase": "steady", "index": 0, "total_ms": total,
            "breakdown_ms": {"allocation": 0.0, "warmup": 0.0, "capture": 0.0, "prefill": 1.0, "decode": 1.5,
                             "other": total - 2.5},
            "captures": 0, "memory_bytes": {"allocated": 10, "reserved": 20, "peak_allocated": 15},
            "generated_tokens": 8, "tokens_per_s": 8 / (total / 1e3),
            "parity": {"ok": True, "tokens": True, "attention_mask": True, "response_offsets": True, "mismatch": None}}
    return {"schema_version": results.SCHEMA_VERSION, "valid": True,
            "metadata": {"label": "synthetic", "model": {"name": "tiny"}, "run_name": "t"},
            "calls": [call], "updates": [], "profile": {}, "failures": []}


def test_write_read_round_trip(tmp_path):
    path = tmp_path / "r.json"
    results.write_atomic(minimal_result(), str(path))
    assert results.read(str(path))["calls"][0]["total_ms"] == 3.0
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary file left behind


def test_a_crash_while_writing_leaves_no_partial_file(tmp_path):
    path = tmp_path / "r.json"
    bad = minimal_result()
    bad["calls"][0]["total_ms"] = float("nan")  # refused by the JSON encoder half-way through
    with pytest.raises(ValueError):
        results.write_atomic(bad, str(path))
    assert list(tmp_path.iterdir()) == []
    results.write_atomic(minimal_result(), str(path))
    with pytest.raises(ValueError):
        results.write_atomic(bad, str(path))
    assert json.loads(path.read_text())["calls"][0]["total_ms"] == 3.0  # the old file is intact
    assert os.listdir(tmp_path) == ["r.json"]


def test_validate_checks_breakdown_sum_and_label():
    r = minimal_result()
    r["calls"][0]["breakdown_ms"]["other"] += 1
    with pytest.raises(results.ResultError, match="breakdown sums"):
        results.validate(r)
    r = minimal_result()
    r["metadata"]["label"] = "mixed"
    with pytest.raises(results.ResultError, match="label"):
        results.validate(r)


def test_calls_frame_flattens_every_block():
    frame = results.calls_frame(minimal_result())
    for column in ("decode_ms", "other_ms", "memory_peak_allocated", "parity_ok", "target", "label", "model"):
        assert column in frame.columns
    assert frame.loc[0, "target"] == "graph[reuse]" and frame.loc[0, "label"] == "synthetic"


def test_summary_rows_median_and_iqr():
    r = minimal_result()
    r["calls"] = [dict(minimal_result(t)["calls"][0], index=i) for i, t in enumerate([3.0, 4.0, 5.0, 100.0])]
    row = results.summary_rows(r)[0]
    assert row["median_ms"] == 4.5 and row["samples"] == 4 and row["wide_iqr"]
