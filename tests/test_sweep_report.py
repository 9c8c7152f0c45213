"""The sweep report's numbers and words from hand-made results: speed-ups, crossings, the answer, the README
grids, places and engine groups, where the time went, the host, and the figures."""
import dataclasses
import copy
import json
import re
from pathlib import Path

import numpy as np
from matplotlib.collections import PathCollection
from matplotlib.markers import MarkerStyle
import pandas as pd
import pytest

from result_fixture import make_result, sweep_entries as loaded, sweep_point as point
from rollout_study import repeats, stats, sweep
from rollout_study import sweep_curves as curves
from rollout_study import sweep_crossover as crossing
from rollout_study.present import sweep as report
from rollout_study.present import notebook, sweep_figures, sweep_repeats
from rollout_study.present.notebook import Block
from rollout_study.present.text import MIB, NO_GRAPH_NOTE
from rollout_study.result import Result

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
    table = report.after_update_table([p]).set_index("variant")
    assert table.loc["graph[reuse]", "first / steady"] == pytest.approx(13.0)  # what the first call costs over steady


def test_each_graph_variants_reserved_growth_is_over_the_call_just_before_it_not_the_first():
    # Two graph variants: the second's first call follows the first's, so its growth is over that one's reserved
    # (the fixture adds 10 MiB x batch per first call), not over eager's, which would charge it both captures.
    result = point(4, 16, {"eager": (300, 100, 100, 50), "graph[recapture]": (400, 20, 130, 10),
                           "graph[reuse]": (400, 20, 130, 10)})
    rows = {r.variant: r.reserved_delta_bytes for r in curves.captures([curves.Point("b4", result)])}
    assert rows == {"graph[recapture]": 10 * 2 ** 20 * 4, "graph[reuse]": 10 * 2 ** 20 * 4}


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
    assert clear.ratio.high < curves.CROSSOVER and not clear.interval_includes_threshold
    assert clear.text == "batch 2 (1.47x; 5.00x at batch 1)"
    (held,) = crossing.crossovers([at(1, [20.0] * 3), at(4, [64.0, 68.0, 70.0])])
    low, high = held.ratio.low, held.ratio.high
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

    def bounded(low, high):
        return dataclasses.replace(clear, ratio=stats.Ratio(clear.speedup, low, high))
    assert bounded(1.4, curves.CROSSOVER).interval_includes_threshold
    assert bounded(curves.CROSSOVER, 1.6).interval_includes_threshold
    assert not bounded(1.3, 1.49).interval_includes_threshold
    # one sample a side: no interval, the point estimate alone, said as before
    samples = {("eager", "steady"): [100.0], ("graph[recapture]", "steady"): [80.0]}
    cells = {"eager": (1, 100.0, 1, 1), "graph[recapture]": (1, 1, 1, 1)}
    (single,) = crossing.crossovers([curves.Point("b1", point(1, 64, cells, steady_samples=samples))])
    assert not single.ratio.has_interval and single.text.startswith("batch 1 (1.25x): already under")


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
    def c(variant, tokens, batch, speedup, before, swept):
        return crossing.Crossover(variant, tokens, batch, None if speedup is None else stats.Ratio(speedup, None, None),
                                  before, swept)
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


def test_the_answer_and_the_readme_give_each_variants_whole_range_and_a_gpu_count_only_where_every_run_had_it():
    from rollout_study.present import sweep_readme

    points = loaded({f"b{b}": point(b, 16, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (1, 10.0 * b, 1, 1)})
                     for b in (1, 2)})
    # resumed on another machine: one invocation on 1 GPU, the next on 4; neither count is the sweep's
    wall = {"executor": "ray", "gpus": 4, "seconds": 5.0, "earlier": [{"executor": "local", "gpus": 1, "seconds": 3.0}]}
    record = {"spec": {"name": "sw", "report": "sweep"}, "executor": "ray", "wall": wall}
    assert any(": graph[reuse] 5.00x to 10.00x over eager; " in line for line in report.answer_lines(record, points))
    block = sweep_readme.readme_block(record, points, "sw")
    assert "2 points, 2 valid, 0 failed or invalid; ray executor, 5 s of points over 2 invocation(s)" in block


def test_only_a_sweep_measured_without_cuda_graphs_is_warned_so():
    record = {"spec": {"name": "sw", "report": "sweep"}, "executor": "local"}

    def warnings(points):
        return [b.text for b in report.blocks(record, points, None) if b.kind == "warning"]
    assert NO_GRAPH_NOTE in warnings(loaded({"cpu": make_result()}))
    assert NO_GRAPH_NOTE not in warnings(loaded({"gpu": point(1, 16, {"eager": (1, 100.0, 1, 1)})}))


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
    # the eager panels draw each place's first valid point's: said, with how far the groups' own differ (120 over
    # 100 ms here; the first group's unless its point there failed, as "lost" did),
    # for each speed-up divides by its own (the 1B sweep's eager and hf-compile panels read 1.0x beside its 1.64x)
    for make in (sweep_figures.latency_figure, sweep_figures.growth_figure, sweep_figures.after_update_figure):
        titles = [" ".join(ax.get_title().split()) for ax in make(usable).axes if ax.get_visible()]
        assert titles[0] == ("eager: each place's first valid point's (each engine group ran its own, up to 1.20x "
                             "apart at one place; each speed-up divides by its group's)")
        assert titles[1:] == ["graph[reuse]", "hf-compile"]
    alone = [p for p in usable if p.slug != "compiled"]  # one group: its eager is every speed-up's
    assert sweep_figures.latency_figure(alone).axes[0].get_title() == "eager"


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
    assert pd.isna(times.loc["all points", "collect s"])  # no point recorded it: blank, not a sum of 0 s
    assert report.time_table([]).empty


def test_each_points_parts_and_rest_make_up_its_wall_and_the_start_up_counts_only_a_process_it_started():
    def timed(command: str) -> Result:
        result = point(1, 16, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (5, 10.0, 1, 1)})
        result.metadata.update(command=command, untimed_ms={"collect": 100.0, "parity": 200.0, "reference": 300.0,
                                                            "update": 400.0},
                               startup={"process_startup_ms": 1000.0, "model_load_ms": 2000.0,
                                        "initialization_ms": 500.0})
        return result

    instrumented = timed("fresh process: rollout-study bench")
    instrumented.extra["instrumented_calls"] = []  # their time is in no part: the rest would hide it
    entries = [({"slug": "in-process", "wall_s": 20.0}, timed("pytest")),
               ({"slug": "fresh", "wall_s": 21.0}, timed("fresh process: rollout-study bench")),
               ({"slug": "instrumented", "wall_s": 22.0}, instrumented),
               ({"slug": "kept"}, timed("fresh process: rollout-study bench"))]  # from an earlier invocation
    times = report.time_table(entries).set_index("point")
    # a point run inside a longer-lived process did not pay that process's start
    assert times.loc["in-process", "start-up s"] == pytest.approx(2.5)
    assert times.loc["fresh", "start-up s"] == pytest.approx(3.5)
    parts = ["start-up s", "measured calls s", "collect s", "parity s", "reference s", "update s", "rest s"]
    for slug in ("in-process", "fresh"):
        assert times.loc[slug, parts].sum() == pytest.approx(times.loc[slug, "wall s"])
    assert pd.isna(times.loc["instrumented", "rest s"]) and pd.isna(times.loc["kept", "rest s"])
    # a wall summed over three of four points beside parts summed over four: said
    (total,) = [slug for slug in times.index if slug.startswith("all points")]
    assert total == "all points (wall s: the 3 of 4 run in the latest invocation)"


def test_the_repeats_row_counts_the_points_run_alone():
    record = {"wall": {"executor": "local", "workers": 1, "seconds": 10.0},
              "repeats": {"seconds": 4.0, "points": [{"slug": "a", "executor": "local"},
                                                     {"slug": "b", "executor": "local"}]}}
    row = report.wall_table(record).iloc[-1]
    assert row["what"] == "repeats alone" and row["points run"] == 2 and row["seconds"] == 4.0


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


def __line(axis) -> tuple[list, list]:
    """(each line's (batch, U) pairs, NaN where it breaks; each scatter's (batch, U) pairs) of a figure panel."""
    lines = [[(float(x), float(y)) for x, y in zip(*line.get_data())] for line in axis.get_lines()]
    marks = [[tuple(map(float, xy)) for xy in c.get_offsets()] for c in axis.collections
             if isinstance(c, PathCollection)]  # the scatters; the "never" band is a PolyCollection
    return lines, marks


def test_the_break_even_figure_draws_up_to_u_as_triangles_and_breaks_the_line_where_a_batch_has_no_from_u():
    # graph[reuse] vs eager: pays off from U=2 at batches 1 and 4; at batch 2 a cheaper first call and a dearer
    # steady state pay off only up to U=9 (20 + 60(U-1) <= 100 + 50(U-1)); at batch 8, dearer first and steady: never
    eager, from_two = (300, 100, 100, 50), (400, 20, 130, 10)
    times = {1: from_two, 2: (400, 20, 20, 60), 4: from_two, 8: (400, 200, 200, 60)}
    points = [curves.Point(f"b{b}", point(b, 16, {"eager": eager, "graph[reuse]": ms})) for b, ms in times.items()]
    # and at 64 new tokens, never at any batch: crosses at the top of the panel, in its own colour
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
    lines, marks = __line(axis)
    (line,) = lines
    assert [x for x, _ in line] == [1, 2, 4, 8] and [y for _, y in line][0::2] == [2, 2]
    assert all(np.isnan(y) for _, y in line[1::2])  # no line from batch 1 to 4 across batch 2's other verdict
    triangles, crosses_16, crosses_64, ring = marks
    assert len(triangles) == 1 and triangles[0][1] == 9.0 and 1.5 < triangles[0][0] < 2.5  # batch 2, a little apart
    # batch 2's verdict is contradicted by the steady states before the update (above): a red ring on its triangle
    scatters = [c for c in axis.collections if isinstance(c, PathCollection)]
    assert ring == triangles and scatters[-1].get_edgecolor().tolist() == [[0.8, 0.0, 0.0, 1.0]]
    # open (white) over the lines: the 1B batch 16 / 512 tokens triangle hid under the U=1 lines of other counts
    assert axis.collections[0].get_facecolor().tolist() == [[1.0, 1.0, 1.0, 1.0]]
    assert axis.collections[0].get_zorder() > max(line.get_zorder() for line in axis.get_lines())
    # "never" in a grey band at the panel's top (over the batch), where a gap alone would hide under other lines
    at = sweep_figures.NEVER_AT
    assert [(round(x), y) for x, y in crosses_16] == [(8, at)]
    assert [round(x) for x, _ in crosses_64] == [1, 2, 4, 8] and {y for _, y in crosses_64} == {at}
    assert axis.collections[1].get_offset_transform() is axis.get_xaxis_transform()
    assert axis.collections[1].get_edgecolor().tolist() != axis.collections[2].get_edgecolor().tolist()
    # the ring's new-token count beside it: where the counts' U coincide the ring alone does not say whose
    assert [t.get_text() for t in axis.texts] == ["16", "no U (see the table): never 5", "never"]
    assert axis.texts[0].xy == (ring[0][0], 9.0) and axis.texts[0].get_color() == "#c00"
    # no U drawn in the band: the axis raised so the largest U (9) sits under it
    to_axes = axis.transAxes.inverted().transform
    assert to_axes(axis.transData.transform((2, 9.0)))[1] < at - 0.05
    labels = [text.get_text() for text in figure.legends[0].get_texts()]  # once, for the figure
    assert labels == ["16 new tokens", "64 new tokens", "pays off from U", "only up to U", sweep_figures.NEVER,
                      sweep_figures.TURNED]
    assert axis.get_legend() is None
    assert axis.get_xlim()[0] < 1 and axis.get_xlim()[1] > 8  # every batch of the sweep, drawn or not


def test_a_u_of_one_the_first_calls_alone_decide_is_an_open_square_and_a_steady_gain_a_dot():
    # reuse against recapture: at batch 1 the steady states tie (10.2 against 10 ms, within the 5% margin), so
    # reuse's cheaper first call alone decides U=1; at batch 2 its steady state is half recapture's, a real gain
    eager = (300, 100, 100, 50)
    times = {1: ((400, 10, 10, 10.2), (400, 10, 100, 10)), 2: ((400, 10, 10, 10), (400, 20, 100, 20))}
    points = [curves.Point(f"b{b}", point(b, 16, {"eager": eager, "graph[reuse]": reuse, "graph[recapture]": again}))
              for b, (reuse, again) in times.items()]
    by_batch = {r.batch: r.break_even for r in curves.break_evens(points)
                if (r.candidate, r.baseline) == ("graph[reuse]", "graph[recapture]")}
    assert (by_batch[1].first_u, by_batch[1].steady_differs) == (1, False)
    assert (by_batch[2].first_u, by_batch[2].steady_differs) == (1, True)
    figure = sweep_figures.break_even_figure(points)
    (axis,) = [ax for ax in figure.axes if ax.get_title() == "graph[reuse] vs graph[recapture]"]
    (line,) = axis.get_lines()
    assert list(line.get_xdata()) == [1, 2] and list(line.get_ydata()) == [1, 1]  # one line through both
    assert line.get_markevery() == [1]  # the filled dot at batch 2 alone
    (squares,) = [c for c in axis.collections if isinstance(c, PathCollection)]
    assert [tuple(map(float, xy)) for xy in squares.get_offsets()] == [(1.0, 1.0)]
    # open (white) squares over their line: open circles' concentric rings read as the counts' concentric dots
    children = axis.get_children()
    assert squares.get_facecolor().tolist() == [[1.0, 1.0, 1.0, 1.0]]
    assert squares.get_zorder() == line.get_zorder() and children.index(squares) > children.index(line)
    square = MarkerStyle("s")
    drawn = squares.get_paths()[0].vertices.tolist()
    assert drawn == square.get_path().transformed(square.get_transform()).vertices.tolist()
    labels = [text.get_text() for text in figure.legends[0].get_texts()]
    assert labels == ["16 new tokens", "pays off from U", sweep_figures.TIE]
    # 64 new tokens gain at batch 1 where 16 ties: its smaller dot is drawn after 16's white square, not under it
    gains = {1: ((400, 10, 10, 5), (400, 10, 100, 10)), 2: times[2]}
    mixed = points + [curves.Point(f"b{b}-64", point(b, 64, {"eager": eager, "graph[reuse]": reuse,
                                                             "graph[recapture]": again}))
                      for b, (reuse, again) in gains.items()]
    (axis,) = [ax for ax in sweep_figures.break_even_figure(mixed).axes
               if ax.get_title() == "graph[reuse] vs graph[recapture]"]
    (squares,) = [c for c in axis.collections if isinstance(c, PathCollection)]
    first, second = axis.get_lines()
    assert second.get_markevery() == [0, 1] and second.get_markersize() < squares.get_sizes()[0] ** 0.5
    children = axis.get_children()
    assert second.get_zorder() == squares.get_zorder() and children.index(second) > children.index(squares)
    # every U=1 a tie, in every panel: the legend names the squares and no dot
    alone = [curves.Point("b1", point(1, 16, {"graph[reuse]": times[1][0], "graph[recapture]": times[1][1]}))]
    figure = sweep_figures.break_even_figure(alone)
    assert figure.axes[0].get_lines()[0].get_markevery() == []
    assert [text.get_text() for text in figure.legends[0].get_texts()] == ["16 new tokens", sweep_figures.TIE]


def test_red_rings_at_one_place_share_one_label_naming_each_count():
    # reuse was the slower before the update (200 against 100 ms) and the faster after it, at 16 and 64 tokens:
    # both rings sit at batch 1, U=1, where two labels printed over each other ("64/66")
    times = {"eager": (300, 100, 100, 50), "graph[reuse]": (400, 200, 10, 10)}
    points = [curves.Point(f"b1-{n}", point(1, n, times)) for n in (16, 64)]
    assert all(sweep_figures._turned(r.break_even) for r in curves.break_evens(points))
    (axis,) = sweep_figures.break_even_figure(points).axes
    assert [(t.get_text(), t.xy) for t in axis.texts if t.get_color() == "#c00"] == [("16, 64", (1, 1))]


def test_the_break_even_legend_names_only_marks_drawn_and_a_panel_with_no_u_has_no_u_ticks():
    # graph[reuse] pays off from U=1 everywhere; graph[recapture] never: no triangle anywhere (the probes' figures
    # had listed one), and the never panel's U axis has no value to tick (it read -0.05 to 0.06)
    eager, firsts, never = (300, 100, 100, 50), (400, 10, 10, 10), (400, 200, 200, 60)
    points = [curves.Point(f"b{b}", point(b, 16, {"eager": eager, "graph[reuse]": firsts, "graph[recapture]": never}))
              for b in (1, 2)]
    figure = sweep_figures.break_even_figure(points)
    labels = [text.get_text() for text in figure.legends[0].get_texts()]
    assert labels == ["16 new tokens", "pays off from U", sweep_figures.NEVER]
    (nothing,) = [ax for ax in figure.axes if ax.get_title() == "graph[recapture] vs eager"]
    (ones,) = [ax for ax in figure.axes if ax.get_title() == "graph[reuse] vs eager"]
    assert list(nothing.get_yticks()) == [] and len(ones.get_yticks()) > 0


def test_a_section_of_one_batch_size_draws_no_figure_over_batch_and_one_of_one_token_count_no_growth(tmp_path):
    times = {"eager": (1, 100.0, 1, 100.0), "graph[reuse]": (1, 10.0, 1, 10.0)}
    record = {"spec": {"name": "s"}, "wall": {"executor": "local", "seconds": 1.0}}
    one = {f"b1-{n}": point(1, n, times) for n in (16, 64)}
    two = {**one, "b2-16": point(2, 16, times), "b2-64": point(2, 64, times)}
    count = {"b1-16": one["b1-16"], "b2-16": two["b2-16"]}  # the Ray smoke sweep's shape: 16 tokens alone
    every = [kind for kind, _, _ in sweep_figures.FIGURES]
    for name, results, kinds in (("one", one, ["growth"]), ("two", two, every),
                                 ("count", count, [kind for kind in every if kind != "growth"])):
        figures = tmp_path / f"figures-{name}"
        record["points"] = [{"slug": s, "status": "valid"} for s in results]
        blocks = report.blocks(record, loaded(results), str(figures), folder=tmp_path)
        drawn = [b.body for b in blocks if b.kind == "figure"]
        assert len(drawn) == len(kinds) and all(d.endswith(f"-{kind}.png") for d, kind in zip(drawn, kinds))
        assert sorted(p.name for p in figures.glob("*.png")) == sorted(Path(d).name for d in drawn)
        notes = [b.text for b in blocks if b.kind == "note" and b.text.startswith("one ")]
        assert notes == {"one": [report.ONE_BATCH_NOTE.format(batch=1)], "two": [],
                         "count": [report.ONE_COUNT_NOTE.format(tokens=16)]}[name]


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
        assert _said(figure.axes[0].get_ylabel()) == f"speed-up over eager generate() (steady, {bounds})"
    # mixed: 3 calls at batch 1 (whole range), 8 at batch 2 (an interval proper); the caption counts them
    points = [_graph_over_eager(1, [60.0, 62.0, 65.0], "graph[reuse]", 16),
              _graph_over_eager(2, [60.0, 61.0, 62.0, 62.5, 63.0, 64.0, 65.0, 66.0], "graph[reuse]", 16)]
    entries = [({"slug": p.slug, "status": "valid"}, p.result) for p in points]
    blocks = report.blocks(record, entries, str(tmp_path / "figures-mixed"), tmp_path)
    (caption,) = [b.text for b in blocks if b.kind == "figure" and "Steady speed-up" in b.text]
    assert caption.endswith("; 1 of these 2 intervals is its samples' whole range")
    assert _said(sweep_figures.speedup_figure(points).axes[0].get_ylabel()) == (
        "speed-up over eager generate() (steady, bars: 95% interval, some the whole range)")


def test_a_none_in_range_names_its_batches_as_a_range_only_where_they_double_throughout():
    # "batch 1 to 16" where 4 failed would hide the gap: the range only where each batch doubles the one before
    texts = [crossing.crossovers(_by_batch({b: 20.0 for b in batches}))[0].text
             for batches in ((1, 2, 4, 8), (1, 2, 8, 16), (1, 2, 4))]
    assert texts == ["none in the valid points' range (batch 1 to 8)",
                     "none in the valid points' range (batches 1, 2, 8 and 16)",
                     "none in the valid points' range (batches 1, 2 and 4)"]


def test_a_speed_up_of_exactly_the_threshold_at_the_smallest_batch_is_not_under_it():
    (found,) = crossing.crossovers(_by_batch({1: 100 / 1.5, 2: 80.0}))  # 1.5x, then 1.25x
    assert found.before[1] >= curves.CROSSOVER and (found.batch, found.before[0]) == (2, 1)


def test_synthetic_models_come_before_pretrained_ones_whatever_the_sweep_lists_first():
    pretrained = point(1, 16, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (1, 30.0, 1, 1)}, label="pretrained")
    synthetic = point(1, 16, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (1, 10.0, 1, 1)})
    usable, _ = curves.split(loaded({"smol": pretrained, "tiny": synthetic}))
    assert [label for label, _, _ in curves.by_model(usable)] == ["synthetic", "pretrained"]
    assert [model[0] for model, _, _ in curves.by_section(usable)] == ["synthetic", "pretrained"]


def _said(label: str) -> str:
    """An axis label as one line: the figures wrap it to its panel."""
    return " ".join(label.split())


def _line(axis, label="16 new tokens") -> list:
    (line,) = [ln for ln in axis.lines if ln.get_label() == label]
    return [float(y) for y in line.get_ydata()]


def _expected(rows, value, variant="graph[reuse]", tokens=16) -> list:
    """`value` of `variant`'s rows at `tokens` new tokens, by batch: what its line should draw."""
    mine = sorted((r for r in rows if r.variant == variant and r.new_tokens == tokens), key=lambda r: r.batch)
    return [value(r) for r in mine]


def test_each_figure_plots_the_quantity_its_axis_names_and_only_a_cpu_runs_title_says_no_graph():
    # values chosen so that each figure's neighbours differ: ms per token from ms per step (requests 2x batch, two
    # batches a call), first call after an update from steady, peak allocated from reserved growth, slope from
    # intercept (steady 10 + 0.625 ms a token)
    def timed(tokens):
        steady = 10.0 + 0.625 * tokens
        return {"eager": (300.0, 100.0, 100.0, 50.0), "graph[reuse]": (400.0, steady, 130.0, steady)}

    points = [curves.Point(f"b{b}-{n}", point(b, n, timed(n), requests=2 * b)) for b in (2, 4) for n in (16, 64)]

    (axis,) = [ax for ax in sweep_figures.latency_figure(points).axes if ax.get_title() == "graph[reuse]"]
    assert _said(axis.get_ylabel()).startswith("ms per generated token")
    assert _line(axis) == pytest.approx(_expected(curves.latencies(points), lambda r: r.ms_per_token))
    (axis,) = [ax for ax in sweep_figures.after_update_figure(points).axes if ax.get_title() == "graph[reuse]"]
    assert _line(axis) == pytest.approx([130.0, 130.0])  # the first call after the update, not the steady ones
    figure = sweep_figures.capture_figure(points)
    captures = curves.captures(points)
    for ylabel, value in (("peak allocated - start (MiB)", lambda r: r.peak_delta_bytes / MIB),
                          (sweep_figures.MEMORY_ROWS[2][0], lambda r: r.reserved_delta_bytes / MIB)):
        (axis,) = [ax for ax in figure.axes if _said(ax.get_ylabel()) == ylabel]
        assert _line(axis) == pytest.approx(_expected(captures, value)), ylabel
    assert _expected(captures, lambda r: r.peak_delta_bytes) != _expected(captures, lambda r: r.reserved_delta_bytes)
    # the counts' reserved growth ties at each batch (10 MiB a batch): each count's line a little apart from the
    # batch, so neither hides the other's dot (the policy-order probe's 64 and 256 tokens, 4 MiB both, did)
    (axis,) = [ax for ax in figure.axes if _said(ax.get_ylabel()) == sweep_figures.MEMORY_ROWS[2][0]]
    assert _line(axis) == _line(axis, "64 new tokens")
    at = {ln.get_label(): [float(x) for x in ln.get_xdata()] for ln in axis.lines
          if ln.get_label().endswith("new tokens")}
    assert all(x16 < x64 for x16, x64 in zip(at["16 new tokens"], at["64 new tokens"])) and len(at) == 2
    assert all(abs(x / b - 1) < 0.05 for xs in at.values() for b, x in zip((2, 4), xs, strict=True))
    (axis,) = [ax for ax in sweep_figures.growth_figure(points).axes if ax.get_title() == "graph[reuse]"]
    assert [ln.get_label() for ln in axis.lines] == ["batch 2: b = 0.625 ms per new token (through 2 points)",
                                                     "batch 4: b = 0.625 ms per new token (through 2 points)"]
    assert axis.get_xlabel() == "new tokens"
    for marks, line in zip(axis.collections, axis.lines):  # each batch's points (new tokens, steady), its fit a + b n
        assert [tuple(map(float, xy)) for xy in marks.get_offsets()] == [(16.0, 20.0), (64.0, 50.0)]
        assert list(line.get_xdata()) == [16, 64] and list(line.get_ydata()) == pytest.approx([20.0, 50.0])
    assert "lines: least squares a + b n, colours: batch size" in _said(axis.figure.get_suptitle())
    # a batch with one valid token count has no line: its dot is named in the legend, not left unlabelled
    lone = points + [curves.Point("b8-16", point(8, 16, timed(16), requests=16))]
    (axis,) = [ax for ax in sweep_figures.growth_figure(lone).axes if ax.get_title() == "graph[reuse]"]
    assert axis.get_legend_handles_labels()[1][-1] == "batch 8: one new-token count, no line"
    # a slope's three digits keep their trailing zeros: 0.5 read "0.5" beside a table's 0.500
    halves = [curves.Point(f"h{n}", point(2, n, {**timed(n), "graph[reuse]": (400.0, 10 + 0.5 * n, 130.0, 10.0)}))
              for n in (16, 64)]
    (axis,) = [ax for ax in sweep_figures.growth_figure(halves).axes if ax.get_title() == "graph[reuse]"]
    assert [ln.get_label() for ln in axis.lines] == ["batch 2: b = 0.500 ms per new token (through 2 points)"]
    steep = [curves.Point(f"s{n}", point(2, n, {**timed(n), "graph[reuse]": (400.0, 10 + 125 * n, 130.0, 10.0)}))
             for n in (16, 64)]  # and no bare point after three whole digits ("125.")
    (axis,) = [ax for ax in sweep_figures.growth_figure(steep).axes if ax.get_title() == "graph[reuse]"]
    assert [ln.get_label() for ln in axis.lines] == ["batch 2: b = 125 ms per new token (through 2 points)"]
    # one batch, one count: the title promises neither lines nor colours it does not draw
    title = _said(sweep_figures.growth_figure(points[:1]).get_suptitle())
    assert title.endswith("steady time vs new tokens n") and "lines" not in title and "colours" not in title
    # a GPU run's title has no CPU note; a CPU run's says its graph engine ran eagerly
    assert NO_GRAPH_NOTE not in _said(sweep_figures.speedup_figure(points).get_suptitle())
    for p in points:
        p.result.metadata["cuda_graph"] = False
    assert NO_GRAPH_NOTE in _said(sweep_figures.speedup_figure(points).get_suptitle())


def test_each_variants_panel_is_titled_with_it_and_draws_its_own_rows_in_every_figure_over_three_panels_a_row():
    # four variants, each its own steady time, capture time and break-even U (eager after an update: 100 + 50(U-1);
    # from U = 2, 5 and 11): a panel titled with one variant and drawing another's rows would show here
    times = {"eager": (300.0, 100.0, 100.0, 50.0), "graph[recapture]": (400.0, 40.0, 130.0, 10.0),
             "graph[reuse]": (450.0, 20.0, 250.0, 10.0), "graph-compiled[reuse]": (600.0, 25.0, 500.0, 10.0)}
    points = [curves.Point(f"b{b}", point(b, 16, times), place=b) for b in (1, 2)]  # each its own place, as split's
    names = list(times)
    speedup = sweep_figures.speedup_figure(points)
    assert [ax.get_title() for ax in speedup.axes] == names[1:]
    for ax in speedup.axes:
        assert _line(ax) == pytest.approx([100.0 / times[ax.get_title()][1]] * 2), ax.get_title()
    # four panels over three columns: a second row, its spare cell hidden
    latency = sweep_figures.latency_figure(points)
    shown = [ax for ax in latency.axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown] == names and len(latency.axes) == 6
    for ax in shown:
        mine = _expected(curves.latencies(points), lambda r: r.ms_per_token, ax.get_title())
        assert _line(ax) == pytest.approx(mine), ax.get_title()
    after = sweep_figures.after_update_figure(points)
    assert [ax.get_title() for ax in after.axes if ax.get_visible()] == names  # eager's first call too
    assert [_line(ax)[0] for ax in after.axes if ax.get_visible()] == [ms[2] for ms in times.values()]
    shown = [ax for ax in after.axes if ax.get_visible()]
    assert {_said(ax.get_ylabel()) for ax in shown} == {"first call after a real update (ms, log, one scale for all "
                                                        "panels)"}
    assert len({ax.get_ylim() for ax in shown}) == 1  # 100 to 500 ms on every panel: the policies compare
    capture = sweep_figures.capture_figure(points)
    columns = [ax for ax in capture.axes if _said(ax.get_ylabel()) == "capture ms (first call)"]
    assert list(dict.fromkeys(ax.get_title() for ax in capture.axes)) == names[1:]  # a row per variant
    assert [ax.get_title() for ax in capture.axes[:3]] == [names[1]] * 3
    for ax, variant in zip(columns, names[1:]):  # the capture part of the first call, not its count of captures
        assert _line(ax) == pytest.approx([0.1 * times[variant][0]] * 2), variant
    rows = curves.break_evens(points)
    expected = {}
    for r in rows:
        expected.setdefault(f"{r.candidate} vs {r.baseline}", []).append(r.break_even.first_u)
    assert {pair: us for pair, us in expected.items() if pair.endswith("vs eager")} == {
        "graph[recapture] vs eager": [2, 2], "graph[reuse] vs eager": [5, 5],
        "graph-compiled[reuse] vs eager": [11, 11]}
    for ax in [ax for ax in sweep_figures.break_even_figure(points).axes if ax.get_visible()]:
        drawn = [y for line in ax.get_lines() for y in line.get_ydata() if not np.isnan(y)]
        assert drawn == [u for u in expected[ax.get_title()] if u is not None], ax.get_title()


def test_the_batch_axis_is_log_2_at_the_sweeps_batches_and_a_y_axis_says_log_only_where_it_is_one():
    # eager's steady time grows with requests x new tokens (1 ms a token at every point: one value, a linear axis);
    # graph[reuse] 1.1x to 1.3x faster, under the crossover threshold
    def timed(batch, tokens):
        eager = 1.0 * batch * tokens
        graph = eager / (1.0 + 0.1 * batch.bit_length())
        return {"eager": (300.0, eager, 100.0, 50.0), "graph[reuse]": (400.0, graph, 130.0, 10.0)}

    points = [curves.Point(f"b{b}-{n}", point(b, n, timed(b, n))) for b in (1, 2, 4) for n in (16, 64)]
    speedup, latency, capture = (make(points) for make in (sweep_figures.speedup_figure, sweep_figures.latency_figure,
                                                           sweep_figures.capture_figure))
    for ax in speedup.axes + latency.axes + capture.axes:
        assert ax.get_xscale() == "log" and ax.xaxis.get_transform().base == 2 and ax.get_xlabel() == "batch size"
        assert list(ax.get_xticks()) == [1, 2, 4]
    (panel,) = speedup.axes
    for line in [ln for ln in panel.lines if ln.get_label().endswith("new tokens")]:  # set a little apart, no more
        assert all(min(abs(x / b - 1) for b in (1, 2, 4)) < 0.05 for x in line.get_xdata())
    (threshold,) = [ln for ln in panel.lines if ln.get_label() == f"{curves.CROSSOVER}x"]
    assert list(threshold.get_ydata()) == [curves.CROSSOVER] * 2 and threshold.get_linestyle() == "--"
    assert max(_line(panel)) < curves.CROSSOVER < panel.get_ylim()[1]  # the threshold in view, above every line
    # a ratio from 0 and memory in MiB are linear axes, which their labels do not call log
    assert panel.get_yscale() == "linear" and {ax.get_yscale() for ax in capture.axes} == {"linear"}
    eager, graph = latency.axes
    assert (eager.get_yscale(), graph.get_yscale()) == ("linear", "log")
    assert "log" not in eager.get_ylabel() and graph.get_ylabel().endswith(", log)")


def test_only_a_capture_panel_with_nothing_recorded_says_not_recorded():
    times = {"eager": (300.0, 100.0, 100.0, 50.0), "graph[reuse]": (400.0, 20.0, 130.0, 10.0)}
    gpu = [curves.Point(f"b{b}", point(b, 16, times)) for b in (1, 2)]
    cpu = []
    for p in gpu:  # no CUDA allocator: no memory figures, the capture time still measured
        data = p.result.to_dict()
        for call in data["calls"]:
            call["memory_bytes"] = {"allocated": None, "reserved": None, "peak_allocated": None}
        cpu.append(curves.Point(p.slug, Result.from_dict(data)))
    first = []  # the turn-order probes: graph[reuse]'s first call opens the run, so no growth is counted from one
    for p in gpu:
        data = p.result.to_dict()
        opening = next(c for c in data["calls"] if c["engine"] != "eager" and (c["cycle"], c["phase"]) == (0, "first"))
        data["calls"] = [opening] + [c for c in data["calls"] if c is not opening]
        first.append(curves.Point(p.slug, Result.from_dict(data)))
    labels = [label for label, _ in sweep_figures.MEMORY_ROWS]
    opened = "none: its first call opened the run,\nno call before it to count from"
    cpu_said = "not recorded (no CUDA allocator on the CPU)"
    for points, silent, why in ((gpu, set(labels), ""), (cpu, {labels[0]}, cpu_said), (first, set(labels[:2]), opened)):
        for ax in sweep_figures.capture_figure(points).axes:
            said, label = [t.get_text() for t in ax.texts], _said(ax.get_ylabel())
            assert said == ([] if label in silent else [why])
            assert bool(ax.lines) == (label in silent), label
            if ax.lines:  # from 0: a 0.6% move in peak had filled a panel; growth may fall below it
                assert ax.get_ylim()[0] <= 0 <= ax.get_ylim()[1]


def test_a_sections_failed_points_are_named_in_its_figures_titles_and_captions(tmp_path):
    # a line that ends at batch 2 would read as a sweep that stopped there: the figure says batch 4 failed
    times = {"eager": (300.0, 100.0, 100.0, 50.0), "graph[reuse]": (400.0, 20.0, 130.0, 10.0)}
    params = {f"b{b}": {"model": "synthetic", "dtype": "float16", "device": "cuda", "batch_size": b,
                        "max_new_tokens": 16, "engines": ["eager", "graph"]} for b in (1, 2, 4)}
    entries = loaded({"b1": point(1, 16, times), "b2": point(2, 16, times)}, params)
    entries.append(({"order": 2, "slug": "b4", "status": "failed", "error": "CUDA out of memory",
                     "params": params["b4"]}, None))
    record = {"spec": {"name": "s"}, "executor": "local", "wall_s": 1.0}
    said = ("not drawn: 1 point(s) failed or invalid (the report's table says why): batch 4 at 16 new tokens "
            "(graph failed)")
    blocks = report.blocks(record, entries, str(tmp_path / "figures"), tmp_path)
    captions = [b.text for b in blocks if b.kind == "figure"]
    # every figure but the growth (one new-token count: report.ONE_COUNT_NOTE)
    assert len(captions) == len(sweep_figures.FIGURES) - 1 and all(c.endswith(f"; {said}") for c in captions)
    usable, rejected = curves.split(entries)
    figure = sweep_figures.speedup_figure(usable, None, report.not_drawn(usable, rejected))
    assert said in _said(figure.get_suptitle())
    # another model's failure is not this section's
    other = [dataclasses.replace(r, model=("synthetic", "other-shape", "float16")) for r in rejected]
    assert report.not_drawn(usable, other) == ""
    # its parameters without engines or with requests of their own: said so, not "eager failed"
    bare = dataclasses.replace(rejected[0], params={**params["b4"], "requests": 8, "engines": None})
    assert report.not_drawn(usable, [bare]).endswith(": batch 4 (8 requests) at 16 new tokens (its engines failed)")


def test_a_long_title_and_axis_label_are_wrapped_inside_the_saved_figure():
    # one panel is 6 inches wide: the section's title ran past both edges, and "Synthetic" was cut off
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    times = {"eager": (300.0, 100.0, 100.0, 50.0), "graph[reuse]": (400.0, 20.0, 130.0, 10.0)}
    # six new-token counts: a legend of seven entries in a row ran past both edges of a one-panel figure
    points = [curves.Point(f"b{b}-{n}", point(b, n, times)) for b in (1, 2) for n in (16, 32, 64, 128, 256, 512)]
    for p in points:
        p.result.metadata["model"]["name"] = "Llama-3.2-1B shape (random weights) " * 2
    for make in (sweep_figures.speedup_figure, sweep_figures.growth_figure, sweep_figures.capture_figure,
                 sweep_figures.break_even_figure):
        figure = make(points)
        FigureCanvasAgg(figure).draw()
        inside = figure.bbox
        for text in ([figure._suptitle] + [ax.yaxis.label for ax in figure.axes if ax.get_visible()]
                     + figure.legends):
            box = text.get_window_extent()
            assert inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 and box.y1 <= inside.y1, (
                make.__name__, box)
        assert _said(figure.get_suptitle()).startswith("Synthetic model: Llama-3.2-1B shape")


def test_a_variant_that_counts_no_captures_has_its_first_call_named_a_warm_up():
    times = {"eager": (300.0, 100.0, 100.0, 50.0), "graph[reuse]": (400.0, 20.0, 130.0, 10.0),
             "hf-continuous": (900.0, 30.0, 130.0, 30.0)}
    points = [curves.Point(f"b{b}", point(b, 16, times)) for b in (1, 2)]
    for p in points:
        for call in p.result.calls:
            if call.variant == "hf-continuous":
                call.captures = 0
    labels = {ax.get_title(): _said(ax.get_ylabel()) for ax in sweep_figures.capture_figure(points).axes[::3]}
    assert labels == {"graph[reuse]": "capture ms (first call)", "hf-continuous": sweep_figures.WARM_UP}
    # on the CPU no engine captures, and no warm-up ran in the graph engines' place: capture ms, as measured
    for p in points:
        p.result.metadata["cuda_graph"] = False
        for call in p.result.calls:
            call.captures = 0
    labels = {ax.get_title(): _said(ax.get_ylabel()) for ax in sweep_figures.capture_figure(points).axes[::3]}
    assert set(labels.values()) == {"capture ms (first call)"}
