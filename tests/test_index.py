"""present/index.py: the index is rebuilt from disk, survives unreadable entries and escapes every text."""
from __future__ import annotations

import json
import re

from result_fixture import make_invalid_result_dict, make_result, make_result_dict, write_sweep_folder
from rollout_study.present import index
from rollout_study.files import write_json_atomic
from rollout_study.result import Result


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


def _with(raw: dict, **metadata) -> dict:
    raw["metadata"].update(metadata)
    return raw


def test_every_run_row_names_its_dtype_and_its_code_as_its_metadata_says(tmp_path):
    # The index once gave no single run's dtype (an FP16 and an FP32 run of one model read alike) and named the
    # code of sweeps alone; a tree's state is said as recorded, with who recorded it, unknown included.
    runs = {"old-dirty": ("float16", {"commit": "69e5e9e50e7a23f2", "dirty": True}),
            "on-device": ("float32", {"commit": "014be1bc8c44", "dirty": None, "source": "ROLLOUT_STUDY_COMMIT",
                                      "code_sha256": "8af489cf0db4697b"}),
            "clean": ("bfloat16", {"commit": "abcdef0123456", "dirty": False, "source": "git"})}
    for name, (dtype, git) in runs.items():
        write_json_atomic(_with(make_result_dict("pretrained", name), dtype=dtype, git=git),
                          tmp_path / name / "result.json")
    rows = {r["folder"]: r for r in index.entries(tmp_path)}
    assert rows["old-dirty"]["model"] == "SmolLM2-135M-Instruct (Q4_1 dequantized)\ndtype float16"
    assert rows["on-device"]["model"].endswith("\ndtype float32") and rows["clean"]["model"].endswith("bfloat16")
    assert rows["old-dirty"]["code"] == "commit 69e5e9e50e, tree dirty (source: not recorded), fingerprint not recorded"
    assert rows["on-device"]["code"] == (
        "commit 014be1bc8c, tree unknown (source: ROLLOUT_STUDY_COMMIT), fingerprint 8af489cf0d")
    assert rows["clean"]["code"] == "commit abcdef0123, tree clean (source: git), fingerprint not recorded"
    page = index.page(list(rows.values()))
    assert "<th>code</th>" in page and "dtype float16" in page and "fingerprint 8af489cf0d" in page


def _sweep(folder, points: list[tuple[dict, dict]]) -> None:
    """A curve sweep's folder as `sweep` leaves it, one point per (metadata, git) given."""
    write_sweep_folder(folder, [{**metadata, "git": git} for metadata, git in points])


def test_a_sweep_row_names_its_points_dtypes_code_graph_and_earliest_start_through_the_run_rows_function(tmp_path):
    on_device = {"commit": "8078cf1226aa", "dirty": None, "source": "ROLLOUT_STUDY_COMMIT", "code_sha256": "864c0d61"}
    later = {"commit": "397ead9a63bb", **{k: v for k, v in on_device.items() if k != "commit"}}
    _sweep(tmp_path / "sw", [({"dtype": "float32", "time_start": "2026-01-02T00:00:00+00:00"}, on_device),
                             ({"dtype": "float16", "time_start": "2026-01-01T00:00:00+00:00"}, later),
                             ({"dtype": "float32", "time_start": "2026-01-03T00:00:00+00:00", "cuda_graph": False},
                              later)])
    (row,) = index.entries(tmp_path)
    assert row["answer"].startswith("sweep of 3 points (sweep)")
    assert row["model"] == "tiny-llama-fixture\ndtype float16, float32"
    # the earliest start, not the first point's in the spec's order (a resumed sweep reruns points later)
    assert row["date"] == "2026-01-01T00:00:00+00:00"
    assert row["graph"] == "CUDA graph in 2 of 3 points, the others CPU runs"
    assert row["code"].split("\n") == [
        "commit 8078cf1226, tree unknown (source: ROLLOUT_STUDY_COMMIT), fingerprint 864c0d61: 1 of 3 point(s)",
        "commit 397ead9a63, tree unknown (source: ROLLOUT_STUDY_COMMIT), fingerprint 864c0d61: 2 of 3 point(s)"]
    results = [Result.read(p) for p in sorted((tmp_path / "sw" / "points").iterdir())]
    assert {k: row[k] for k in index.described(results)} == index.described(results)


def test_the_page_says_what_each_column_holds():
    page = index.page([])
    headers = re.findall(r"<th>(.*?)</th>", index._table([]))
    assert set(headers) - {"run", "files"} == {name for name, _ in index.LEGEND}
    assert page.index("<h1>") < page.index('class="legend"')
    legend = dict(index.LEGEND)
    assert "Not a speed-up" in legend["graph"] and "UTC" in legend["date"] and "earliest" in legend["date"]


def test_a_sweep_over_both_labels_is_listed_apart_from_each_labels_runs(tmp_path):
    git = {"commit": "8078cf1226aa", "dirty": False, "source": "git"}
    _sweep(tmp_path / "mixed", [({"label": "pretrained"}, git), ({}, git)])
    make_result("pretrained", "pre").write(tmp_path / "pre" / "result.json")
    rows = {r["folder"]: r for r in index.entries(tmp_path)}
    assert rows["mixed"]["label"] == index.MIXED  # not its first point's label: never among one label's runs
    page = index.page(list(rows.values()))
    listed, body = page.split("</nav>")  # the contents list names the sections first, in their order
    assert listed.index("Pretrained model runs") < listed.index(index.TITLES[index.MIXED])
    assert body.index("Pretrained model runs") < body.index("<td>pre</td>") < body.index(index.TITLES[index.MIXED]) \
        < body.index("<td>mixed</td>")


def test_a_curve_sweeps_failed_point_is_a_warning_not_a_valid_row(tmp_path):
    git = {"commit": "8078cf1226aa", "dirty": False, "source": "git"}
    _sweep(tmp_path / "sw", [({}, git), ({}, git)])
    record = json.loads((tmp_path / "sw" / "sweep.json").read_text(encoding="utf-8"))
    record["points"][1].update(status="failed", error="out of memory")
    write_json_atomic(record, tmp_path / "sw" / "sweep.json")
    (row,) = index.entries(tmp_path)
    assert row["validity"] == "valid sweep; 1 of 2 points failed or invalid (listed in its report)"
    assert '<td class="warn">valid sweep; 1 of 2' in index.page([row])
