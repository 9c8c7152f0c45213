"""The sweep report's models side by side (present/sweep_scale.py): only shared places, models by size."""
from __future__ import annotations

import pytest

from result_fixture import sweep_point as point
from rollout_study import sweep_curves as curves
from rollout_study.present import sweep as report
from rollout_study.present import sweep_scale as scale
from rollout_study.result import Result

SMOLLM2 = "SmolLM2-135M-Instruct (Q4_1 dequantized)"


def _sized(result: Result, parameters: int, name: str | None = None) -> Result:
    data = result.to_dict()
    data["metadata"]["model"]["parameters"] = parameters
    if name:
        data["metadata"]["model"]["name"] = name
    return Result.from_dict(data)


def _sweep() -> list:
    """Pretrained listed first, but larger; the synthetic tiny model at batch 1, 2 and 4; a third model
    (a synthetic 1B shape) only at batch 8, which no other model has."""
    results = {}
    for batch in (1, 2):
        results[f"smol-b{batch}"] = _sized(point(batch, 64, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (400, 20.0 * batch, 1, 1)},
                                                 label="pretrained"), 134_515_008)
    for batch in (1, 2, 4):
        results[f"tiny-b{batch}"] = point(batch, 64, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (300, 5.0 * batch, 1, 1)})
        results[f"tiny-b{batch}-16"] = point(batch, 16, {"eager": (1, 50.0, 1, 1), "graph[reuse]": (300, 5.0, 1, 1)})
    results["1b-b8"] = _sized(point(8, 64, {"eager": (1, 900.0, 1, 1), "graph[reuse]": (900, 300.0, 1, 1)}),
                              1_235_814_400, "Llama-3.2-1B shape")
    loaded = [({"order": i, "slug": slug, "status": "valid"}, r) for i, (slug, r) in enumerate(results.items())]
    usable, _ = curves.split(loaded)
    return loaded, curves.by_model(usable)


def test_models_side_by_side_only_where_two_share_a_place_ordered_by_size():
    _, models = _sweep()
    keys = scale.ordered(models)
    assert keys == [("synthetic", "tiny-llama-fixture", "float16"), ("pretrained", SMOLLM2, "float16"),
                    ("synthetic", "Llama-3.2-1B shape", "float16")]  # by parameters, not by listing
    frame = scale.scale_table(models)
    # batch 4 (tiny alone), batch 8 (1B alone) and 16 tokens (tiny alone) are nobody's to compare
    assert list(zip(frame["variant"], frame["new tokens"], frame["batch"])) == [("graph[reuse]", 64, 1),
                                                                              ("graph[reuse]", 64, 2)]
    tiny, smol = (scale.short_name(k, models[k]) for k in keys[:2])
    assert tiny == "synthetic tiny-llama-fixture (float16, 0.6 M)"
    assert smol == f"pretrained {SMOLLM2} (float16, 134.5 M)"
    assert list(frame[f"speed-up, {tiny}"]) == pytest.approx([100 / 5, 100 / 10])
    assert list(frame[f"speed-up, {smol}"]) == pytest.approx([100 / 20, 100 / 40])
    assert list(frame[f"ms per token, {smol}"]) == pytest.approx([20 / 64, 40 / (2 * 64)])
    one_b = scale.short_name(keys[2], models[keys[2]])
    assert frame[f"speed-up, {one_b}"].isna().all()  # in the columns, blank where it has no point
    assert one_b.endswith("(float16, 1.24 B)")


def test_the_figure_draws_each_batch_across_the_models_at_the_shared_token_count(tmp_path):
    _, models = _sweep()
    assert scale.tokens_shown(models) == 64
    figure = scale.scale_figure(models, str(tmp_path))
    assert (tmp_path / "sweep-models-side-by-side.png").exists()
    speedup_axis = figure.axes[0]
    lines = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
             for line in speedup_axis.lines if line.get_label().startswith("batch")}
    assert lines == {"batch 1": ([0, 1], pytest.approx([20.0, 5.0])), "batch 2": ([0, 1], pytest.approx([10.0, 2.5]))}
    ticks = [t.get_text() for t in speedup_axis.get_xticklabels()]
    assert ticks[0].startswith("synthetic\n") and ticks[1].startswith("pretrained\n") and len(ticks) == 3
    assert "64 new tokens" in figure.get_suptitle()
    capture_axis = figure.axes[1]  # second row: capture ms of the first call, 10% of it in the fixture
    captured = {line.get_label(): list(line.get_ydata()) for line in capture_axis.lines}
    assert captured["batch 1"] == pytest.approx([30.0, 40.0])


def test_a_one_model_sweep_has_no_side_by_side_section_and_a_two_model_one_has(tmp_path):
    loaded, models = _sweep()
    tiny_only = [(e, r) for e, r in loaded if e["slug"].startswith("tiny")]
    usable, _ = curves.split(tiny_only)
    assert scale.scale_figure(curves.by_model(usable)) is None and scale.scale_table(curves.by_model(usable)).empty
    record = {"spec": {"name": "s"}, "executor": "local", "wall_s": 1.0}
    assert "side by side" not in report.summary(record, tiny_only)
    summary = report.summary(record, loaded)
    assert "## The models side by side" in summary and "| graph[reuse] | 64 | 2 |" in summary
    figures = tmp_path / "figures"
    blocks = report.blocks(record, loaded, str(figures), str(tmp_path))
    (heading,) = [i for i, b in enumerate(blocks) if b.kind == "heading" and b.text == "The models side by side"]
    assert blocks[heading + 1].kind == "figure" and (figures / "sweep-models-side-by-side.png").exists()
    assert not [b for b in report.blocks(record, tiny_only, str(tmp_path / "one")) if b.text == "The models side by side"]
