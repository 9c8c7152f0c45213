"""The sweep report's models side by side (present/sweep_scale.py): only shared places, models by size."""
from __future__ import annotations

import pytest

from result_fixture import sweep_entries, sweep_point as point
from rollout_study import sweep_curves as curves
from rollout_study.present import sweep as report
from rollout_study.present import sweep_scale as scale
from rollout_study.present.text import MIB
from rollout_study.result import Result

SMOLLM2 = "SmolLM2-135M-Instruct (Q4_1 dequantized)"
TINY = ("synthetic", "tiny-llama-fixture", "float16")
SMOL = ("pretrained", SMOLLM2, "float16")
ONE_B = ("synthetic", "Llama-3.2-1B shape", "float16")


def _as(result: Result, parameters: int | None, name: str | None = None, prompts=("random", 32),
        **workload) -> Result:
    data = result.to_dict()
    data["metadata"]["model"]["parameters"] = parameters
    if parameters is None:
        del data["metadata"]["model"]["parameters"]
    if name:
        data["metadata"]["model"]["name"] = name
    data["metadata"]["workload"].update(prompt_source=prompts[0], prompt_len=prompts[1], **workload)
    return Result.from_dict(data)


def _sweep() -> dict:
    """Pretrained listed first, but larger; the synthetic tiny model at batch 1, 2 and 4 and, alone, at 16
    and 256 new tokens and with hf-compile; a synthetic 1B shape only at batch 8, which no other model has."""
    results = {}
    for batch in (1, 2):
        results[f"smol-b{batch}"] = _as(point(batch, 64, {"eager": (1, 100.0, 1, 1),
                                                          "graph[reuse]": (400, 20.0 * batch, 1, 1)},
                                              label="pretrained"), 134_515_008, prompts=("chat", 41))
    for batch in (1, 2, 4):
        results[f"tiny-b{batch}"] = _as(point(batch, 64, {"eager": (1, 100.0, 1, 1),
                                                          "graph[reuse]": (300, 5.0 * batch, 1, 1),
                                                          "hf-compile": (300, 50.0, 1, 1)}), 557_696)
        results[f"tiny-b{batch}-16"] = _as(point(batch, 16, {"eager": (1, 50.0, 1, 1),
                                                             "graph[reuse]": (300, 5.0, 1, 1)}), 557_696)
        results[f"tiny-b{batch}-256"] = _as(point(batch, 256, {"eager": (1, 500.0, 1, 1),
                                                               "graph[reuse]": (300, 9.0, 1, 1)}), 557_696)
    results["1b-b8"] = _as(point(8, 64, {"eager": (1, 900.0, 1, 1), "graph[reuse]": (900, 300.0, 1, 1)}),
                           1_235_814_400, "Llama-3.2-1B shape")
    return results


def _models(results: dict, params: dict | None = None) -> dict:
    usable, _ = curves.split(sweep_entries(results, params))
    return curves.by_model(usable)


def test_models_side_by_side_only_where_two_share_a_place_ordered_by_size():
    models = _models(_sweep())
    keys = scale.ordered(models)
    assert keys == [TINY, SMOL, ONE_B]  # by parameters, not by listing
    frame = scale.scale_table(models)
    # batch 4, 16 and 256 tokens and hf-compile (tiny alone) and batch 8 (1B alone) are nobody's to compare
    assert list(zip(frame["variant"], frame["new tokens"], frame["batch"], frame["requests"])) == [
        ("graph[reuse]", 64, 1, 1), ("graph[reuse]", 64, 2, 2)]
    tiny, smol, one_b = (scale.short_name(k, models[k]) for k in keys)
    assert tiny == "synthetic tiny-llama-fixture (float16, 0.6 M, random prompts of 32 tokens)"
    assert smol == f"pretrained {SMOLLM2} (float16, 134.5 M, chat prompts of 41 tokens)"
    assert list(frame[f"speed-up, {tiny}"]) == pytest.approx([100 / 5, 100 / 10])
    assert list(frame[f"speed-up, {smol}"]) == pytest.approx([100 / 20, 100 / 40])
    assert list(frame[f"ms per token, {smol}"]) == pytest.approx([20 / 64, 40 / (2 * 64)])
    assert frame[f"speed-up, {one_b}"].isna().all()  # in the columns, blank where it has no point
    assert "(float16, 1.24 B," in one_b


def test_a_model_of_unknown_size_goes_last_and_one_model_in_two_dtypes_is_two_models():
    results = _sweep()
    results["tiny-b1"] = _as(results["tiny-b1"], None)  # its size unknown in every point of the model
    for slug in [s for s in results if s.startswith("tiny")]:
        results[slug] = _as(results[slug], None)
    fp32 = results["smol-b1"].to_dict()
    fp32["metadata"]["dtype"] = "float32"
    results["smol-b1-fp32"] = Result.from_dict(fp32)
    models = _models(results)
    keys = scale.ordered(models)
    assert keys == [SMOL, ("pretrained", SMOLLM2, "float32"), ONE_B, TINY]
    assert "size unknown" in scale.short_name(TINY, models[TINY])
    frame = scale.scale_table(models)
    fp32_name = scale.short_name(keys[1], models[keys[1]])
    assert list(frame[f"speed-up, {fp32_name}"]) == pytest.approx([5.0, float("nan")], nan_ok=True)


def test_a_model_with_two_points_at_one_place_is_left_out_there_not_shown_as_either():
    results = _sweep()
    # another parameter varied (the update path, say): a second tiny point at batch 2, 64 tokens, requests 2
    results["tiny-b2-other"] = _as(point(2, 64, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (300, 50.0, 1, 1)}),
                                   557_696)
    varied = {"tiny-b2": {"batch_size": 2, "update_path": "copy"},
              "tiny-b2-other": {"batch_size": 2, "update_path": "assign"}}
    models = _models(results, varied)
    both = [r.ratio.point for r in curves.speedups(models[TINY])
            if (r.variant, r.new_tokens, r.batch) == ("graph[reuse]", 64, 2)]
    assert both == pytest.approx([10.0, 2.0])  # both in the tiny model's own curves
    frame = scale.scale_table(models)
    assert list(frame["batch"]) == [1]  # at batch 2 only SmolLM2 is left: nothing to compare
    # the same batch with other request counts is another place, not a duplicate
    results.pop("tiny-b2-other")
    results["tiny-b2-r4"] = _as(point(2, 64, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (300, 50.0, 1, 1)},
                                      requests=4), 557_696)
    frame = scale.scale_table(_models(results))
    assert list(zip(frame["batch"], frame["requests"])) == [(1, 1), (2, 2)]


def test_the_figure_draws_each_batch_across_the_models_at_the_largest_shared_token_count(tmp_path):
    models = _models(_sweep())
    assert scale.tokens_shown(models) == 64  # tiny alone has 256: not shared
    figure = scale.scale_figure(models, str(tmp_path))
    assert (tmp_path / "sweep-models-side-by-side.png").exists()
    speedup_axis = figure.axes[0]
    lines = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
             for line in speedup_axis.lines if line.get_label().startswith("batch")}
    at = {label: [round(x) for x in xs] for label, (xs, _) in lines.items()}  # each batch a little apart from its tick
    assert at == {"batch 1": [0, 1], "batch 2": [0, 1]} and lines["batch 1"][0] != lines["batch 2"][0]
    assert all(abs(x - round(x)) < 0.16 for xs, _ in lines.values() for x in xs)
    drawn = {label: ys for label, (_, ys) in lines.items()}
    assert drawn == {"batch 1": pytest.approx([20.0, 5.0]), "batch 2": pytest.approx([10.0, 2.5])}
    ticks = [t.get_text() for t in speedup_axis.get_xticklabels()]
    assert ticks[0].startswith("synthetic\n") and ticks[1].startswith("pretrained\n") and len(ticks) == 3
    bottom = [t.get_text() for t in figure.axes[-1].get_xticklabels()]  # the models in full, wrapped
    assert bottom[0].startswith("synthetic\n") and " ".join(bottom[1].split()).endswith("chat prompts of 41 tokens")
    assert max(len(line) for text in bottom for line in text.splitlines()) <= scale.TICK_WIDTH
    assert all(len(text.splitlines()) == 2 and text.endswith(", float16") for text in ticks)  # label, size, dtype
    assert "64 new tokens" in figure.get_suptitle()
    capture_axis = figure.axes[2]  # second row (two variant columns): capture ms of the first call, 10% in the fixture
    captured = {line.get_label(): list(line.get_ydata()) for line in capture_axis.lines}
    assert captured["batch 1"] == pytest.approx([30.0, 40.0])
    hf_compile = figure.axes[1]  # a variant only the tiny model ran: said so, nothing drawn
    assert hf_compile.get_title() == "hf-compile"
    assert not [line for line in hf_compile.lines if line.get_label().startswith("batch")]
    assert [t.get_text() for t in hf_compile.texts] == ["no two models with this value"]


def test_a_one_model_sweep_has_no_side_by_side_section_and_a_two_model_one_has(tmp_path):
    loaded = sweep_entries(_sweep())
    tiny_only = [(e, r) for e, r in loaded if e["slug"].startswith("tiny")]
    usable, _ = curves.split(tiny_only)
    assert scale.scale_figure(curves.by_model(usable)) is None and scale.scale_table(curves.by_model(usable)).empty
    record = {"spec": {"name": "s"}, "executor": "local", "wall_s": 1.0}
    assert "## The models side by side" not in report.summary(record, tiny_only)
    summary = report.summary(record, loaded)
    assert "## The models side by side" in summary and "| graph[reuse] | 64 | 2 | 2 |" in summary
    figures = tmp_path / "figures"
    blocks = report.blocks(record, loaded, str(figures), str(tmp_path))
    (heading,) = [i for i, b in enumerate(blocks) if b.kind == "heading" and b.text == "The models side by side"]
    assert blocks[heading + 1].kind == "figure" and (figures / "sweep-models-side-by-side.png").exists()
    assert blocks[heading + 1].text == report.SCALE_FIGURE_CAPTION and blocks[heading + 2].text == report.SCALE_CAPTION
    assert not [b for b in report.blocks(record, tiny_only, str(tmp_path / "one"))
                if b.text == "The models side by side"]


def test_a_line_joins_only_neighbouring_models_of_one_label():
    # tiny and 1B (synthetic), then SmolLM2 (pretrained) made the largest: a segment from a synthetic shape to a
    # pretrained model would read as a trend across what are not the same kind of model
    results = _sweep()
    results["1b-b1"] = _as(point(1, 64, {"eager": (1, 900.0, 1, 1), "graph[reuse]": (900, 300.0, 1, 1)}),
                           1_235_814_400, "Llama-3.2-1B shape")
    for slug in [s for s in results if s.startswith("smol")]:
        results[slug] = _as(results[slug], 2_000_000_000, prompts=("chat", 41))
    models = _models(results)
    assert scale.ordered(models) == [TINY, ONE_B, SMOL]
    axis = scale.scale_figure(models).axes[0]
    segments = [(list(line.get_xdata()), list(line.get_ydata())) for line in axis.lines
                if not line.get_label().startswith("batch") and line.get_transform() == axis.transData]
    ((xs, ys),) = segments  # batch 1, tiny to 1B; none at batch 2
    assert [round(x) for x in xs] == [0, 1] and ys == pytest.approx([100 / 5, 900 / 300])


def test_the_figure_is_drawn_at_the_largest_token_count_two_models_share():
    results = _sweep()  # tiny and SmolLM2 share 64 tokens; tiny alone has 16 and 256
    results["smol-b1-16"] = _as(point(1, 16, {"eager": (1, 50.0, 1, 1), "graph[reuse]": (400, 10.0, 1, 1)},
                                      label="pretrained"), 134_515_008, prompts=("chat", 41))
    assert scale.tokens_shown(_models(results)) == 64  # 16 is shared now too: the largest, not the first


def test_a_quantity_of_nearly_one_value_across_the_models_is_drawn_from_zero(monkeypatch):
    # hf-compile kept -32.0 to -31.7 MiB in every model (one cuBLAS workspace): an axis of its own 0.3 MiB drew a trend
    kept = [(-32.0 + 0.1 * i) * MIB for i in range(10)]
    monkeypatch.setattr(scale, "QUANTITIES", scale.QUANTITIES[:2] + (
        ("kept after the first call (MiB)", curves.captures, lambda r: kept[r.batch + int(r.capture_ms) % 5] / MIB),))
    figure = scale.scale_figure(_models(_sweep()))
    (axis,) = [ax for ax in figure.axes if ax.lines and " ".join(ax.get_ylabel().split()).startswith("kept")]
    drawn = [y for line in axis.lines for y in line.get_ydata()]
    assert max(drawn) - min(drawn) < 1.0 and axis.get_ylim()[0] < -32.0 and axis.get_ylim()[1] >= 0
    capture = [ax for ax in figure.axes if ax.lines and ax.get_ylabel().startswith("capture")][0]
    assert capture.get_ylim()[0] > 0  # 30 to 40 ms: its own range


def test_the_side_by_side_of_many_variants_grows_down_in_bands_each_ending_with_the_models_in_full():
    # six variants in one row were 2,640 pixels wide, drawn at 47% on the page
    variants = ["graph[recapture]", "graph[reuse]", "graph-compiled[recapture]", "graph-compiled[reuse]"]
    times = {"eager": (1, 100.0, 1, 1), **{v: (300, 10.0 + i, 1, 1) for i, v in enumerate(variants)}}
    results = {"tiny": _as(point(1, 64, times), 557_696),
               "smol": _as(point(1, 64, times, label="pretrained"), 134_515_008, prompts=("chat", 41))}
    figure = scale.scale_figure(_models(results))
    shown = [ax for ax in figure.axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown if ax.get_title()] == variants
    assert figure.get_figwidth() == pytest.approx(3 * 4.4)
    rows = len(scale.QUANTITIES)
    for ax in shown:
        spec = ax.get_subplotspec()
        band, row = divmod(spec.rowspan.start, rows)
        assert ax.get_ylabel() == scale.QUANTITIES[row][0]
        assert (ax.get_title() != "") == (row == 0)  # each band's top row names its variants
        full = row == rows - 1  # the last quantity's ticks name the models in full, in every band
        assert all((len(t.get_text().splitlines()) > 2) == full for t in ax.get_xticklabels())
    assert {divmod(ax.get_subplotspec().rowspan.start, rows)[0] for ax in shown} == {0, 1}
    assert len([ax for ax in figure.axes if not ax.get_visible()]) == 2 * rows  # two spare cells of three rows
