"""The sweep report: curve numbers from hand-made results, the repeat rule, failed points, bad sweep
files, and a two-point CPU sweep through the sweep notebook to HTML."""
import dataclasses
import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from result_fixture import sweep_entries as loaded, sweep_point as point
from rollout_study import cli, repeats, stats, sweep
from rollout_study.compare import compare_sweeps
from rollout_study import sweep_curves as curves
from rollout_study import sweep_crossover as crossing
from rollout_study.present import sweep as report
from rollout_study.present import notebook, sweep_figures, sweep_repeats
from rollout_study.present.notebook import Block
from rollout_study.param_values import ParameterError
from rollout_study.params import StudyParams
from rollout_study.record import ResultError
from rollout_study.result import Result
from rollout_study.stats import Samples, ratio_interval

REPO = Path(__file__).resolve().parent.parent
def test_speedup_latency_capture_and_break_even_are_the_defined_ratios():
    samples = {("eager", "steady"): [100.0, 104.0, 98.0], ("graph[reuse]", "steady"): [20.0, 21.0, 19.5]}
    result = point(4, 16, {"eager": (300, 100, 100, 50), "graph[reuse]": (400, 20, 130, 10)}, requests=8,
                   steady_samples=samples)
    p = curves.Point("b4", result)
    (speedup,) = curves.speedups([p])
    assert speedup.ratio.point == pytest.approx(np.median([100, 104, 98]) / np.median([20, 21, 19.5]))
    assert speedup.ratio.low < speedup.ratio.point < speedup.ratio.high
    latency = {r.variant: r for r in curves.latencies([p])}
    assert latency["eager"].ms_per_token == pytest.approx(100.0 / (8 * 16))  # requests x new tokens
    assert latency["graph[reuse]"].ms_per_step == pytest.approx(20.0 / (2 * 16))  # two batches of 4 per call
    (capture,) = curves.captures([p])
    assert capture.capture_ms == pytest.approx(0.1 * 400)  # the fixture charges 10% of a first graph call
    assert capture.peak_delta_bytes == (60 + 8 - 50) * 2 ** 20 and capture.kept_bytes == 4 * 2 ** 20
    assert capture.reserved_delta_bytes == 10 * 2 ** 20 * 4  # reserved after it minus after eager's first call
    # cost(U): graph 130 + 10(U-1) vs eager 100 + 50(U-1): cheaper from U = 2 (U = 1: 130 > 100)
    (break_even,) = curves.break_evens([p])
    assert (break_even.break_even.first_u, break_even.break_even.last_u) == (2, None)
    assert break_even.steady_ratio == pytest.approx(10 / 50)  # the steady gap the verdict read, in the table too
    assert report.break_even_table([p])["steady / baseline's"].tolist() == [pytest.approx(0.2)]
    (after,) = [r for r in curves.after_update([p]) if r.variant == "graph[reuse]"]
    assert (after.first_ms, after.steady_ms) == (130, 10)


def test_growth_fit_matches_numpy_least_squares():
    steady = {16: 31.0, 64: 70.0, 256: 260.0, 512: 490.0}
    points = [curves.Point(f"n{n}", point(2, n, {"eager": (1, ms, 1, 1)})) for n, ms in steady.items()]
    (row,) = curves.growth(points)
    slope, intercept = np.polyfit(list(steady), list(steady.values()), 1)
    r2 = np.corrcoef(list(steady), list(steady.values()))[0, 1] ** 2
    assert row.fit.slope == pytest.approx(slope) and row.fit.intercept == pytest.approx(intercept)
    assert row.fit.r2 == pytest.approx(r2) and 0.99 < row.fit.r2 < 1
    assert curves.fit_line([16.0, 16.0], [1.0, 2.0]) is None  # one distinct x: no line
    assert curves.fit_line([1.0, 2.0], [5.0, 5.0]).r2 is None  # nothing to explain
    assert report.growth_table(points)["R^2"].tolist() == [pytest.approx(r2)]
    # through two counts the line fits exactly: the table gives no R^2 (it would read 1.000), the line itself still
    two = [p for p in points if p.new_tokens in (16, 512)]
    assert curves.growth(two)[0].fit.r2 == 1.0
    (row,) = report.growth_table(two).to_dict("records")
    assert pd.isna(row["R^2"]) and row["slope ms per token"] == pytest.approx((490 - 31) / (512 - 16))


def _by_batch(graph_ms: dict) -> list:
    return [curves.Point(f"b{b}", point(b, 64, {"eager": (1, 100.0, 1, 1), "graph[recapture]": (1, ms, 1, 1)}))
            for b, ms in graph_ms.items()]


def test_crossover_is_the_first_batch_under_the_threshold_or_none():
    (found,) = crossing.crossovers(_by_batch({1: 20.0, 2: 40.0, 4: 80.0, 8: 90.0}))  # 5x, 2.5x, 1.25x, 1.11x
    assert (found.batch, found.before) == (4, (2, 2.5)) and found.speedup == pytest.approx(1.25)
    assert found.text.startswith("batch 4 (1.25x")
    (absent,) = crossing.crossovers(_by_batch({1: 20.0, 8: 60.0}))  # 5x, 1.67x
    assert absent.batch is None and absent.text == "none in the valid points' range (batches 1 and 8)"
    (at_once,) = crossing.crossovers(_by_batch({2: 90.0, 4: 20.0}))
    assert at_once.batch == 2 and "already under" in at_once.text
    # a larger batch not under again: every larger batch named, the dip between them too; 1.5x is not under
    # 5, 1.25, 2, 1.11, 1.5
    (back,) = crossing.crossovers(_by_batch({1: 20.0, 2: 80.0, 4: 50.0, 8: 90.0, 16: 100 / 1.5}))
    assert (back.batch, [b for b, _ in back.later]) == (2, [4, 8, 16])
    assert back.text == ("batch 2 (1.25x; 5.00x at batch 1); not falling steadily: back at or over 1.5x at a larger "
                         "batch (each larger batch: 2.00x at batch 4, 1.11x at batch 8, 1.50x at batch 16)")
    (edge,) = crossing.crossovers(_by_batch({1: 80.0, 2: 50.0, 4: 90.0, 8: 62.5}))  # 1.25x, 2x, 1.11x, 1.6x
    assert edge.later == ((2, 2.0), (4, pytest.approx(100 / 90)), (8, 1.6))
    (exactly,) = crossing.crossovers(_by_batch({1: 80.0, 2: 100 / 1.5}))  # 1.5x is not under: named
    assert exactly.later == ((2, pytest.approx(1.5)),) and exactly.later[0][1] >= curves.CROSSOVER
    (steady,) = crossing.crossovers(_by_batch({1: 20.0, 2: 80.0, 4: 90.0}))  # under at every larger batch: not named
    assert steady.later == () and steady.text == "batch 2 (1.25x; 5.00x at batch 1)"


def _graph_over_eager(batch: int, samples: list[float], variant: str, tokens: int) -> curves.Point:
    """A point whose eager steady state is 100 ms (x3) and the variant's these samples."""
    return curves.Point(f"b{batch}", point(batch, tokens, {"eager": (1, 100.0, 1, 1), variant: (1, 1, 1, 1)},
                                           steady_samples={(variant, "steady"): samples}))


def test_a_crossing_whose_interval_includes_the_threshold_says_so():
    # eager 100 (x3); graph 67, 68, 72 at batch 2: 1.47x by the medians, its interval about 1.39 to 1.49: under.
    # graph 64, 68, 70 at batch 4: 1.47x again, yet its interval (about 1.43 to 1.56) includes 1.5x: the point alone.
    def at(batch, samples):
        return _graph_over_eager(batch, samples, "graph[recapture]", 64)
    (clear,) = crossing.crossovers([at(1, [20.0] * 3), at(2, [67.0, 68.0, 72.0])])
    assert clear.interval[1] < curves.CROSSOVER and not clear.interval_includes_threshold
    assert clear.text == "batch 2 (1.47x; 5.00x at batch 1)"
    (held,) = crossing.crossovers([at(1, [20.0] * 3), at(4, [64.0, 68.0, 70.0])])
    low, high = held.interval
    assert held.interval_includes_threshold and low < curves.CROSSOVER < high
    # three calls a side: the interval is the samples' whole range (100/70 to 100/64), and says so
    assert (low, high) == (100 / 70, 100 / 64) and held.ratio.whole_range
    assert held.text == f"batch 4 (1.471x [whole range {low:.3f} to {high:.3f}, includes 1.5x]; 5.00x at batch 1)"
    (wider,) = crossing.crossovers([at(4, [64.0, 66.0, 67.0, 68.0, 68.0, 69.0, 70.0, 71.0])])  # eight: a 95% one
    assert not wider.ratio.whole_range and wider.interval_includes_threshold and "[95% " in wider.text
    (first,) = crossing.crossovers([at(4, [64.0, 68.0, 70.0])])
    (other,) = crossing.crossovers([at(4, [90.0] * 3)])
    assert crossing.crossing_summary([first, dataclasses.replace(other, new_tokens=256)]) == (
        f"64 and 256 tokens: batch 4 (1.471x [whole range {low:.3f} to {high:.3f}, includes 1.5x], 1.11x): already "
        "under 1.5x "
        "at the smallest batch with a valid point")
    # the bounds included: an interval that ends at 1.5x includes it
    assert dataclasses.replace(clear, interval=(1.4, curves.CROSSOVER)).interval_includes_threshold
    assert dataclasses.replace(clear, interval=(curves.CROSSOVER, 1.6)).interval_includes_threshold
    # one sample a side: no interval, the point estimate alone, said as before
    (single,) = crossing.crossovers([curves.Point("b1", point(1, 64, {"eager": (1, 100.0, 1, 1),
                                                                    "graph[recapture]": (1, 1, 1, 1)},
                                                             steady_samples={("eager", "steady"): [100.0],
                                                                             ("graph[recapture]", "steady"): [80.0]}))])
    assert single.interval is None and single.text.startswith("batch 1 (1.25x): already under")


def test_a_batch_not_under_the_threshold_by_the_point_alone_is_named_before_the_crossing_or_with_none():
    # graph 64, 66, 68 against eager 100: 1.52x by the medians, its interval includes 1.5x: not under by the point alone
    def at(batch, samples, tokens=64):
        return _graph_over_eager(batch, samples, "graph[recapture]", tokens)
    (none,) = crossing.crossovers([at(1, [20.0] * 3), at(2, [64.0, 66.0, 68.0]), at(4, [50.0] * 3)])
    ((batch, ratio),) = none.over_by_point_alone
    assert none.batch is None and batch == 2 and ratio.low < curves.CROSSOVER < ratio.point
    assert none.text == ("none in the valid points' range (batches 1, 2 and 4), at or over 1.5x by the point "
                         f"estimate alone at batch 2 (1.515x [whole range {ratio.low:.3f} to {ratio.high:.3f}, "
                         "includes 1.5x])")
    (found,) = crossing.crossovers([at(1, [64.0, 66.0, 68.0]), at(2, [20.0] * 3), at(4, [64.0, 66.0, 68.0]),
                                    at(8, [90.0] * 3), at(16, [64.0, 66.0, 68.0])])
    # the one after the crossing is not read
    assert (found.batch, [b for b, _ in found.over_by_point_alone]) == (8, [1, 4])
    assert re.match(r"batch 8 \(1\.11x; 1\.52x at batch 4\), at or over 1\.5x by the point estimate alone at batch "
                    r"1 \(1\.515x \[whole range .*\]\) and 4 \(1\.515x \[whole range .*\]\); not falling steadily: "
                    r"back at or over 1\.5x at a larger batch",
                    found.text)
    (clear,) = crossing.crossovers([at(1, [20.0] * 3), at(2, [60.0] * 3)])
    assert clear.over_by_point_alone == () and clear.text == "none in the valid points' range (batches 1 and 2)"
    # a 'none' with a batch not under by the point alone takes its own clause, apart from a plain one of the same
    # range; the plain ones still share theirs
    (plain,) = crossing.crossovers([at(1, [20.0] * 3, 16), at(2, [60.0] * 3, 16), at(4, [50.0] * 3, 16)])
    assert crossing.crossing_summary([plain, none, dataclasses.replace(plain, new_tokens=256)]) == (
        "16 and 256 tokens: none in the valid points' range (batches 1, 2 and 4); 64 tokens: " + none.text)


def test_which_batches_are_not_under_by_the_point_alone_at_the_bounds(monkeypatch):
    from rollout_study.stats import Ratio

    def crossover(ratios):
        monkeypatch.setattr(crossing, "speedups", lambda points: [curves.SpeedUp("graph[recapture]", 64, b, r)
                                                                  for b, r in ratios.items()])
        (c,) = crossing.crossovers([])
        return c
    # an interval ending at 1.5x includes it; one sample a side (no interval) names nothing; the crossing and later
    # batches are not read
    c = crossover({1: Ratio(1.6, 1.5, 1.7), 2: Ratio(1.6, 1.4, 1.5), 4: Ratio(1.6, None, None), 8: Ratio(1.2, 1.1, 1.6),
                   16: Ratio(1.6, 1.4, 1.7)})
    assert (c.batch, [b for b, _ in c.over_by_point_alone]) == (8, [1, 2])
    assert crossover({1: Ratio(1.4, 1.3, 1.6), 2: Ratio(1.6, 1.4, 1.7)}).over_by_point_alone == ()  # under at once
    assert crossover({1: Ratio(1.6, 1.51, 1.7)}).over_by_point_alone == ()  # clear of 1.5x


def test_the_sweep_definitions_follow_the_margin_when_read(monkeypatch):
    from rollout_study import effects
    assert any("only beyond 5% either way as well" in line for line in report.definitions())
    monkeypatch.setattr(effects, "STEADY_MARGIN", 0.1)
    assert any("only beyond 10% either way as well" in line for line in report.definitions())


def test_the_answer_names_new_token_counts_with_one_crossover_outcome_together():
    c = crossing.Crossover
    swept = (1, 2, 4, 8)
    rows = [c("v", 16, None, None, None, swept), c("v", 64, 1, 0.5, None, swept), c("v", 128, None, None, None, swept),
            c("v", 256, 1, 1.25, None, swept), c("v", 512, 2, 1.11, (1, 1.56), swept),
            c("v", 1024, None, None, None, (1, 2))]  # another range (a failed point at batch 4): apart
    assert crossing.crossing_summary(rows) == (
        "16 and 128 tokens: none in the valid points' range (batch 1 to 8); "
        "64 and 256 tokens: batch 1 (0.50x, 1.25x): already under 1.5x at the smallest batch with a valid point; "
        "512 tokens: batch 2 (1.11x; 1.56x at batch 1); "
        "1024 tokens: none in the valid points' range (batches 1 and 2)")
    assert crossing.crossing_summary(rows[4:5]) == "512 tokens: batch 2 (1.11x; 1.56x at batch 1)"
    # already under at the smallest batch, not under at a larger one: its own clause, from crossovers() itself
    first = crossing.crossovers(_by_batch({1: 80.0, 2: 90.0}))  # 1.25x, 1.11x
    later = crossing.crossovers(_by_batch({1: 80.0, 2: 62.5}))  # 1.25x, 1.6x
    assert later[0].later == ((2, 1.6),)
    assert crossing.crossing_summary(first + [dataclasses.replace(later[0], new_tokens=256)]) == (
        "64 tokens: batch 1 (1.25x): already under 1.5x at the smallest batch with a valid point; "
        "256 tokens: batch 1 (1.25x): already under 1.5x at the smallest batch with a valid point; "
        "not falling steadily: back at or over 1.5x at a larger batch (each larger batch: 1.60x at batch 2)")


def test_models_are_kept_apart_and_failed_or_invalid_points_are_listed_not_plotted():
    good = {f"b{b}": point(b, 16, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (1, 10.0 * b, 1, 1)}) for b in (1, 2)}
    pretrained = point(1, 16, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (1, 30.0, 1, 1)}, label="pretrained")
    in_fp32 = point(1, 16, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (1, 50.0, 1, 1)}, label="pretrained")
    in_fp32.metadata["dtype"] = "float32"
    invalid = copy.deepcopy(good["b2"].to_dict())
    invalid["metadata"]["workload"]["batch_size"] = 8
    invalid["calls"][0]["parity"]["ok"] = False
    invalid["valid"] = False
    points = loaded({**good, "pretrained": pretrained, "fp32": in_fp32, "b8-invalid": Result.from_dict(invalid)})
    points.append(({"order": 9, "slug": "b4", "status": "failed", "error": "OutOfMemoryError: CUDA"}, None))
    usable, rejected = curves.split(points)
    assert [(r.slug, r.status) for r in rejected] == [("b8-invalid", "invalid"), ("b4", "failed")]
    groups = curves.by_model(usable)
    smollm2 = "SmolLM2-135M-Instruct (Q4_1 dequantized)"
    assert list(groups) == [("synthetic", "tiny-llama-fixture", "float16"), ("pretrained", smollm2, "float16"),
                            ("pretrained", smollm2, "float32")]  # one model in two dtypes: two curves
    frame = report.failures_table(rejected)
    assert list(frame["point"]) == ["b8-invalid", "b4"] and "OutOfMemoryError" in frame["why"].iloc[1]
    synthetic = groups[("synthetic", "tiny-llama-fixture", "float16")]
    assert set(report.speedup_table(synthetic)["batch"]) == {1, 2}
    figure = sweep_figures.speedup_figure(synthetic)
    plotted = {x for line in figure.axes[0].lines for x in line.get_xdata() if line.get_label().endswith("tokens")}
    assert plotted == {1, 2}  # neither the failed batch 4 nor the invalid batch 8
    assert figure.get_suptitle().startswith("Synthetic model: tiny-llama-fixture, float16, on")


def test_the_readme_grid_has_a_row_per_variant_and_tokens_and_a_dash_where_no_valid_point_is():
    from rollout_study.present import sweep_readme

    points = loaded({"b1-16": point(1, 16, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (1, 10.0, 1, 1)}),
                     "b2-16": point(2, 16, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (1, 40.0, 1, 1)}),
                     "b1-64": point(1, 64, {"eager": (1, 90.0, 1, 1), "graph[reuse]": (1, 30.0, 1, 1)})},
                    {slug: {"model": "synthetic", "dtype": "float16", "batch_size": int(slug[1]),
                            "max_new_tokens": int(slug[3:])} for slug in ("b1-16", "b2-16", "b1-64")})
    points.append(({"order": 9, "slug": "b2-64", "status": "failed", "error": "OutOfMemoryError",
                    "params": {"model": "synthetic", "dtype": "float16"}}, None))
    points.append(({"order": 10, "slug": "big", "status": "failed", "error": "OutOfMemoryError",
                    "params": {"model": "llama-1b-shape", "dtype": "float32"}}, None))
    wall = {"executor": "local", "gpus": 1, "seconds": 12.0, "total_seconds": 15.0,
            "earlier": [{"executor": "local", "gpus": 1, "seconds": 3.0}]}
    record = {"spec": {"name": "sw", "report": "sweep"}, "executor": "local", "wall": wall}
    block = sweep_readme.readme_block(record, points, folder_name="sw-renamed")
    assert "| variant | new tokens | batch 1 | batch 2 |" in block
    assert "| graph[reuse] | 16 | 10.0x | 2.5x |" in block and "| graph[reuse] | 64 | 3.0x | - |" in block
    assert block.startswith("Synthetic model: tiny-llama-fixture, float16, on")  # one model: its grid
    assert "model llama-1b-shape (float32): no valid point; 1 failed or invalid" in block  # never silently dropped
    assert "model synthetic" not in block  # its failed point aside, it has a grid
    assert ("5 points, 3 valid, 2 failed or invalid; local executor on 1 GPU(s), 15 s of points over 2 "
            "invocation(s)") in block and "`reports/sw-renamed/summary.md`" in block

    no_wall = sweep_readme.readme_block({"spec": {"name": "sw"}, "executor": "local"}, points[:1], "sw")
    assert "local executor, no wall time recorded;" in no_wall  # never a made-up 0 s
    with pytest.raises(ValueError, match="hazards sweep, not a curve sweep"):
        sweep_readme.readme_block({"spec": {"name": "hz", "report": "hazards"}}, points, "hz")
    twice = loaded({"a": point(1, 16, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (1, 10.0, 1, 1)}),
                    "b": point(1, 16, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (1, 20.0, 1, 1)})})
    twice[1][1].metadata["workload"]["requests"] = 2  # another axis: two points at one grid cell
    with pytest.raises(ValueError, match="two points give graph\\[reuse\\] at batch 1"):
        sweep_readme.readme_block({"spec": {"name": "sw"}}, twice, "sw")


def test_the_models_grid_counts_points_under_the_threshold_by_their_point_estimate_alone():
    from rollout_study.present import sweep_readme

    def at(batch, samples):
        return _graph_over_eager(batch, samples, "graph[reuse]", 16)
    # 1.47x with its interval within 1.39..1.49 (clearly under); 1.47x within 1.43..1.56 (under by the point alone);
    # 5x (not under)
    grid = sweep_readme.models_grid(curves.by_model([at(1, [20.0] * 3), at(2, [67.0, 68.0, 72.0]),
                                                     at(4, [64.0, 68.0, 70.0])]))
    assert grid[-1] == "| graph[reuse] | 1.47x to 5.00x (2 of 3 points under 1.5x, 1 by the point estimate alone) |"


def test_the_readme_block_of_several_models_has_a_row_per_variant_and_a_column_per_model_and_the_repeats():
    from rollout_study.present import sweep_readme

    # Three models (the whole sweep; one in two dtypes is two): a row per variant with each model's range, not a
    # grid per model (their subsets' blocks have those), models by size; '-' where one has no such speed-up
    tiny = {"t1": point(1, 16, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (1, 10.0, 1, 1)}),
            "t2": point(2, 16, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (1, 80.0, 1, 1)})}
    small = point(1, 16, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (1, 66.0, 1, 1),
                          "hf-compile": (1, 25.0, 1, 1)}, label="pretrained")
    wider = point(1, 16, {"eager": (1, 150.0, 1, 1), "graph[reuse]": (1, 100.0, 1, 1)}, label="pretrained")
    small.metadata["model"]["parameters"] = 1000  # smaller than the tiny fixture's 557,696: first
    wider.metadata["dtype"] = "float32"
    block = sweep_readme.readme_block({"spec": {"name": "whole", "report": "sweep"}},
                                      loaded({**tiny, "p16": small, "p32": wider}), "whole")
    assert "batch 1 |" not in block and "Steady speed-up over eager generate() per model, on " in block
    rows = [line for line in block.splitlines() if line.startswith("| ")]
    smollm2 = "pretrained SmolLM2-135M-Instruct (Q4_1 dequantized)"
    assert rows[0] == (f"| variant | {smollm2} (float16, 0.0 M, ? prompts of 16 tokens) | synthetic "
                       "tiny-llama-fixture (float16, 0.6 M, ? prompts of 16 tokens) | "
                       f"{smollm2} (float32, 0.6 M, ? prompts of 16 tokens) |")
    assert rows[1:] == [  # variants in the report's order; exactly 1.5x is not under it
        "| graph[reuse] | 1.52x to 1.52x (0 of 1 points under 1.5x) | 1.25x to 10.00x (1 of 2 points under 1.5x) "
        "| 1.50x to 1.50x (0 of 1 points under 1.5x) |",
        "| hf-compile | 4.00x to 4.00x (0 of 1 points under 1.5x) | - | - |"]
    # the points repeated alone, read from the folder (here the published Ray smoke, which has two)
    smoke = REPO / "reports" / "sweep-h200-ray-smoke"
    with_repeats = sweep_readme.readme_block(*sweep.load(smoke), "sweep-h200-ray-smoke", folder=smoke)
    # its 3 samples a side give no verdict (a bootstrap interval of 3 medians is their range at any level)
    assert "\nRepeated alone: 2 point(s), none compared (" in with_repeats  # said first: no "0 moved" before it
    assert "so no verdict on whether they moved between its ray run" in with_repeats
    assert "one run alone per point" in with_repeats and "0 moved" not in with_repeats
    assert with_repeats.count("; 0 of 2 ran beside other points in the sweep.") == 1
    assert "Repeated alone" not in sweep_readme.readme_block(*sweep.load(smoke), "sweep-h200-ray-smoke")
    # a repeat without a verdict is counted, not silently neither moved nor not moved
    record = {"wall": {"executor": "local", "workers": 1}}
    counted = sweep_repeats.answer_line(record, [repeats.Verdict("a", "moved", ()), repeats.Verdict("b", "not compared",
                                                                                                    (), "no result")])
    assert counted.startswith("repeated alone: 2 point(s), 1 moved (a) run to run") and counted.endswith(
        ", 0 not moved, 1 not compared (a run without a result, other threads or cores, or too few samples)")
    # the rule shown is this code's, which the verdicts apply; a record that kept another says so
    assert sweep_repeats.rule_note({"repeats": {"rule": repeats.RULE}}) == "Rule: " + repeats.RULE
    older = sweep_repeats.rule_note({"repeats": {"rule": "an older rule"}})
    assert older.startswith("Rule: " + repeats.RULE) and older.endswith('these verdicts do not apply: "an older rule"')
    # the H100 smoke's record kept 6744219's wording of this very rule: the same rule, not another
    smoke = json.loads((REPO / "reports" / "sweep-h200-ray-smoke-h100" / "sweep.json").read_text())
    assert smoke["repeats"]["rule"] != repeats.RULE and repeats.same_rule(smoke["repeats"]["rule"])
    assert sweep_repeats.rule_note(smoke) == "Rule: " + repeats.RULE
    assert not repeats.same_rule(json.loads((REPO / "reports" / "sweep-h200" / "sweep.json").read_text())
                                 ["repeats"]["rule"])  # the 3-sample rule of 2 December: another


def test_the_answer_counts_points_kept_from_an_earlier_invocation_apart_from_those_it_launched(tmp_path):
    record = {"spec": {"name": "sw"}, "wall": {"executor": "local", "seconds": 1.0},
              "points": [{"slug": "a", "status": "valid", "launcher": "fork-server", "wall_s": 2.0},
                         {"slug": "b", "status": sweep.KEPT, "wall_s": None},
                         {"slug": "c", "status": f"invalid, {sweep.KEPT}", "wall_s": None}]}
    (line,) = [x for x in report.answer_lines(record, [], tmp_path) if x.startswith("points run here")]
    # an invalid point kept is kept too (the published 1B sweep said 79 of its 83)
    assert line.endswith("fork-server 1; 2 kept from earlier invocations (the record keeps no launcher or wall "
                         "time of a kept point; each invocation's wall time is in the wall-time table)")
    record["points"] = record["points"][1:]  # a resume that kept every point still says how they are launched
    (line,) = [x for x in report.answer_lines(record, [], tmp_path) if x.startswith("points run here")]
    assert line.startswith("points run here: none; all 2 kept from earlier invocations") and "launcher: fresh" in line


def test_a_report_of_a_sweep_with_points_not_run_says_it_is_unfinished(tmp_path):
    # a preview of a sweep in progress (publish refuses one): its ranges and crossovers stop at the run points
    record = {"spec": {"name": "sw", "sweep": {"batch_size": [1, 2], "max_new_tokens": [16, 64]}},
              "wall": {"executor": "local", "seconds": 1.0}, "points": [{"slug": s} for s in "abc"]}
    lines = report.answer_lines(record, [], tmp_path)
    assert lines[1] == ("unfinished: 1 of the spec's 4 point(s) not run yet, so every range, curve and crossover "
                        "here stops where the run points do (resume with --into)")
    assert any(b.kind == "warning" and b.text == lines[1] for b in report.blocks(record, [], folder=tmp_path))
    record["points"].append({"slug": "d"})
    assert not any(line.startswith("unfinished") for line in report.answer_lines(record, [], tmp_path))


def test_a_repeat_alone_blames_neighbours_only_when_points_ran_side_by_side():
    # Ray on one GPU runs one point at a time: a shift there is the executor's or the host's, not a neighbour's
    one = sweep_repeats.contrast({"wall": {"executor": "ray", "workers": 1}})
    assert "side by side" not in one and "nothing ran beside it" in one and "ray run" in one
    assert sweep_repeats.contrast({"wall": {"executor": "ray", "workers": 2}}) == (
        "by running side by side (up to 2 workers, ray executor)")
    # the local executor repeats locally too: run to run
    assert sweep_repeats.contrast({"wall": {"executor": "local", "workers": 1}}).startswith("run to run")
    # a resumed sweep: any invocation with two workers ran points side by side
    resumed = {"wall": {"executor": "local", "workers": 1, "earlier": [{"executor": "ray", "workers": 2}]}}
    assert sweep_repeats.contrast(resumed) == "by running side by side (up to 2 workers, local and ray executor)"
    # older records keep executor and workers at the top level, or no workers at all
    assert sweep_repeats.contrast({"executor": "ray", "workers": 3}).startswith("by running side by side (up to 3")
    assert "not recorded" in sweep_repeats.contrast({"executor": "local"})
    assert "None" not in sweep_repeats.contrast({"wall": {"executor": "local", "seconds": 1.0}})


def test_engine_groups_at_one_place_each_keep_their_own_eager_base_and_eager_is_drawn_once():
    # Three points at batch 2 and 16 tokens, one engine group each; the third lost parity (a near-tie).
    graph = point(2, 16, {"eager": (1, 100.0, 1, 50.0), "graph[reuse]": (1, 10.0, 1, 10.0)})
    compiled = point(2, 16, {"eager": (1, 120.0, 1, 60.0), "hf-compile": (1, 30.0, 1, 30.0)})
    lost = copy.deepcopy(point(2, 16, {"eager": (1, 90.0, 1, 1), "graph-compiled[reuse]": (1, 9.0, 1, 1)}).to_dict())
    lost["calls"][1]["parity"]["ok"], lost["valid"] = False, False
    other = point(4, 16, {"eager": (1, 200.0, 1, 1), "hf-compile": (1, 40.0, 1, 1)})  # another place
    usable, rejected = curves.split(loaded({"lost": Result.from_dict(lost), "graph": graph,
                                            "compiled": compiled, "b4": other}))
    assert [(r.slug, r.status) for r in rejected] == [("lost", "invalid")]  # the others keep their figures
    assert [(p.slug, p.shown_before) for p in usable] == [("graph", frozenset()), ("compiled", {"eager"}),
                                                          ("b4", frozenset())]
    ratios = {(r.variant, r.batch): r.ratio.point for r in curves.speedups(usable)}
    assert ratios == {("graph[reuse]", 2): pytest.approx(10.0), ("hf-compile", 2): pytest.approx(4.0),
                      ("hf-compile", 4): pytest.approx(5.0)}  # each over its own point's eager: 120 / 30
    eager = [(r.batch, r.steady_ms) for r in curves.latencies(usable) if r.variant == "eager"]
    assert eager == [(2, 100.0), (4, 200.0)]  # once per place, from the first valid point there
    after = [(r.batch, r.steady_ms) for r in curves.after_update(usable) if r.variant == "eager"]
    assert after == [(2, 50.0), (4, 1)]
    assert [r.variant for r in curves.latencies(usable) if r.batch == 2] == ["eager", "graph[reuse]", "hf-compile"]
    assert [(g.variant, g.batch) for g in curves.growth(usable) if g.variant == "eager"] == [("eager", 2), ("eager", 4)]


def test_a_place_is_the_points_parameters_less_its_engines_and_each_variant_is_drawn_once_there():
    def entry(slug: str, engines: list, prompt_len: int) -> dict:
        return {"slug": slug, "status": "valid", "params": {"name": f"s-{slug}", "engines": engines,
                                                            "batch_size": 2, "prompt_len": prompt_len}}

    twice = point(2, 16, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (1, 10.0, 1, 1)})
    again = point(2, 16, {"eager": (1, 120.0, 1, 1), "graph[reuse]": (1, 40.0, 1, 1), "hf-compile": (1, 60.0, 1, 1)})
    longer = point(2, 16, {"eager": (1, 300.0, 1, 1), "graph[reuse]": (1, 30.0, 1, 1)})  # another prompt length
    usable, _ = curves.split([(entry("a", ["eager", "graph"], 8), twice),
                              (entry("b", ["eager", "graph", "hf-compile"], 8), again),
                              (entry("c", ["eager", "graph"], 16), longer)])
    assert [set(p.shown_before) for p in usable] == [set(), {"eager", "graph[reuse]"}, set()]
    ratios = sorted((r.variant, r.ratio.point) for r in curves.speedups(usable))
    assert ratios == [("graph[reuse]", pytest.approx(10.0)), ("graph[reuse]", pytest.approx(10.0)),
                      ("hf-compile", pytest.approx(2.0))]  # a's graph and c's; b's hf-compile over b's eager
    assert sorted(r.steady_ms for r in curves.latencies(usable) if r.variant == "eager") == [100.0, 300.0]
    # every table: graph[reuse] once per place (a's and c's), hf-compile from b
    assert sorted(r.variant for r in curves.captures(usable)) == ["graph[reuse]", "graph[reuse]", "hf-compile"]
    assert sorted(r.candidate for r in curves.break_evens(usable)) == ["graph[reuse]", "graph[reuse]", "hf-compile"]
    assert sorted(r.variant for r in curves.after_update(usable) if r.variant != "eager") == [
        "graph[reuse]", "graph[reuse]", "hf-compile"]


def test_repeat_sample_is_deterministic_and_independent_of_the_name(tmp_path):
    values = {"device": "cpu", "sweep": {"batch_size": [1, 2, 3, 4, 5, 6], "max_new_tokens": [4, 8]},
              "repeat_alone": 3}
    spec = sweep.SweepSpec.from_dict({"name": "a", **values})
    chosen = repeats.sample(spec, 3)
    assert len(chosen) == 3 and [o for o, _, _ in chosen] == sorted({o for o, _, _ in chosen})
    renamed = sweep.SweepSpec.from_dict({"name": "b", **values})
    assert [s for _, s, _ in repeats.sample(renamed, 3)] == [s for _, s, _ in chosen]
    code = ("from rollout_study import sweep, repeats; import json, sys; "
            "s = sweep.SweepSpec.from_dict(json.loads(sys.argv[1])); print([o for o, _, _ in repeats.sample(s, 3)])")
    other = subprocess.run([sys.executable, "-c", code, json.dumps({"name": "c", **values})], capture_output=True,
                           text=True, env={"PYTHONHASHSEED": "12345", "PYTHONPATH": str(REPO), "PATH": "/usr/bin"})
    assert other.stdout.strip() == str([o for o, _, _ in chosen]), other.stderr[-2000:]
    others = {tuple(o for o, _, _ in repeats.sample(sweep.SweepSpec.from_dict(
        {**values, "name": "x", "seed": seed}), 3)) for seed in range(6)}
    assert len(others) > 1  # the choice follows the points, so other points give other samples


def test_the_repeat_rule_moves_only_beyond_the_spread():
    base = [10.0, 10.2, 9.9, 10.1, 9.8, 10.0]  # six: the least the repeats give a verdict from
    side = point(1, 16, {"eager": (1, 1, 1, 1), "graph[reuse]": (1, 1, 1, 1)}, steady_samples={
        ("graph[reuse]", "steady"): [v * 1.2 for v in base], ("eager", "steady"): base,
        ("graph[reuse]", "steady_after_update"): [10.0, 10.0], ("eager", "steady_after_update"): base})
    alone = point(1, 16, {"eager": (1, 1, 1, 1), "graph[reuse]": (1, 1, 1, 1)}, steady_samples={
        ("graph[reuse]", "steady"): base, ("eager", "steady"): [10.05, 9.95, 10.1, 9.9, 10.0, 10.0],
        ("graph[reuse]", "steady_after_update"): [10.0, 10.1], ("eager", "steady_after_update"): base})
    found = {(s.variant, s.phase): s for s in repeats.shifts(side, alone)}
    moved = found[("graph[reuse]", "steady")]
    expected = ratio_interval(Samples([v * 1.2 for v in base]), Samples(base))
    assert moved.verdict == "moved" and moved.ratio == expected and expected.low > 1
    assert found[("eager", "steady")].verdict == "within the spread"
    assert found[("graph[reuse]", "steady_after_update")].verdict == "too few samples"
    points = [({"order": 0, "slug": "p0"}, side), ({"order": 1, "slug": "p1"}, alone),
              ({"order": 2, "slug": "p2", "error": "boom"}, None)]
    repeated = [({"order": 0, "slug": "p0"}, alone), ({"order": 1, "slug": "p1"}, alone),
                ({"order": 2, "slug": "p2"}, alone)]
    verdicts = {v.slug: v for v in repeats.verdicts(points, repeated)}
    assert verdicts["p0"].verdict == "moved" and [s.variant for s in verdicts["p0"].moved] == ["graph[reuse]"]
    assert verdicts["p1"].verdict == "not moved"
    assert verdicts["p2"].verdict == "not compared" and "boom" in verdicts["p2"].why
    table = sweep_repeats.point_table(list(verdicts.values()))
    assert list(table["verdict"]) == ["moved", "not moved", "not compared"]
    assert list(table["largest shift"])[:2] == ["graph[reuse] c0 steady", "eager c0 steady"]


def test_a_moved_points_largest_shift_is_a_phase_that_moved():
    # eager's ratio (1.3, interval holding 1: a noisy phase) is larger than graph's (0.98, tight: moved)
    side = point(1, 16, {"eager": (1, 1, 1, 1), "graph[reuse]": (1, 1, 1, 1)}, steady_samples={
        ("eager", "steady"): [13.0, 6.0, 20.0, 9.0, 17.0, 13.0],
        ("graph[reuse]", "steady"): [9.8, 9.81, 9.79, 9.8, 9.8, 9.8]})
    alone = point(1, 16, {"eager": (1, 1, 1, 1), "graph[reuse]": (1, 1, 1, 1)}, steady_samples={
        ("eager", "steady"): [10.0, 12.0, 8.0, 15.0, 7.0, 10.0],
        ("graph[reuse]", "steady"): [10.0, 10.01, 9.99, 10.0, 10.0, 10.0]})
    found = {s.variant: s for s in repeats.shifts(side, alone) if s.phase == "steady"}
    assert found["eager"].verdict == "within the spread" and found["graph[reuse]"].verdict == "moved"
    assert abs(found["eager"].ratio.point - 1) > abs(found["graph[reuse]"].ratio.point - 1)
    verdicts = repeats.verdicts([({"order": 0, "slug": "p0"}, side)], [({"order": 0, "slug": "p0"}, alone)])
    row = sweep_repeats.point_table(verdicts).iloc[0]
    assert row["verdict"] == "moved" and row["largest shift"] == "graph[reuse] c0 steady"
    assert row["sweep / nearest alone"] == found["graph[reuse]"].ratio.point


@pytest.mark.parametrize("text, fragment", [
    ("repeat_alone: -1\n", "repeat_alone must be an integer >= 0"),
    ("repeat_alone: 3\n", "repeat_alone must be at most the sweep's 2 point(s)"),
    ("report: curves\n", "report must be one of hazards, sweep; got 'curves'"),
])
def test_bad_sweep_files_are_refused_before_any_work(tmp_path, capsys, text, fragment):
    bad = tmp_path / "bad.yaml"
    bad.write_text("sweep:\n  batch_size: [1, 2]\ndevice: cpu\n" + text, encoding="utf-8")
    runs = tmp_path / "runs"
    assert cli.main(["sweep", str(bad), "--output-root", str(runs)]) == cli.EXIT_BAD_INPUT
    assert fragment in capsys.readouterr().err and not runs.exists()


def test_a_subset_file_runs_some_of_a_full_sweeps_points_with_their_parameters(tmp_path, capsys):
    import yaml

    full = yaml.safe_load((REPO / "params" / "sweep-cpu.yaml").read_text(encoding="utf-8"))
    full["sweep"]["max_new_tokens"] = [4, 6]
    (tmp_path / "full.yaml").write_text(yaml.safe_dump(full), encoding="utf-8")
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump({**full, "sweep": {"max_new_tokens": 4}}), encoding="utf-8")
    whole = {f"{slug}-{sweep.point_hash(params)}" for slug, params in
             sweep.SweepSpec.from_yaml(str(tmp_path / "full.yaml")).points()}

    def subset(file: str, **values) -> Path:
        path = tmp_path / f"{file}.yaml"
        path.write_text(yaml.safe_dump({"subset_of": "full.yaml", **values}), encoding="utf-8")
        return path

    spec = sweep.SweepSpec.from_yaml(str(subset("part", sweep={"max_new_tokens": [6, 4], "batch": [
        {"batch_size": 2, "requests": 2}]})))
    keys = [f"{slug}-{sweep.point_hash(params)}" for slug, params in spec.points()]
    assert (spec.name, spec.repeat_alone, spec.report) == ("part", 0, "sweep")  # named after its file
    assert len(keys) == 2 and set(keys) <= whole and "max_new_tokens=4" in keys[0]  # the full file's order
    shared = ("name", "repeat_alone", "sweep", "subset_of")
    assert {k: v for k, v in spec.to_dict().items() if k not in shared} == {k: v for k, v in full.items()
                                                                           if k not in shared}
    assert spec.subset_of == "full.yaml" and sweep.SweepSpec.from_dict(spec.to_dict()) == spec  # recorded, read back
    record = {"spec": spec.to_dict(), "wall": {"executor": "local", "seconds": 1.0}}
    assert any(line.startswith("a subset of full.yaml: that file's points")
               for line in report.answer_lines(record, [], tmp_path))
    for values, fragment in [
            ({"sweep": {"prompt_len": [8]}},
             "sweep.prompt_len is no axis of full.yaml; allowed: batch, max_new_tokens"),
            ({"sweep": {"max_new_tokens": [5, 4]}}, "sweep.max_new_tokens has [5], not among full.yaml's "
                                                   "sweep.max_new_tokens; allowed: [4, 6]"),
            ({"sweep": {"max_new_tokens": [4]}, "name": "sweep-cpu"}, "name must differ from the full sweep's"),
            ({"subset_of": "../full.yaml", "sweep": {"max_new_tokens": [4]}}, "must name a sweep file in the same"),
            ({"subset_of": "broken.yaml", "sweep": {"max_new_tokens": [4]}}, "broken.yaml: sweep.max_new_tokens must"),
            ({"sweep": {"max_new_tokens": []}}, "sweep.max_new_tokens must be a non-empty list"),
            ({"sweep": {"max_new_tokens": [4]}, "lr": 0.1},
             "sets only name, subset_of, repeat_alone, launcher, sweep; got lr"),
            ({}, "needs a 'sweep:' mapping of some of full.yaml's axes"),
            ({"subset_of": "missing.yaml", "sweep": {"max_new_tokens": [4]}}, "must name a sweep file"),
            ({"subset_of": "part.yaml", "sweep": {"max_new_tokens": [4]}}, "is not a full sweep file")]:
        bad = subset("bad", **values)
        with pytest.raises(ParameterError, match=re.escape(fragment)):
            sweep.SweepSpec.from_yaml(str(bad))
    runs = tmp_path / "runs"  # through the command: refused before any work, nothing written
    assert cli.main(["sweep", str(subset("bad", sweep={"max_new_tokens": [5]})), "--output-root", str(runs)]) == \
        cli.EXIT_BAD_INPUT
    assert "sweep.max_new_tokens" in capsys.readouterr().err and not runs.exists()


@pytest.mark.parametrize("content, fragment", [
    (b"name: x\nsweep:\n  batch_size: [1,\n", "x.yaml: not valid YAML"),
    (b"name: x\n\xff\xfe\n", "x.yaml: not UTF-8 text"),
    (None, "sweep file {path!r} is a folder; allowed: a YAML file"),
    (b"subset_of: full.yaml\nsweep:\n  batch_size: [1]\n", "full.yaml: not valid YAML")])
def test_a_sweep_file_that_does_not_read_is_bad_input_naming_it(tmp_path, capsys, content, fragment):
    path = tmp_path / "x.yaml"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    (tmp_path / "full.yaml").write_bytes(b"sweep: {batch_size: [1, 2]\n")  # what a subset names, broken
    runs = tmp_path / "runs"
    assert cli.main(["sweep", str(path), "--output-root", str(runs)]) == cli.EXIT_BAD_INPUT
    assert fragment.format(path=str(path)) in capsys.readouterr().err and not runs.exists()


def test_sweep_help_names_the_report_and_repeat_alone(capsys):
    with pytest.raises(SystemExit):
        cli.main(["sweep", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the description
    assert "repeat_alone" in out and "curves over batch size and new tokens" in out


def test_instrument_false_skips_only_the_instrumented_calls():
    from rollout_study.params import StudyParams
    from rollout_study.protocol import run_in_process

    small = {"device": "cpu", "engines": ["eager"], "requests": 1, "batch_size": 1, "prompt_len": 4,
             "max_new_tokens": 2, "iterations": 1, "profile": False}
    on, off = (run_in_process(StudyParams.from_dict({**small, "instrument": flag})) for flag in (True, False))
    assert on.extra["instrumented_calls"] and "instrumented_calls" not in off.extra
    assert [(c.variant, c.cycle, c.phase, c.index) for c in on.calls] == \
        [(c.variant, c.cycle, c.phase, c.index) for c in off.calls]
    assert off.metadata["params"]["instrument"] is False


def test_the_sweep_notebook_is_committed_without_outputs_and_only_calls_the_package():
    import nbformat

    notebook = nbformat.read(str(REPO / "notebooks" / "sweep.ipynb"), as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code)
    (parameters,) = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    namespace: dict = {}
    exec(parameters.source, namespace)
    assert namespace["sweep_dir"] == "." and namespace["figures_dir"] == "figures"
    assert "report.blocks(" in code[-1].source and "def " not in "".join(c.source for c in code)


def _as_if_measured_here(*results: Result) -> None:
    """Fixture results marked as measured by this code on this kind of device: what a resume keeps."""
    from rollout_study import environment

    for result in results:
        result.metadata.update(git=environment.git_commit(), device="cpu")
        result.metadata.setdefault("software", {}).update(
            {name: environment.package_version(name) for name in ("torch", "transformers")})


def test_a_result_is_kept_on_resume_only_from_the_gpu_model_this_host_has(tmp_path, monkeypatch, capsys):
    from rollout_study import environment
    from rollout_study.params import StudyParams

    spec = sweep.SweepSpec.from_yaml(str(REPO / "params" / "sweep-cpu.yaml"))
    slug, params = spec.points()[0]
    measured = point(1, 4, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (5, 10.0, 1, 1)})
    _as_if_measured_here(measured)
    measured.metadata.update(device="cuda", hardware={**measured.metadata["hardware"], "gpu": "NVIDIA H200"})
    file = f"points/{slug}-{sweep.point_hash(params)}.json"
    measured.write(tmp_path / file)
    monkeypatch.setattr(StudyParams, "resolved_device", lambda self: "cuda")  # as on a GPU host
    for names, kept in [(("NVIDIA H200", "NVIDIA H200"), sweep.KEPT), (("NVIDIA H100 80GB HBM3",), None),
                        (None, sweep.KEPT)]:  # None: nvidia-smi cannot tell, the device type decides alone
        monkeypatch.setattr(environment, "gpu_names", lambda names=names: names)
        assert sweep.kept_status(tmp_path, file, params) == kept, names
    assert "measured on NVIDIA H200, this host has NVIDIA H100 80GB HBM3: runs again" in capsys.readouterr().err
    # CUDA names a MIG slice after its card, nvidia-smi the card: the card model is what is compared
    measured.metadata["hardware"]["gpu"] = "NVIDIA H200 MIG 3g.71gb"
    measured.write(tmp_path / file)
    monkeypatch.setattr(environment, "gpu_names", lambda: ("NVIDIA H200",))
    assert sweep.kept_status(tmp_path, file, params) == sweep.KEPT


def test_a_curve_sweep_publishes_its_failed_and_invalid_points_as_findings_but_not_an_unfinished_run(tmp_path):
    # "A point that runs out of memory or fails is recorded as such and the sweep goes on": such points are
    # findings of the sweep (listed first, never plotted); a sweep that never ran some points is no result.
    import dataclasses

    from rollout_study.present import index

    spec = dataclasses.replace(sweep.SweepSpec.from_yaml(str(REPO / "params" / "sweep-cpu.yaml")), repeat_alone=0)
    first_slug = spec.points()[0][0]
    valid = point(1, 16, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (5, 10.0, 1, 1)})

    invalid = point(2, 16, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (5, 10.0, 1, 1)})
    invalid.calls[-1].parity.ok = False
    _as_if_measured_here(valid, invalid)

    def one_loses_parity(params):
        return valid if params.name.endswith(first_slug) else invalid

    sweep.run_local(spec, tmp_path, progress=False, launcher=one_loses_parity)
    assert sweep.validity_problems(tmp_path) == []
    assert len(sweep.point_problems(sweep.load(tmp_path)[1])) == 1
    (row,) = [r for r in index.entries(tmp_path.parent) if r["folder"] == tmp_path.name]
    assert row["validity"] == "valid sweep; 1 of 2 points failed or invalid (listed in its report)"
    # Resumed, the invalid point is kept as the valid one is: a second draw until it passes would pick results
    again = []
    rerun = sweep.run_local(spec, tmp_path, progress=False, launcher=lambda p: again.append(p) or 1 / 0)
    assert again == [] and [p["status"] for p in rerun["points"]] == [
        "kept from an earlier run", "invalid, kept from an earlier run"]  # kept, and still said to be invalid
    assert len(sweep.point_problems(sweep.load(tmp_path)[1])) == 1
    # ...but a result that records a failure (out of memory in a phase) may pass on another try: run again
    from rollout_study.record import Failure

    invalid.failures.append(Failure("graph", "reuse", 0, "steady", "OutOfMemoryError: CUDA (simulated)"))
    invalid.write(tmp_path / rerun["points"][1]["file"])
    from rollout_study.sweep_validity import failed_points

    assert failed_points(tmp_path) == [spec.points()[1][0]]  # what stops the H200 run after its smoke sweep
    sweep.run_local(spec, tmp_path, progress=False, launcher=lambda p: again.append(p) or valid)
    assert [p.name for p in again] == [spec.points()[1][1].name]
    assert failed_points(tmp_path) == []  # a lost parity alone would not count either (above: kept, not failed)

    record = json.loads((tmp_path / "sweep.json").read_text(encoding="utf-8"))
    record["points"] = record["points"][:1]  # interrupted: the second point never ran
    (tmp_path / "sweep.json").write_text(json.dumps(record), encoding="utf-8")
    assert sweep.validity_problems(tmp_path) == ["1 of the spec's 2 point(s) not run (resume with --into)"]

    def everything_fails(params):
        raise RuntimeError("out of memory (simulated)")

    with pytest.raises(ParameterError, match="have the same parameters or name"):  # 1e-4 twice: one point, twice
        sweep.SweepSpec.from_dict({**spec.to_dict(), "sweep": {"lr": [0.0001, 1e-4]}})
    # In a file YAML reads a bare 1e-4 as text: refused as such, with the spelling that is a number
    (tmp_path / "lr.yaml").write_text("name: lr\nreport: sweep\nsweep:\n  lr: [1e-4, 0.0001]\n", encoding="utf-8")
    with pytest.raises(ParameterError, match=r"lr must be a number .* \(YAML reads 1e-4 as text: write 1.0e-4\)"):
        sweep.SweepSpec.from_yaml(str(tmp_path / "lr.yaml"))
    (tmp_path / "lr.yaml").write_text("name: lr\nreport: sweep\nsweep:\n  lr: [1.0e-4, 0.0001]\n", encoding="utf-8")
    with pytest.raises(ParameterError, match="have the same parameters or name"):
        sweep.SweepSpec.from_yaml(str(tmp_path / "lr.yaml"))

    none_valid = tmp_path.parent / "none-valid"
    sweep.run_local(spec, none_valid, progress=False, launcher=everything_fails)
    assert sweep.validity_problems(none_valid) == ["no valid point"]
    # A model none of whose points is valid has no curve: the answer says so rather than nothing
    record, loaded_points = sweep.load(none_valid)
    lines = report.answer_lines(record, loaded_points, none_valid)
    assert "model synthetic (auto): no valid point; 2 failed or invalid (listed below), so no curve" in lines
    record, loaded_points = sweep.load(tmp_path)  # one valid point of that model: no such line
    assert not any("no valid point" in line for line in report.answer_lines(record, loaded_points, tmp_path))


def test_a_curve_sweeps_failed_point_is_not_repeated_alone_and_an_invalid_repeat_is_a_finding(tmp_path):
    spec = sweep.SweepSpec.from_yaml(str(REPO / "params" / "sweep-cpu.yaml"))  # repeat_alone: 1
    ((order, slug, _),) = repeats.sample(spec, 1)
    valid = point(1, 16, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (5, 10.0, 1, 1)})
    invalid = point(1, 16, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (5, 10.0, 1, 1)})
    invalid.calls[-1].parity.ok = False
    _as_if_measured_here(valid, invalid)

    def sampled_fails(params):
        if params.name.endswith(slug):
            raise RuntimeError("out of memory (simulated)")
        return valid

    failed_side = tmp_path / "failed-side"
    sweep.run_local(spec, failed_side, progress=False, launcher=sampled_fails)
    ran = []
    block = repeats.run(spec, failed_side, progress=False, launcher=lambda p: ran.append(p) or valid)
    assert ran == [] and [e["status"] for e in block["points"]] == [repeats.NOT_REPEATED]
    assert sweep.validity_problems(failed_side) == []
    record, loaded_points = sweep.load(failed_side)
    line = [x for x in report.answer_lines(record, loaded_points, failed_side) if x.startswith("repeated alone")]
    assert line == ["repeated alone: 0 point(s), 0 moved run to run: the sweep's run and the runs alone by one "
                    "executor (local), one at a time, so a shift is the host's between them, not a neighbour's, 0 not "
                    "moved; 1 sampled point(s) not repeated (failed or invalid in the sweep's run)"]

    # A repeat that loses parity alone: a finding of a curve sweep, kept on resume (not drawn again)
    lost_alone = tmp_path / "lost-alone"
    sweep.run_local(spec, lost_alone, progress=False, launcher=lambda p: valid)
    repeats.run(spec, lost_alone, progress=False, launcher=lambda p: invalid)
    block = repeats.run(spec, lost_alone, progress=False, launcher=lambda p: ran.append(p) or valid)
    assert ran == [] and [e["status"] for e in block["points"]] == ["invalid, kept from an earlier run"] * 2
    record = json.loads((lost_alone / "sweep.json").read_text(encoding="utf-8"))
    assert repeats.problems(record) == [] and sweep.validity_problems(lost_alone) == []
    # ...while a hazard sweep, whose matrix needs every cell, refuses it
    record["spec"]["report"] = "hazards"
    assert repeats.problems(record) == [f"repeat of point {slug} alone (run {n}): invalid, kept from an earlier run"
                                        for n in (1, 2)]


def test_a_resumed_sweep_sums_the_wall_time_of_its_invocations(tmp_path):
    spec = sweep.SweepSpec.from_yaml(str(REPO / "params" / "sweep-cpu.yaml"))

    def out_of_memory(params):
        raise RuntimeError("out of memory (simulated)")

    first = sweep.run_local(spec, tmp_path, progress=False, launcher=out_of_memory)["wall"]
    assert (first["points_run"], first["earlier"], first["total_seconds"]) == (2, [], first["seconds"])
    second = sweep.run_local(spec, tmp_path, progress=False, launcher=out_of_memory)["wall"]
    assert [w["start"] for w in second["earlier"]] == [first["start"]]
    assert second["total_seconds"] == pytest.approx(first["seconds"] + second["seconds"])
    frame = report.wall_table(json.loads((tmp_path / "sweep.json").read_text(encoding="utf-8")))
    assert list(frame["what"]) == ["sweep points, invocation 1", "sweep points, invocation 2",
                                   "sweep points, all invocations"]
    from rollout_study.present.markdown import table

    cells = [row.strip("| ").split(" | ") for row in table(list(frame.columns), frame.values.tolist())[2:]]
    counts = [[row[i] for i in (2, 3, 7, 8)] for row in cells]  # GPUs, workers, points run, points kept
    assert counts == [["0", "1", "2", "0"], ["0", "1", "2", "0"], ["-", "-", "-", "-"]]  # integers, blanks "-"


def test_a_smoke_sweeps_points_are_kept_by_the_full_sweep_and_its_time_counted(tmp_path, capsys, monkeypatch):
    # params/sweep-h200-smoke.yaml runs the long sweep's corner first: its points are the sweep's own, so
    # --keep-from copies them in (measured once), and the smoke's wall time joins the sweep's.
    from rollout_study.sweep_command import keep_from

    spec = sweep.SweepSpec.from_yaml(str(REPO / "params" / "sweep-cpu.yaml"))
    smoke = sweep.SweepSpec.from_dict({**spec.to_dict(), "name": "sweep-cpu-smoke", "repeat_alone": 0,
                                       "sweep": {"batch": [{"batch_size": 2, "requests": 2}]}})
    (smoke_slug, smoke_params), = smoke.points()
    assert smoke_slug == spec.points()[1][0] and sweep.point_hash(smoke_params) == sweep.point_hash(spec.points()[1][1])
    measured = point(2, 4, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (5, 10.0, 1, 1)})
    _as_if_measured_here(measured)
    smoke_folder = tmp_path / "smoke"
    smoke_wall = sweep.run_local(smoke, smoke_folder, progress=False, launcher=lambda p: measured)["wall"]

    folder, ran = tmp_path / "full", []
    folder.mkdir()
    assert keep_from(smoke_folder, folder, spec) == [f"points/{smoke_slug}-{sweep.point_hash(smoke_params)}.json"]
    record = sweep.run_local(spec, folder, progress=False, launcher=lambda p: ran.append(p.name) or measured)
    assert ran == [spec.points()[0][1].name]  # the smoke's point was not measured again
    assert sorted((p["order"], p["status"]) for p in record["points"]) == [(0, "valid"), (1, sweep.KEPT)]
    wall = record["wall"]
    assert [(w["sweep"], w["start"], w["points_run"]) for w in wall["earlier"]] == [
        ("sweep-cpu-smoke", smoke_wall["start"], 1)]
    assert wall["total_seconds"] == pytest.approx(smoke_wall["seconds"] + wall["seconds"])
    assert list(report.wall_table(record)["what"]) == [
        "sweep points, invocation 1 (sweep-cpu-smoke, its points copied in)", "sweep points, invocation 2",
        "sweep points, all invocations"]
    # Copied again into the resumed folder (nothing new to copy): the smoke's time is not counted twice
    assert keep_from(smoke_folder, folder, spec) == []
    (folder / record["points"][0]["file"]).unlink()  # the kept one, as a failed point's result is deleted
    assert len(keep_from(smoke_folder, folder, spec)) == 1
    again = json.loads((folder / "sweep.json").read_text(encoding="utf-8"))["wall"]
    assert [w.get("sweep") for w in again["earlier"]] == ["sweep-cpu-smoke"]
    assert again["total_seconds"] == pytest.approx(wall["total_seconds"])
    # A result from other code is copied but not kept: the resume rule decides, and the point runs again
    other = tmp_path / "other"
    other.mkdir()
    measured.metadata["git"] = {**measured.metadata["git"], "code_sha256": "0" * 64}
    measured.write(smoke_folder / f"points/{smoke_slug}-{sweep.point_hash(smoke_params)}.json")
    keep_from(smoke_folder, other, spec)
    ran.clear()
    sweep.run_local(spec, other, progress=False, launcher=lambda p: ran.append(p.name) or measured)
    assert len(ran) == 2
    # Through the command, as tools/h200-reports.sh runs it after a passing smoke sweep
    import yaml

    from rollout_study import launch, pipeline

    _as_if_measured_here(measured)  # measured by this code again
    measured.write(smoke_folder / f"points/{smoke_slug}-{sweep.point_hash(smoke_params)}.json")
    file = tmp_path / "sweep-cpu.yaml"
    file.write_text(yaml.safe_dump({**spec.to_dict(), "repeat_alone": 0}), encoding="utf-8")
    launched = []
    monkeypatch.setattr(launch, "fresh_process", lambda params, mode: launched.append(params.name) or measured)
    monkeypatch.setattr(pipeline, "sweep_report_step", lambda folder, report, progress, **shown: [])
    assert cli.main(["sweep", str(file), "--output-root", str(tmp_path / "cli"), "--quiet",
                     "--keep-from", str(smoke_folder)]) == 0
    assert launched == [spec.points()[0][1].name]
    (done,) = [p for p in (tmp_path / "cli").iterdir() if p.is_dir() and not p.name.startswith(".")]
    record = json.loads((done / "sweep.json").read_text(encoding="utf-8"))
    assert sorted(p["status"] for p in record["points"]) == [sweep.KEPT, "valid"]
    assert [w.get("sweep") for w in record["wall"]["earlier"]] == ["sweep-cpu-smoke"]
    # Two subsets that hold every point between them (one model's points each, say): nothing runs again
    first = sweep.SweepSpec.from_dict({**smoke.to_dict(), "name": "sweep-cpu-first",
                                       "sweep": {"batch": [{"batch_size": 1, "requests": 1}]}})
    first_folder = tmp_path / "first"
    sweep.run_local(first, first_folder, progress=False, launcher=lambda p: measured)
    ran_first = json.loads((first_folder / "sweep.json").read_text(encoding="utf-8"))
    ran_first["wall"]["start"] = "2000-01-01T00:00:00+00:00"  # before the smoke, named first below too...
    (first_folder / "sweep.json").write_text(json.dumps(ran_first), encoding="utf-8")
    launched.clear()
    assert cli.main(["sweep", str(file), "--output-root", str(tmp_path / "both"), "--quiet",
                     "--keep-from", str(first_folder), "--keep-from", str(smoke_folder)]) == 0
    assert launched == []
    (done,) = [p for p in (tmp_path / "both").iterdir() if p.is_dir() and not p.name.startswith(".")]
    record = json.loads((done / "sweep.json").read_text(encoding="utf-8"))
    assert [p["status"] for p in record["points"]] == [sweep.KEPT, sweep.KEPT]
    # ...and the smoke's, named second, started once this test began: listed in the order they ran
    assert [w.get("sweep") for w in record["wall"]["earlier"]] == ["sweep-cpu-first", "sweep-cpu-smoke"]
    assert record["wall"]["total_seconds"] == pytest.approx(sum(w["seconds"] for w in [*record["wall"]["earlier"],
                                                                                        record["wall"]]))
    # Bad input: named, before any work, nothing written
    runs = tmp_path / "runs"
    args = ["sweep", str(REPO / "params" / "sweep-cpu.yaml"), "--output-root", str(runs)]
    assert cli.main([*args, "--keep-from", str(tmp_path / "nowhere")]) == cli.EXIT_BAD_INPUT
    assert "--keep-from" in capsys.readouterr().err and not runs.exists()
    assert cli.main([*args, "--keep-from", str(smoke_folder), "--keep-from", str(tmp_path / "nowhere")]) == \
        cli.EXIT_BAD_INPUT
    assert "nowhere" in capsys.readouterr().err and not runs.exists()  # the second is checked before any work
    assert cli.main([*args, "--into", str(folder), "--keep-from", str(smoke_folder), "--keep-from", str(folder)]) \
        == cli.EXIT_BAD_INPUT
    assert "--keep-from: the folder the sweep resumes" in capsys.readouterr().err


def test_a_sweeps_own_invocation_that_comes_back_through_a_subset_counts_once(tmp_path):
    from rollout_study.sweep_command import keep_from

    spec = sweep.SweepSpec.from_yaml(str(REPO / "params" / "sweep-cpu.yaml"))
    subset = sweep.SweepSpec.from_dict({**spec.to_dict(), "name": "sweep-cpu-part", "repeat_alone": 0,
                                        "sweep": {"batch": [{"batch_size": 2, "requests": 2}]}})
    measured = point(2, 4, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (5, 10.0, 1, 1)})
    _as_if_measured_here(measured)
    full, part = tmp_path / "full", tmp_path / "part"
    own = sweep.run_local(spec, full, progress=False, launcher=lambda p: measured)["wall"]
    part.mkdir()
    assert len(keep_from(full, part, subset)) == 1  # the subset built from the full sweep's folder...
    part_wall = sweep.run_local(subset, part, progress=False, launcher=lambda p: measured)["wall"]
    (full / "points" / f"{subset.points()[0][0]}-{sweep.point_hash(subset.points()[0][1])}.json").unlink()
    assert len(keep_from(part, full, spec)) == 1  # ...and copied back: the full sweep's invocation comes with it
    wall = json.loads((full / "sweep.json").read_text(encoding="utf-8"))["wall"]
    assert sorted((w.get("sweep") or "own", w["start"]) for w in [*wall["earlier"], wall]) == sorted(
        [("own", own["start"]), ("sweep-cpu-part", part_wall["start"])])
    assert wall["total_seconds"] == pytest.approx(own["seconds"] + part_wall["seconds"])


def test_a_fresh_process_ends_once_its_result_is_out_so_a_crash_in_teardown_cannot_lose_it():
    # An exit handler that aborts stands for the CUDA memory pool destructor that once did (H200, batch 64)
    script = ("import atexit, os, rollout_study.launch as launch\n"
              "launch.worker = lambda: (atexit.register(os.abort), print('result'), 0)[-1]\n"
              "launch.main()\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # buffered, as a plain interpreter is
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120,
                          env=env)
    assert (done.returncode, done.stdout) == (0, "result\n"), done.stderr[-2000:]  # ended, and nothing lost


def test_a_failed_points_error_keeps_its_first_lines_as_well_as_its_last(tmp_path, monkeypatch):
    # A native abort's tail is stack frames alone: the message that names the error comes first. Through the
    # real launcher, with the process's exit faked: its output is cut once, in the middle, and said so.
    from rollout_study import launch

    spec = sweep.SweepSpec.from_yaml(str(REPO / "params" / "sweep-cpu.yaml"))
    stderr = "terminate called: CUDA error: invalid argument\n" + "".join(
        f"frame #{i}: <unknown function> + 0x{i:x}\n" for i in range(400))
    (tmp_path / "stderr.txt").write_text(stderr, encoding="utf-8")
    interpreter = tmp_path / "python"  # stands for the new interpreter: writes that, then aborts (SIGABRT: -6)
    interpreter.write_text(f'#!/bin/sh\ncat > /dev/null\ncat "{tmp_path / "stderr.txt"}" >&2\nkill -ABRT $$\n',
                           encoding="utf-8")
    interpreter.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(interpreter))
    sweep.run_local(spec, tmp_path / "sweep", progress=False, launcher=launch.fresh_process)
    errors = [p["error"] for p in json.loads((tmp_path / "sweep" / "sweep.json").read_text(encoding="utf-8"))["points"]]
    assert len(errors) == 2
    for error in errors:
        assert error.startswith("fresh process exited -6: terminate called: CUDA error: invalid argument")
        assert error.rstrip().endswith("frame #399: <unknown function> + 0x18f")
        assert f"[... {len(stderr) - 3000} characters left out ...]" in error  # cut once, by the launcher


@pytest.fixture(scope="module")
def cpu_sweep(tmp_path_factory):
    """params/sweep-cpu.yaml (two points, one repeated alone) run in this process, then its report."""
    from rollout_study import environment, pipeline
    from rollout_study.protocol import run_in_process

    patch = pytest.MonkeyPatch()
    patch.setattr(environment, "git_commit", lambda: {"commit": "e" * 40, "dirty": False})
    folder = tmp_path_factory.mktemp("sweep-cpu")
    spec = sweep.SweepSpec.from_yaml(str(REPO / "params" / "sweep-cpu.yaml"))
    sweep.run_local(spec, folder, progress=False, launcher=run_in_process)
    repeats.run(spec, folder, progress=False, launcher=run_in_process)
    (folder / "figures").mkdir()
    (folder / "figures" / "sweep-a-section-no-longer-drawn-speedup.png").write_bytes(b"stale")
    with pipeline.kernel_environment():
        problems = pipeline.sweep_report_step(folder, spec.report, progress=False)
    yield folder, problems
    patch.undo()


def test_where_the_time_went_leaves_blank_what_a_point_did_not_record():
    old = point(1, 16, {"eager": (1, 1, 1, 1), "graph[reuse]": (5, 1, 1, 1)})  # written before untimed_ms
    entries = [({"slug": "old", "wall_s": 10.0}, old), ({"slug": "failed", "wall_s": 2.0}, None)]
    times = report.time_table(entries).set_index("point")
    calls = sum(c.total_ms for c in old.calls) / 1e3
    assert times.loc["old", "measured calls s"] == pytest.approx(calls) and pd.isna(times.loc["old", "rest s"])
    assert pd.isna(times.loc["old", "collect s"]) and times.loc["failed"].drop(["wall s", "model"]).isna().all()
    # rows of every model share the table, so each names its label (a slug names only the sweep file's model)
    assert times.loc["old", "model"] == f"synthetic: {old.model_name}" and times.loc["failed", "model"].endswith(
        "(no result)")
    assert times.loc["all points", "wall s"] == 12.0  # the failed point's wall counts: the sweep paid it
    assert times.loc["all points", "measured calls s"] == pytest.approx(calls)
    assert report.time_table([]).empty


def _hosted(speeds, eager_steady=(100.0, 100.0, 100.0), batch: int = 1) -> Result:
    """A point whose eager cycle-0 steady calls took `eager_steady` ms; after the update they spread far wider,
    which the speed-ups (cycle 0) never see, so neither may the spread."""
    samples = {("eager", "steady"): list(eager_steady), ("eager", "steady_after_update"): [50.0, 100.0, 400.0]}
    result = point(batch, 16, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (5, 10.0, 1, 1)}, steady_samples=samples)
    if speeds:
        result.metadata["host_speed"] = {"start": {"dispatch_us": speeds[0]}, "end": {"dispatch_us": speeds[1]}}
    return result


def test_the_host_table_gives_each_points_start_and_end_and_how_far_generates_steady_calls_spread():
    # The H200's host switched speed within runs: a point's start and end did not say which calls ran slow,
    # so the table and the line give the spread of the calls the speed-ups divide by (eager, cycle-0 steady).
    entries = [({"slug": slug}, _hosted(speeds, steady)) for slug, speeds, steady in
               (("steady-host", (1.0, 1.0), (100.0, 101.0, 102.0)),
                ("switching", (2.2, 1.0), (100.0, 150.0, 210.0)),
                ("old", None, (100.0, 120.0, 100.0)))]
    invalid = _hosted((1.0, 1.0), (100.0, 900.0, 100.0))
    invalid.calls[0].parity.ok = False
    hosts = report.host_table(entries + [({"slug": "failed"}, None)]).set_index("point")
    assert hosts.loc["switching", "slowest / fastest call"] == pytest.approx(2.1)
    assert hosts.loc["steady-host", "slowest / fastest call"] == pytest.approx(1.02)
    assert hosts.loc["switching", "generate() steady calls"] == 3  # cycle 0's steady phase, as the speed-ups
    assert pd.isna(hosts.loc["old", "start us"]) and hosts.loc["old", "slowest / fastest call"] == pytest.approx(1.2)
    assert hosts.loc["failed"].drop("model").isna().all() and hosts.loc["old", "model"].startswith("synthetic: ")
    expected = ("host: 1.00 to 2.20 us per tiny CPU operation at the points' starts and ends (two instants of "
                "each run: they do not say which of its calls ran on a slow host); within each valid point, eager "
                "generate()'s steady calls spread by 1.20x (median over 3 point(s); up to 2.10x, slowest over "
                "fastest call): generate() runs at the host's pace and the graph engines' replays do not, so the "
                "speed-ups over it carry that spread (their intervals in the speed-up figure); between the valid "
                "points of one place (each engine group's point runs eager), eager generate()'s steady medians "
                "differ by up to 1.50x (16 new tokens, batch 1; median 1.50x over 1 place(s), slowest over fastest): "
                "each speed-up divides by its own point's, so speed-ups of variants from different groups differ by "
                "that too; their steady ms (the latency table) compare without it")
    assert report.host_lines(entries) == [expected]
    assert report.host_lines(entries + [({"slug": "invalid"}, invalid)]) == [expected]  # its 9x is no speed-up's
    assert report.host_lines(entries[-1:])[0].startswith("host: within each valid point")  # no host figures
    assert report.host_lines([({"slug": "failed"}, None)]) == []
    # a failed point's blanks read as blanks in summary.md, not as pandas' <NA>
    failed_row = [line for line in notebook.blocks_markdown([Block("table", "hosts", report.host_table(
                      [({"slug": "failed"}, None)]))], "t").splitlines() if line.startswith("| failed")]
    assert failed_row == ["| failed | - (no result) | - | - | - | - |"]


def test_the_host_line_compares_generates_medians_between_the_valid_points_of_one_place_only():
    def at(batch: int, requests: int, median: float, label: str = "synthetic") -> Result:
        return point(batch, 16, {"eager": (1, median, 1, 1), "graph[reuse]": (5, 10.0, 1, 1)}, label=label,
                     requests=requests)

    invalid = at(1, 1, 1000.0)
    invalid.calls[0].parity.ok = False  # no speed-up divides by it
    results = {"a": at(1, 1, 100.0), "b": at(1, 1, 130.0), "x": invalid, "c": at(2, 2, 100.0), "d": at(2, 2, 300.0),
               "e": at(1, 2, 500.0)}  # batch 1 with 2 requests: a place of its own, not a's and b's
    (line,) = report.host_lines(loaded(results))
    assert line.endswith("between the valid points of one place (each engine group's point runs eager), eager "
                         "generate()'s steady medians differ by up to 3.00x (16 new tokens, batch 2; median 2.15x over "
                         "2 place(s), slowest over fastest): each speed-up divides by its own point's, so speed-ups of "
                         "variants from different groups differ by that too; their steady ms (the latency table) "
                         "compare without it")
    # two models: the place names its model
    results.update(f=at(2, 2, 100.0, "pretrained"), g=at(2, 2, 110.0, "pretrained"))
    _, name, dtype = curves.Point("c", results["c"]).model
    assert f"up to 3.00x ({name} {dtype}, 16 new tokens, batch 2; median 1.30x over 3 place(s)" in \
        report.host_lines(loaded(results))[0]


def test_the_speedup_figure_draws_each_speedups_interval():
    points = [curves.Point(f"b{b}", _hosted((1.0, 1.0), steady, batch=b)) for b, steady in
              ((1, (100.0, 100.0, 100.0)), (2, (100.0, 150.0, 210.0)))]
    figure = sweep_figures.speedup_figure(points)
    bars = sorted((round(float(seg[0][1]), 6), round(float(seg[1][1]), 6))
                  for c in figure.axes[0].collections for seg in c.get_segments())
    expected = sorted((round(r.ratio.low, 6), round(r.ratio.high, 6)) for r in curves.speedups(points)
                      if r.ratio.has_interval)
    assert bars == expected and len(expected) == 2
    assert figure.axes[0].get_ylim()[1] >= max(high for _, high in expected)  # no bar cut off at the top
    assert expected[1][1] > expected[1][0] * 1.4  # the switching point's wide interval is visible, not averaged away


def test_a_break_even_panel_with_one_u_everywhere_is_drawn_on_a_whole_rollout_axis_not_a_log_one():
    # graph 130 + 10(U-1) vs eager 100 + 50(U-1) pays off from U = 2 at both batches: one value, no decade
    points = [curves.Point(f"b{b}", point(b, 16, {"eager": (300, 100, 100, 50), "graph[reuse]": (400, 20, 130, 10)}))
              for b in (1, 2)]
    (axis,) = [ax for ax in sweep_figures.break_even_figure(points).axes if ax.get_title() == "graph[reuse] vs eager"]
    assert axis.get_ylabel() == "rollouts per update U" and axis.get_yscale() == "linear"
    assert axis.get_ylim() == (0, 4)
    assert all(float(t).is_integer() for t in axis.get_yticks())
    # two values: the log axis, said so
    points[1] = curves.Point("b2", point(2, 16, {"eager": (300, 100, 100, 50), "graph[reuse]": (400, 20, 200, 10)}))
    (axis,) = [ax for ax in sweep_figures.break_even_figure(points).axes if ax.get_title() == "graph[reuse] vs eager"]
    assert axis.get_ylabel().endswith("(log)") and axis.get_yscale() == "log"
    assert axis.get_ylim()[0] < 2 < 4 < axis.get_ylim()[1]  # U=2 and U=4 off the axis's edges, not in its spines


def _drawn(axis) -> tuple[list, list]:
    """(each line's (batch, U) pairs, NaN where it breaks; each scatter's (batch, U) pairs) of a figure panel."""
    lines = [[(float(x), float(y)) for x, y in zip(*line.get_data())] for line in axis.get_lines()]
    marks = [[tuple(map(float, xy)) for xy in c.get_offsets()] for c in axis.collections]
    return lines, marks


def test_the_break_even_figure_draws_up_to_u_as_triangles_and_breaks_the_line_where_a_batch_has_no_from_u():
    # graph[reuse] vs eager: pays off from U=2 at batches 1 and 4; at batch 2 a cheaper first call and a dearer
    # steady state pay off only up to U=9 (20 + 60(U-1) <= 100 + 50(U-1)); at batch 8, dearer first and steady: never
    eager, from_two = (300, 100, 100, 50), (400, 20, 130, 10)
    times = {1: from_two, 2: (400, 20, 20, 60), 4: from_two, 8: (400, 200, 200, 60)}
    points = [curves.Point(f"b{b}", point(b, 16, {"eager": eager, "graph[reuse]": ms})) for b, ms in times.items()]
    # and at 64 new tokens, never at any batch: no colour of its own in the legend, nothing drawn
    points += [curves.Point(f"b{b}-64", point(b, 64, {"eager": eager, "graph[reuse]": times[8]})) for b in times]
    verdicts = [r.break_even.verdict for r in curves.break_evens(points)]
    # at batch 2 the steady state was the faster before the update (20 against 100 ms): the verdict says so
    assert verdicts[1].endswith("; but before any update its steady state was the faster (0.200x the baseline's, "
                                "whole range 0.200 to 0.200): the verdict reads the steady phases after the updates, "
                                "which drift or an update moved")
    assert [v.split("; but before any update")[0] for v in verdicts][:4] == [
        "pays off from 2 rollouts per update", "only up to U=9 rollouts per update: its steady state is slower",
        "pays off from 2 rollouts per update", "never: its first call and its steady state are not cheaper"]
    figure = sweep_figures.break_even_figure(points)
    (axis,) = [ax for ax in figure.axes if ax.get_title() == "graph[reuse] vs eager"]
    lines, marks = _drawn(axis)
    (line,) = lines
    assert [x for x, _ in line] == [1, 2, 4, 8] and [y for _, y in line][0::2] == [2, 2]
    assert all(np.isnan(y) for _, y in line[1::2])  # no line from batch 1 to 4 across batch 2's other verdict
    assert len(marks) == 1 and marks[0][0][1] == 9.0 and 1.5 < marks[0][0][0] < 2.5  # at batch 2, a little apart
    assert axis.collections[0].get_facecolor().size == 0  # open: only up to U=9
    assert [t.get_text() for t in axis.texts] == ["no U (see the table): never 5"]
    labels = [text.get_text() for text in figure.legends[0].get_texts()]  # once, for the figure
    assert labels == ["16 new tokens", "pays off from U", "only up to U"] and axis.get_legend() is None
    assert axis.get_xlim()[0] < 1 and axis.get_xlim()[1] > 8  # every batch of the sweep, drawn or not


def test_a_cpu_sweep_runs_through_the_sweep_notebook_to_html(cpu_sweep, tmp_path):
    folder, problems = cpu_sweep
    assert problems == []
    record, points = sweep.load(folder)
    assert [e["status"] for e, _ in points] == ["valid", "valid"]
    assert all("instrumented_calls" not in r.extra for _, r in points)  # instrument: false trims the point
    wall = record["wall"]
    assert (wall["executor"], wall["gpus"], wall["workers"], wall["points_run"]) == ("local", 0, 1, 2)
    assert wall["seconds"] > 0 and wall["start"] <= wall["end"]
    spec = sweep.SweepSpec.from_yaml(str(REPO / "params" / "sweep-cpu.yaml"))
    assert [e["slug"] for e in record["repeats"]["points"]] == [slug for _, slug, _ in repeats.sample(spec, 1)] * 2
    assert sweep.validity_problems(folder) == []
    html = (folder / "report.html").read_text(encoding="utf-8")
    assert "Synthetic model: tiny-llama" in html and "Points repeated alone" in html
    assert "from rollout_study" not in html  # rendered without the code
    # the figures drawn, and nothing an earlier report left there (the fixture put one in)
    assert sorted((folder / "figures").glob("*.png")) == sorted((folder / "figures").glob("sweep-synthetic-*.png"))
    assert len(list((folder / "figures").glob("*.png"))) == len(sweep_figures.FIGURES)
    summary = (folder / "summary.md").read_text(encoding="utf-8")
    assert "2 point(s): 2 valid, 0 failed or invalid; local executor" in summary
    # where the points' time went: every part measured, and the parts with the rest make up each point's wall
    assert "**Where each point's time went (seconds; the last row sums the points)**" in summary
    # summary.md is the report's blocks, every one but the figures, in the report's order
    shown = [b for b in report.blocks(record, points, str(tmp_path / "drawn"), folder) if b.kind != "figure"]
    assert [b.text for b in shown] == [b.text for b in report.blocks(record, points, None, folder)]
    place = 0
    for block in shown:  # each after the one before it
        place = summary.index(block.text, place) + len(block.text)
    assert len(shown) > 10
    times = report.time_table(points)
    assert list(times["point"]) == [e["slug"] for e, _ in points] + ["all points"]
    parts = ["start-up s", "measured calls s", "collect s", "parity s", "reference s", "update s", "rest s"]
    assert times[parts[:-1]].notna().all().all() and (times[parts[1:-1]] > 0).all().all()
    # the parts are disjoint: together they stay within each point's wall (the launcher's clock)
    assert ((times["rest s"] >= 0) & (times["rest s"] < times["wall s"])).all()
    assert "repeated alone: 1 point(s)" in summary
    assert "Per repeated point: moved run to run: the sweep's run and the runs alone by one executor (local)" \
        in summary
    assert "**Every steady phase compared" in summary
    assert "| in the sweep ms | alone 1 ms | alone 2 ms | sweep / nearest alone | low | high | alone 2 / alone 1 |" \
        in summary
    assert "**Host of each point" in summary and "- host: " in summary
    assert "eager generate()'s steady calls spread by" in summary  # the real points' calls give the spread
    from rollout_study import publish
    from rollout_study.present import index

    target = publish.publish(folder, tmp_path / "reports", name="sweep-cpu")
    (row,) = index.entries(tmp_path / "reports")
    assert row["validity"] == "valid" and "sweep of 2 points (sweep)" in row["answer"]
    assert (target / "repeats").is_dir() and (target / "report.html").is_file()


def test_published_copies_of_raw_results_link_to_them_and_what_they_link_to_is_not_replaced(cpu_sweep, tmp_path):
    import shutil

    from rollout_study import publish

    folder, _ = cpu_sweep
    reports = tmp_path / "reports"
    subset = publish.publish(folder, reports, name="subset")
    whole_run = tmp_path / "whole-run"  # the same points, as --keep-from copies them, and one measured anew
    shutil.copytree(folder, whole_run)
    first, second = sorted((whole_run / "points").glob("*.json"))
    data = json.loads(second.read_text(encoding="utf-8"))
    data["metadata"]["run_name"] += "-again"
    second.write_text(json.dumps(data), encoding="utf-8")
    whole = publish.publish(whole_run, reports, name="a-whole")  # sorts before `subset`: a link comes first
    linked = whole / "points" / first.name
    assert linked.is_symlink() and os.readlink(linked) == f"../../subset/points/{first.name}"
    assert linked.read_bytes() == (subset / "points" / first.name).read_bytes()
    assert not (whole / "points" / second.name).is_symlink()  # not the same bytes: its own file
    assert [e["status"] for e, _ in sweep.load(whole)[1]] == ["valid", "valid"]
    (reports / ".subset.rebuild-x" / "points").mkdir(parents=True)  # a rebuild's work folder beside them
    (reports / ".subset.rebuild-x" / "points" / first.name).symlink_to(f"../../subset/points/{first.name}")
    with pytest.raises(publish.PublishError, match=": a-whole beside it link to its raw results"):
        publish.publish(folder, reports, name="subset")  # would change or remove what `whole` holds
    assert (subset / "points" / first.name).is_file() and linked.read_bytes()
    again = publish.publish(whole_run, reports, name="a-whole")  # the linking report itself may be replaced
    assert (again / "points" / first.name).is_symlink()
    assert cli.main(["report", str(again), "--quiet"]) == cli.EXIT_OK  # a rebuilt report keeps its links
    assert (again / "points" / first.name).is_symlink() and (again / "report.html").is_file()
    third = publish.publish(whole_run, reports, name="b-third")  # links to the file, never to a link
    assert os.readlink(third / "points" / first.name) == f"../../subset/points/{first.name}"
    assert os.readlink(third / "points" / second.name) == f"../../a-whole/points/{second.name}"
    shutil.rmtree(reports / ".subset.rebuild-x")
    shutil.move(subset, tmp_path / "moved")  # by hand: the links now name nothing, and nothing reads as unmeasured
    with pytest.raises(ResultError, match="which is not there"):
        sweep.load(third)
    assert cli.main(["report", str(third), "--quiet"]) == cli.EXIT_BAD_INPUT


def test_two_sweeps_compare_by_wall_time(cpu_sweep, tmp_path, capsys):
    folder, _ = cpu_sweep
    twin = tmp_path / "twin"
    twin.mkdir()
    record = json.loads((folder / "sweep.json").read_text(encoding="utf-8"))
    half = record["wall"]["total_seconds"] / 2
    record["wall"].update(executor="ray", gpus=2, workers=2, seconds=half, total_seconds=half)
    (twin / "sweep.json").write_text(json.dumps(record), encoding="utf-8")
    assert cli.main(["compare", str(folder), str(twin)]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "wall time A / B: 2.00x" in out and "same points: yes (2 and 2)" in out
    assert "launchers differ" not in out
    # A sweep from before entries named their launcher ran new interpreters: the same as `fresh`
    old, new = tmp_path / "old", tmp_path / "new"
    for target, launcher in ((old, None), (new, "fresh")):
        target.mkdir()
        for entry in record["points"]:
            entry.pop("launcher", None) if launcher is None else entry.update(launcher=launcher)
        (target / "sweep.json").write_text(json.dumps(record), encoding="utf-8")
    assert cli.main(["compare", str(old), str(new)]) == cli.EXIT_OK
    assert "launchers differ" not in capsys.readouterr().out
    for entry in record["points"]:
        entry["launcher"] = "fork-server"
    (twin / "sweep.json").write_text(json.dumps(record), encoding="utf-8")
    assert cli.main(["compare", str(folder), str(twin)]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "launchers differ: each point's start-up depends on its launcher" in out and " fork-server " in out
    record["points"] = record["points"][:1]
    (twin / "sweep.json").write_text(json.dumps(record), encoding="utf-8")
    assert cli.main(["compare", str(folder), str(twin)]) == cli.EXIT_FAILED


def test_two_sweeps_compare_the_points_both_finished_by_tokens_and_steady_medians(cpu_sweep, tmp_path, capsys):
    import shutil

    folder, _ = cpu_sweep
    twin = tmp_path / "twin"
    shutil.copytree(folder, twin)
    assert cli.main(["compare", str(folder), str(twin)]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "points finished in both: 2; tokens: every call matches" in out and "median B/A" in out
    same = compare_sweeps(folder, twin).common
    assert same.shifts and all(s.ratio.point == 1.0 for s in same.shifts) and same.one_sided == ()
    # B's eager steady calls twice as slow, one call's tokens changed, another point without token hashes
    record = json.loads((twin / "sweep.json").read_text(encoding="utf-8"))
    first, second = (twin / entry["file"] for entry in record["points"][:2])
    data = json.loads(first.read_text(encoding="utf-8"))
    for call in data["calls"]:
        if call["engine"] == "eager" and call["phase"].startswith("steady"):
            call["total_ms"] *= 2
            call["breakdown_ms"] = {part: ms * 2 for part, ms in call["breakdown_ms"].items()}
    changed = next(c for c in data["calls"] if c["engine"] != "eager")
    changed["tokens_sha256"] = "0" * 64
    first.write_text(json.dumps(data), encoding="utf-8")
    unhashed = json.loads(second.read_text(encoding="utf-8"))
    for call in unhashed["calls"]:
        call.pop("tokens_sha256", None)
    second.write_text(json.dumps(unhashed), encoding="utf-8")
    moved = compare_sweeps(folder, twin).common
    assert cli.main(["compare", str(folder), str(twin)]) == cli.EXIT_FAILED  # the same points, other tokens
    capsys.readouterr()
    slugs = [entry["slug"] for entry in record["points"][:2]]
    assert [d.split(":")[0] for d in moved.token_differences] == [slugs[0]]
    assert moved.tokens_unchecked == (slugs[1],)
    doubled = [s for s in moved.shifts if s.variant == "eager" and s.ratio.point > 1.5]
    assert doubled and all(s.ratio.point == pytest.approx(2.0) for s in doubled)
    text = "\n".join(moved.lines())
    assert "tokens: DIFFER in 1" in text
    assert f"tokens not compared (no common call with token hashes): {slugs[1]}" in text
    # a variant B did not measure at one point: named, not silently dropped
    for call in unhashed["calls"]:
        if call["engine"] != "eager" and call["phase"].startswith("steady"):
            call["phase"] = "first"
    second.write_text(json.dumps(unhashed), encoding="utf-8")
    one_sided = compare_sweeps(folder, twin).common.one_sided
    assert one_sided and all(line.startswith(f"{slugs[1]}: ") and line.endswith("in A only") for line in one_sided)
    # B lost a point: the point both finished is compared, the other named as finished by A only
    second.unlink()
    lost = compare_sweeps(folder, twin).common
    assert lost.compared == (slugs[0],) and lost.unfinished == ((slugs[1],), ())
    assert f"finished by A only, though both sweeps list them: 1: {slugs[1]}" in "\n".join(lost.lines())


def test_the_common_points_table_counts_phases_moved_faster_and_slower_in_b_apart():
    from rollout_study.compare import CommonPoints

    def shift(variant, b, a):  # B's steady samples over A's, judged by the repeats' rule
        def result(values):
            return point(1, 16, {variant: (1, 1, 1, 1)}, steady_samples={(variant, "steady"): values,
                                                                          (variant, "steady_after_update"): values})
        return repeats.shifts(result(b), result(a))

    slower = shift("eager", (20, 21, 22, 21, 20.5, 21.5), (10, 10.5, 11, 10.5, 10.2, 10.8))
    faster = shift("graph[reuse]", (5, 5.1, 5.2, 5.1, 5.0, 5.2), (10, 10.2, 10.4, 10.2, 10.1, 10.3))
    within = shift("graph[recapture]", (10, 12, 9, 11, 10, 11), (11, 9, 12, 10, 10, 11))
    # three samples a side whose ranges do not overlap: moved at 95% before, no verdict now (1 in 10 by chance)
    few = shift("hf-continuous", (20, 21, 22), (10, 10.5, 11))
    assert {s.verdict for s in slower + faster} == {repeats.MOVED} and {s.verdict for s in within} != {repeats.MOVED}
    assert {s.verdict for s in few} == {repeats.FEW} and all(not s.ratio.contains(1.0) for s in few)
    lines = CommonPoints(("p",), shifts=tuple(slower + faster + within + few)).lines()
    rows = {line.split()[0]: line.split() for line in lines if line.split()[0] in ("eager", "graph[reuse]",
                                                                                  "graph[recapture]", "hf-continuous")}
    n = len(slower)
    assert rows["eager"][-3:] == ["0", str(n), "0"] and rows["graph[reuse]"][-3:] == [str(len(faster)), "0", "0"]
    assert rows["graph[recapture]"][-3:] == ["0", "0", "0"]
    assert rows["hf-continuous"][-3:] == ["0", "0", str(len(few))]
    assert float(rows["eager"][2]) == pytest.approx(2.0, rel=0.02)
    assert float(rows["graph[reuse]"][2]) == pytest.approx(0.5, rel=0.02)
    assert CommonPoints(()).lines() == ["points finished in both: none, so no tokens or medians to compare"]
    assert CommonPoints(("p",)).lines()[-1] == "steady medians: no steady phase measured in both"


def test_the_code_fingerprint_moves_with_the_package_and_the_study_notebook_only(tmp_path):
    from rollout_study.environment import code_fingerprint

    (tmp_path / "rollout_study" / "engines").mkdir(parents=True)
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "rollout_study" / "engines" / "graph.py").write_text("A = 1\n")
    (tmp_path / "notebooks" / "study.ipynb").write_text("{}")
    (tmp_path / "README.md").write_text("figures")
    first = code_fingerprint(str(tmp_path))
    (tmp_path / "README.md").write_text("other figures")
    (tmp_path / "rollout_study" / "__pycache__").mkdir()
    (tmp_path / "rollout_study" / "__pycache__" / "x.py").write_text("B = 2\n")
    assert code_fingerprint(str(tmp_path)) == first
    (tmp_path / "rollout_study" / "engines" / "graph.py").write_text("A = 2\n")
    assert code_fingerprint(str(tmp_path)) != first
    (tmp_path / "rollout_study" / "engines" / "graph.py").write_text("A = 1\n")
    (tmp_path / "notebooks" / "study.ipynb").write_text('{"cells": []}')
    second = code_fingerprint(str(tmp_path))
    assert second != first
    # What the README's `jupyter nbconvert --execute` leaves beside it (git-ignored) measures nothing: it moved the
    # fingerprint of a clean tree, and a sweep resumed there measured its kept points again
    (tmp_path / "notebooks" / "study.nbconvert.ipynb").write_text('{"cells": [1]}')
    assert code_fingerprint(str(tmp_path)) == second


def test_the_code_fingerprint_leaves_out_what_only_presents(tmp_path):
    """A report's table may change between the sessions of a sweep; what measures may not."""
    from rollout_study.environment import code_fingerprint

    for path, text in (("rollout_study/engines/graph.py", "A = 1\n"), ("rollout_study/present/tables.py", "T = 1\n"),
                       ("rollout_study/presentation.py", "P = 1\n"), ("notebooks/study.ipynb", "{}"),
                       ("notebooks/report.ipynb", "{}"), ("notebooks/sweep.ipynb", "{}"),
                       ("notebooks/hazards.ipynb", "{}")):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    first = code_fingerprint(str(tmp_path))
    (tmp_path / "rollout_study/present/tables.py").write_text("T = 2\n")
    (tmp_path / "rollout_study/present/captures.py").write_text("C = 1\n")
    (tmp_path / "notebooks/report.ipynb").write_text('{"cells": []}')
    (tmp_path / "notebooks/sweep.ipynb").write_text('{"cells": []}')
    (tmp_path / "notebooks/hazards.ipynb").write_text('{"cells": []}')
    for reader in ("sweep_curves.py", "sweep_settings.py", "sweep_crossover.py", "sweep_validity.py",
                   "compare.py", "policy_gap.py"):  # they only read finished sweeps or runs
        (tmp_path / "rollout_study" / reader).write_text("R = 1\n")
    assert code_fingerprint(str(tmp_path)) == first
    (tmp_path / "rollout_study/sweep.py").write_text("S = 1\n")  # sweep.py launches the points: it measures
    assert code_fingerprint(str(tmp_path)) != first
    (tmp_path / "rollout_study/sweep.py").unlink()
    # Only the present/ folder: a module whose name merely begins with "present" still measures.
    (tmp_path / "rollout_study/presentation.py").write_text("P = 2\n")
    assert code_fingerprint(str(tmp_path)) != first


def test_a_specs_points_are_validated_once_however_many_steps_ask(monkeypatch):
    """Each point's StudyParams reads a checkpoint's config and weights' headers: the file's validation, the
    command's checks, the record and the repeats' sample take the same points, not four validations of each."""
    made = []
    real = StudyParams.from_dict.__func__
    monkeypatch.setattr(StudyParams, "from_dict",
                        classmethod(lambda cls, *args, **kwargs: made.append(1) or real(cls, *args, **kwargs)))
    spec = sweep.SweepSpec.from_yaml(str(REPO / "params" / "sweep-cpu.yaml"))
    first = len(made)
    points = spec.points()
    points.pop()  # a copy of the list: the spec's own stays whole
    assert len(spec.points()) == len(points) + 1 == first and len(made) == first
    assert len(dataclasses.replace(spec, name="other").points()) == first and len(made) == 2 * first


def test_a_two_point_cpu_sweep_through_the_fork_server_runs_each_point_in_a_forked_child(tmp_path):
    spec = sweep.SweepSpec.from_dict({**yaml.safe_load((REPO / "params" / "sweep-cpu.yaml").read_text()),
                                      "launcher": "fork-server", "repeat_alone": 1})
    assert sweep.SweepSpec.from_dict(spec.to_dict()) == spec  # sweep.json's spec reads back the same
    record = sweep.run_local(spec, tmp_path, progress=False)
    assert [(p["status"], p["launcher"]) for p in record["points"]] == [("valid", "fork-server")] * 2
    block = repeats.run(spec, tmp_path, progress=False)
    assert [(p["status"], p["launcher"]) for p in block["points"]] == [("valid", "fork-server")] * repeats.ALONE_RUNS
    _, points = sweep.load(tmp_path)
    assert {r.metadata["command"] for _, r in points} == {"fresh process (fork server)"}
    assert sweep.validity_problems(tmp_path) == []


def test_a_fork_server_childs_failure_comes_back_with_its_output_and_the_server_goes_on():
    from rollout_study import forkserver
    from rollout_study.launch import LaunchError

    params = StudyParams.from_dict({"device": "cpu", "max_new_tokens": 2, "requests": 1, "batch_size": 1,
                                    "iterations": 1, "cycles": 1, "control_cycles": 0, "cold_starts": 0,
                                    "profile": False, "instrument": False, "engines": ["eager"]})
    with pytest.raises(LaunchError, match=r"(?s)fork-server child exited 1: .*mode must be one of measure"):
        forkserver.run_forked(params, "no-such-mode")
    assert forkserver.run_forked(params, "first_only").calls  # the next child runs


def test_a_fork_server_child_past_its_time_is_killed_and_one_whose_caller_changed_an_import_variable_stops(
        monkeypatch):
    from rollout_study import forkserver
    from rollout_study.launch import LaunchError

    params = StudyParams.from_dict({"device": "cpu", "max_new_tokens": 64, "requests": 2, "batch_size": 1,
                                    "iterations": 100, "cold_starts": 0, "profile": False, "instrument": False})
    with pytest.raises(LaunchError, match=r"fork-server child timed out after 0.5 s and was killed"):  # output quoted
        forkserver.run_forked(params, "measure", timeout=0.5)  # its study would take a minute
    monkeypatch.setenv("TORCHINDUCTOR_ROLLOUT_STUDY_TEST", "1")  # a TORCH* variable the server did not start with
    with pytest.raises(LaunchError, match=r"(?s)TORCHINDUCTOR_ROLLOUT_STUDY_TEST differ from the fork server's"):
        forkserver.run_forked(params, "first_only")


def test_a_variable_read_at_import_may_differ_from_the_servers_start_only_as_the_imports_set_it():
    from rollout_study.forkserver import _differs_from_server

    started, now = {"OMP_NUM_THREADS": "4"}, {"OMP_NUM_THREADS": "4", "TORCHINDUCTOR_CACHE_DIR": "/tmp/ti"}
    assert _differs_from_server({"OMP_NUM_THREADS": "4"}, started, now) == []
    assert _differs_from_server({"OMP_NUM_THREADS": "4", "TORCHINDUCTOR_CACHE_DIR": "/tmp/ti"}, started, now) == []
    assert _differs_from_server({"OMP_NUM_THREADS": "1"}, started, now) == ["OMP_NUM_THREADS"]
    assert _differs_from_server({"OMP_NUM_THREADS": "4", "TORCHINDUCTOR_CACHE_DIR": "/x"}, started, now) == [
        "TORCHINDUCTOR_CACHE_DIR"]
    assert _differs_from_server({"OMP_NUM_THREADS": "4", "PYTORCH_NVML_BASED_CUDA_CHECK": "0", "PATH": "/x"},
                                started, {**now, "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}) == []  # the server's own


def test_a_subset_may_set_its_own_launcher(tmp_path):
    (tmp_path / "full.yaml").write_text("name: full\nlauncher: fork-server\nsweep:\n  batch_size: [1, 2]\n"
                                        "device: cpu\n", encoding="utf-8")
    (tmp_path / "part.yaml").write_text("subset_of: full.yaml\nsweep:\n  batch_size: [1]\n", encoding="utf-8")
    (tmp_path / "fresh.yaml").write_text("subset_of: full.yaml\nlauncher: fresh\nsweep:\n  batch_size: [1]\n",
                                         encoding="utf-8")
    assert sweep.SweepSpec.from_yaml(str(tmp_path / "part.yaml")).launcher == "fork-server"  # the full file's
    fresh = sweep.SweepSpec.from_yaml(str(tmp_path / "fresh.yaml"))
    part = sweep.SweepSpec.from_yaml(str(tmp_path / "part.yaml"))
    assert fresh.launcher == "fresh"
    assert sweep.point_hash(fresh.points()[0][1]) == sweep.point_hash(part.points()[0][1])  # same point, same hash


def test_a_sweep_files_launcher_is_checked_before_any_work(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("sweep:\n  batch_size: [1, 2]\ndevice: cpu\nlauncher: spawn\n", encoding="utf-8")
    runs = tmp_path / "runs"
    assert cli.main(["sweep", str(bad), "--output-root", str(runs)]) == cli.EXIT_BAD_INPUT
    assert "launcher must be one of fresh, fork-server, got 'spawn'" in capsys.readouterr().err and not runs.exists()


PASSED = "tests/test_cuda.py::test_capture PASSED [ 50%]\n"
SUMMARY = "=================== 2 passed, 16 warnings in 83.33s (0:01:23) ===================\n"


@pytest.mark.parametrize("output, sweeps", [
    (PASSED + "tests/test_cuda.py::test_fork PASSED [100%]\n" + SUMMARY, True),
    # the sweep runs no profiling process: a profiler or tracing test's failure is for the next session
    (PASSED + "tests/test_cuda.py::test_the_profiler_records_every_kernel FAILED [100%]\n"
     + SUMMARY.replace("2 passed", "1 failed, 1 passed"), True),
    (PASSED + "tests/test_cuda.py::test_a_graphs_replay_survives_hf_compiles_clearing_of_cublas_workspaces FAILED"
     " [100%]\n" + SUMMARY.replace("2 passed", "1 failed, 1 passed"), False),
    (PASSED + "tests/test_cuda.py::test_a_fork_server_child_runs_a_point_on_the_gpu ERROR [100%]\n"
     + SUMMARY.replace("2 passed", "1 error, 1 passed"), False),
    (PASSED + "tests/test_cuda.py::test_hf_continuous Fatal Python error: Aborted\n", False),  # no summary
])
def test_the_h200_scripts_gate_starts_a_sweep_only_where_the_cuda_tests_it_needs_passed(tmp_path, output, sweeps):
    log = tmp_path / "cuda-tests.txt"
    log.write_text("commit: " + "e" * 40 + "\n" + output, encoding="utf-8")
    done = subprocess.run(["bash", str(REPO / "tools" / "sweep-gate.sh"), str(log)], capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode == 0) == sweeps, done.stdout


def test_a_section_of_one_batch_size_draws_no_figure_over_batch_and_says_so(tmp_path):
    times = {"eager": (1, 100.0, 1, 100.0), "graph[reuse]": (1, 10.0, 1, 10.0)}
    record = {"spec": {"name": "s"}, "wall": {"executor": "local", "seconds": 1.0}}
    one = {f"b1-{n}": point(1, n, times) for n in (16, 64)}
    two = {**one, "b2-16": point(2, 16, times), "b2-64": point(2, 64, times)}
    for results, kinds in ((one, ["growth"]), (two, [kind for kind, _, _ in sweep_figures.FIGURES])):
        figures = tmp_path / f"figures-{len(results)}"
        record["points"] = [{"slug": s, "status": "valid"} for s in results]
        blocks = report.blocks(record, loaded(results), str(figures), folder=tmp_path)
        drawn = [b.body for b in blocks if b.kind == "figure"]
        assert len(drawn) == len(kinds) and all(d.endswith(f"-{kind}.png") for d, kind in zip(drawn, kinds))
        assert sorted(p.name for p in figures.glob("*.png")) == sorted(Path(d).name for d in drawn)
        notes = [b.text for b in blocks if b.kind == "note" and b.text.startswith("one batch size here")]
        assert notes == ([report.ONE_BATCH_NOTE.format(batch=1)] if results is one else [])


def test_intervals_that_are_their_samples_whole_range_are_named_so_in_the_answer_and_the_speed_up_caption(tmp_path):
    record = {"spec": {"name": "s"}, "executor": "local", "wall_s": 1.0}
    three = [({"slug": f"b{b}", "status": "valid"}, _graph_over_eager(b, [60.0, 62.0, 65.0], "graph[reuse]", 16).result)
             for b in (1, 2)]
    (line,) = [x for x in report.answer_lines(record, three, tmp_path) if x.startswith("intervals: ")]
    assert line.startswith("intervals: every steady speed-up's 95% interval is its samples' whole range (few calls")
    blocks = report.blocks(record, three, None, tmp_path)
    (caption,) = [b.text for b in blocks if b.kind == "table" and "Steady speed-up over eager" in b.text]
    assert caption.endswith("; every 95% interval here is its samples' whole range")
    assert stats.WHOLE_RANGE in report.definitions()
    # eight calls a side: a 95% interval proper, and nothing said
    eight = [({"slug": "b1", "status": "valid"},
              _graph_over_eager(1, [60.0, 61.0, 62.0, 62.5, 63.0, 64.0, 65.0, 66.0], "graph[reuse]", 16).result)]
    assert not [x for x in report.answer_lines(record, eight, tmp_path) if x.startswith("intervals: ")]


def test_the_speed_up_figures_bars_are_named_whole_range_in_their_axis_and_caption_where_they_are(tmp_path):
    record = {"spec": {"name": "s"}, "executor": "local", "wall_s": 1.0}
    for samples, bounds in (([60.0, 62.0, 65.0], "bars: whole range"),
                            ([60.0, 61.0, 62.0, 62.5, 63.0, 64.0, 65.0, 66.0], "bars: 95% interval")):
        points = [_graph_over_eager(b, samples, "graph[reuse]", 16) for b in (1, 2)]
        entries = [({"slug": p.slug, "status": "valid"}, p.result) for p in points]
        figures = tmp_path / f"figures-{len(samples)}"
        blocks = report.blocks(record, entries, str(figures), tmp_path)
        (caption,) = [b.text for b in blocks if b.kind == "figure" and "Steady speed-up" in b.text]
        whole = bounds == "bars: whole range"
        assert caption.endswith("; every 95% interval here is its samples' whole range") == whole
        figure = sweep_figures.speedup_figure(points)
        assert figure.axes[0].get_ylabel() == f"speed-up over eager generate() (steady, {bounds})"
