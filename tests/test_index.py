"""present/index.py: the index is rebuilt from disk, survives unreadable entries and escapes every text."""
from __future__ import annotations

from result_fixture import make_invalid_result_dict, make_result, make_result_dict
from rollout_study.present import index
from rollout_study.files import write_json_atomic


def test_rows_per_label_with_unreadable_and_forged_entries(tmp_path):
    make_result("synthetic", "syn").write(tmp_path / "syn" / "result.json")
    make_result("pretrained", "pre").write(tmp_path / "pre" / "result.json")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "result.json").write_text("null", encoding="utf-8")
    forged = make_invalid_result_dict()
    forged["valid"] = True
    write_json_atomic(forged, tmp_path / "forged" / "result.json")
    (tmp_path / "empty").mkdir()
    rows = {r["folder"]: r for r in index.entries(tmp_path)}
    assert set(rows) == {"syn", "pre", "broken", "forged"}
    assert rows["syn"]["validity"] == "valid" and rows["syn"]["label"] == "synthetic"
    assert rows["broken"]["validity"].startswith("unreadable result")
    assert rows["forged"]["validity"].startswith("INVALID: the file says valid, but its records contradict it")
    page = index.page(list(rows.values()))
    assert page.index("Synthetic model runs") < page.index("Pretrained model runs") < page.index("without a readable")


def test_every_text_is_escaped(tmp_path):
    raw = make_result_dict("synthetic", "x")
    raw["metadata"]["model"]["name"] = "<script>alert(1)</script>"
    raw["metadata"]["time_start"] = "<img src=x onerror=alert(1)>"
    write_json_atomic(raw, tmp_path / "x" / "result.json")
    page = index.page(index.entries(tmp_path))
    assert "<script>" not in page and "<img" not in page
    assert "&lt;script&gt;" in page
