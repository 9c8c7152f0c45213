"""A curve sweep that varies more than its curves' axes (sweep_settings.py): a section per setting, never one curve
through two settings, and the settings side by side."""
from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest

from result_fixture import sweep_point as point
from rollout_study import sweep_curves as curves
from rollout_study import sweep_settings as settings
from rollout_study.present import sweep as report
from rollout_study.present import sweep_readme
from rollout_study.present.sweep_panels import model_stem, model_title
from rollout_study.present.sweep_settings_figure import settings_figure
from rollout_study.result import Result
from rollout_study.stats import ratio_interval

TINY = ("synthetic", "tiny-llama-fixture", "float16")
SMOL = ("pretrained", "SmolLM2-135M-Instruct (Q4_1 dequantized)", "float16")


def _entry(order: int, model: str, batch: int, bucket: int, prompt_len: int = 32, status: str = "valid") -> dict:
    params = {"name": f"s-{order}", "model": model, "dtype": "float16", "engines": ["eager", "graph"],
              "batch_size": batch, "requests": batch, "max_new_tokens": 16, "prompt_len": prompt_len,
              "length_bucket": bucket, "seed": 0}
    return {"order": order, "slug": f"{model}-b{batch}-lb{bucket}", "status": status, "params": params}


def _graph(batch: int, graph_ms: float, label: str = "synthetic", eager_ms: float = 100.0):
    return point(batch, 16, {"eager": (1, eager_ms, 1, 1), "graph[reuse]": (1, graph_ms, 1, 1)}, label=label)


def _loaded(buckets=(0, 64)) -> list:
    """The tiny model at length_bucket 0 and 64 (in `buckets`' order) at batch 2 and 4 (buckets halve graph's
    time), the pretrained one at one bucket only, with its own prompt length: a parameter that moves with the model
    is not a setting."""
    rows = []
    for batch in (2, 4):
        for bucket in buckets:
            ms = 10.0 * batch if bucket == 0 else 5.0 * batch
            rows.append((_entry(len(rows), "synthetic", batch, bucket), _graph(batch, ms)))
    rows.append((_entry(len(rows), "smollm2", 2, 0, prompt_len=41), _graph(2, 30.0, label="pretrained")))
    return rows


def test_a_parameter_a_models_points_vary_besides_the_curves_is_a_setting_with_its_own_section():
    loaded = _loaded()
    found = settings.per_point(loaded)
    zero, sixty_four = (("length_bucket", "0"),), (("length_bucket", "64"),)
    assert [(w.setting, w.rank) for w in found] == [(zero, 0), (sixty_four, 1)] * 2 + [((), 0)]
    usable, _ = curves.split(loaded)
    assert [p.setting for p in usable] == [(("length_bucket", "0"),), (("length_bucket", "64"),)] * 2 + [()]
    sections = curves.by_section(usable)
    assert list(sections) == [(TINY, 0, (("length_bucket", "0"),)), (TINY, 1, (("length_bucket", "64"),)),
                              (SMOL, 0, ())]
    for points in sections.values():  # one row per variant and place in every section: nothing drawn twice
        rows = [(r.variant, r.new_tokens, r.batch) for r in curves.speedups(points)]
        assert len(rows) == len(set(rows))
    by_batch = {(s[2], r.batch): r.ratio.point for s, points in sections.items() for r in curves.speedups(points)}
    assert by_batch[(("length_bucket", "0"),), 4] == pytest.approx(2.5)  # 100 / 40
    assert by_batch[(("length_bucket", "64"),), 4] == pytest.approx(5.0)  # 100 / 20
    tiny_64 = sections[(TINY, 1, (("length_bucket", "64"),))]
    assert model_title(tiny_64).startswith("Synthetic model: tiny-llama-fixture, float16, length_bucket 64, on ")
    assert model_stem(tiny_64) == "synthetic-tiny-llama-fixture-float16-length_bucket-64"
    # no setting: the stem every sweep published before settings has
    assert model_stem(sections[(SMOL, 0, ())]) == "pretrained-SmolLM2-135M-Instruct-Q4_1-dequantized--float16"
    assert list(curves.by_model(usable)) == [TINY, SMOL]  # the models side by side: still one key a model


@pytest.mark.parametrize("buckets", [(0, 64), (64, 0)])
def test_the_first_setting_is_the_sweep_files_first_and_stays_first_where_its_first_point_failed(buckets):
    first, other = ((("length_bucket", str(b)),) for b in buckets)
    loaded = _loaded(buckets)
    loaded[0] = (dict(loaded[0][0], status="failed", error="OutOfMemoryError"), None)
    usable, rejected = curves.split(loaded)
    assert [r.slug for r in rejected] == [f"synthetic-b2-lb{buckets[0]}"]
    assert usable[0].setting == other and usable[0].setting_rank == 1
    assert [key[2] for key in list(curves.by_section(usable))[:2]] == [first, other]
    (row,) = [r for r in settings.side_by_side(curves.by_model(usable)[TINY]) if r.variant == "graph[reuse]"]
    assert (row.base, row.setting, row.batch) == (first, other, 4)


def test_settings_are_ranked_per_model_in_the_order_of_its_own_points():
    loaded = _loaded((64, 0))  # the tiny model's first setting is 64
    loaded += [(_entry(5 + i, "smollm2", 2, bucket, prompt_len=41), _graph(2, ms, label="pretrained"))
               for i, (bucket, ms) in enumerate(((0, 30.0), (64, 20.0)))]
    del loaded[4]  # SmolLM2's first point is at bucket 0 now
    usable, _ = curves.split(loaded)
    models = curves.by_model(usable)
    assert settings.in_order(models[TINY]) == [(("length_bucket", "64"),), (("length_bucket", "0"),)]
    assert settings.in_order(models[SMOL]) == [(("length_bucket", "0"),), (("length_bucket", "64"),)]


def test_what_moves_with_the_engines_is_their_group_and_a_key_some_records_lack_is_no_setting():
    def entry(order, engines, policy, **extra):
        params = {"name": f"p{order}", "model": "synthetic", "dtype": "float16", "engines": engines, "batch_size": 2,
                  "requests": 2, "max_new_tokens": 16, "policy": policy, **extra}
        return {"order": order, "slug": f"p{order}", "status": "valid", "params": params}

    graph = _graph(2, 10.0)
    compiled = point(2, 16, {"eager": (1, 120.0, 1, 1), "graph-compiled[reuse]": (1, 20.0, 1, 1)})
    grouped = [(entry(0, ["eager", "graph"], "both"), graph),
               (entry(1, ["eager", "graph-compiled"], "reuse"), compiled)]
    assert [(w.setting, w.with_engines) for w in settings.per_point(grouped)] == [((), ("policy",))] * 2
    usable, _ = curves.split(grouped)
    assert usable[0].place == usable[1].place and usable[1].shown_before == {"eager"}  # one place: eager once
    assert len(curves.by_section(usable)) == 1
    older = [(entry(0, ["eager", "graph"], "both", steps_per_graph=1), graph), (entry(1, ["eager", "graph"], "both"),
                                                                                _graph(4, 20.0))]
    assert [w.setting for w in settings.per_point(older)] == [(), ()]
    unrecorded = _loaded()[:2] + [({"order": 9, "slug": "old", "status": "valid"}, _graph(8, 1.0))]
    assert settings.per_point(unrecorded)[2].setting == settings.UNRECORDED


def test_dtype_auto_and_the_dtype_it_resolved_to_are_one_model_with_two_settings():
    def entry(order, dtype):
        return {"order": order, "slug": f"d{order}", "status": "valid",
                "params": {"name": f"d{order}", "model": "synthetic", "dtype": dtype, "engines": ["eager", "graph"],
                           "batch_size": 2, "requests": 2, "max_new_tokens": 16, "prompt_len": None}}

    usable, _ = curves.split([(entry(0, "auto"), _graph(2, 10.0)), (entry(1, "float16"), _graph(2, 12.0))])
    assert [p.setting for p in usable] == [(("dtype", "auto"),), (("dtype", "float16"),)]
    assert len(curves.by_section(usable)) == 2 and len(curves.by_model(usable)) == 1
    assert settings.text((("prompt_len", settings._value("prompt_len", None)),)) == "prompt_len auto"


def test_settings_side_by_side_are_the_first_settings_steady_median_over_each_others_at_one_place(monkeypatch):
    loaded = _loaded()
    slow = point(4, 16, {"eager": (1, 110.0, 1, 1), "graph[reuse]": (1, 40.0, 1, 1)},
                 steady_samples={("graph[reuse]", "steady"): [38.0, 40.0, 45.0]})
    loaded[2] = (loaded[2][0], slow)
    usable, _ = curves.split(loaded)
    rows = settings.side_by_side(curves.by_model(usable)[TINY])
    assert [(r.variant, r.batch) for r in rows] == [("graph[reuse]", 2), ("graph[reuse]", 4)]
    graph_4 = rows[-1]
    assert (graph_4.base_ms, graph_4.setting_ms, graph_4.ratio.point) == (40.0, 20.0, pytest.approx(2.0))
    assert graph_4.ratio == ratio_interval(slow.samples("graph[reuse]", 0, "steady"),
                                           usable[3].result.samples("graph[reuse]", 0, "steady"))
    # eager in the same two points: 110 against 100 ms, what they drifted apart, not what the bucket did
    assert (rows[0].eager.point, graph_4.eager.point) == (pytest.approx(1.0), pytest.approx(1.1))
    assert settings.side_by_side(curves.by_model(usable)[SMOL]) == []  # one setting: nothing to compare
    assert settings_figure(curves.by_model(usable)[SMOL]) is None
    figure = settings_figure(curves.by_model(usable)[TINY])
    panel, eager = [ax for ax in figure.axes if ax.get_visible()]  # one row: the variant, then its points' eager
    assert panel.get_title() == "graph[reuse]: length_bucket 64"
    # 3 steady calls a side in the fixture: every bar is its calls' whole range, and the axis says so
    said = " ".join(panel.get_ylabel().split())  # wrapped to the panel's height
    assert said.endswith("(over 1: faster; bars: whole range)")
    assert said.startswith("steady median at length_bucket 0 / at this setting")  # the first, over it
    # from the values (bars to 2.25), not from 0: the 1.0 line in view, the axis no taller than they need
    assert 0.5 < panel.get_ylim()[0] < 1.0 and 2.25 < panel.get_ylim()[1] < 2.6
    (line,) = [ln for ln in panel.lines if ln.get_label() == "16 new tokens"]
    assert list(line.get_ydata()) == pytest.approx([2.0, 2.0])  # batch 2 and 4
    # eager in the same two points on an axis of its own (on one axis with the variant's its 0.73x to 1.54x had
    # drawn a policy probe's 2% gaps flat), named as their drift: length_bucket leaves eager alone
    assert " ".join(eager.get_title().split()) == ("eager generate() in graph[reuse]'s points: length_bucket 64 "
                                                   "(their run-to-run drift: eager ignores the setting)")
    (drift,) = [ln for ln in eager.lines if ln.get_label() == "16 new tokens"]
    assert list(drift.get_ydata()) == pytest.approx([1.0, 1.1])
    assert panel.get_ylim()[1] > 2.25 and eager.get_ylim()[1] < 1.5  # each on its own scale
    assert "then eager generate() in the same two points" in " ".join(figure.get_suptitle().split())
    # points that ran no eager (a probe's two policies): no eager panel, and the title promises none
    rows = [dataclasses.replace(r, eager=None) for r in settings.side_by_side(curves.by_model(usable)[TINY])]
    monkeypatch.setattr(settings, "side_by_side", lambda points: rows)
    bare = settings_figure(curves.by_model(usable)[TINY])
    assert "eager" not in bare.get_suptitle() and len([ax for ax in bare.axes if ax.get_visible()]) == 1


def test_with_engine_groups_crossed_with_a_setting_each_ratio_has_its_own_points_eager_beside_it():
    def entry(order, engines, bucket):
        params = {"name": f"g{order}", "model": "synthetic", "dtype": "float16", "engines": engines, "batch_size": 2,
                  "requests": 2, "max_new_tokens": 16, "length_bucket": bucket}
        return {"order": order, "slug": f"g{order}", "status": "valid", "params": params}

    compiled = ["eager", "graph-compiled"]
    loaded = [(entry(0, ["eager", "graph"], 0), _graph(2, 10.0)), (entry(1, ["eager", "graph"], 64), _graph(2, 5.0)),
              # the compiled group's second point ran on a slower host: eager and graph-compiled 1.3x slower alike
              (entry(2, compiled, 0), point(2, 16, {"eager": (1, 100.0, 1, 1),
                                                    "graph-compiled[reuse]": (1, 10.0, 1, 1)})),
              (entry(3, compiled, 64), point(2, 16, {"eager": (1, 130.0, 1, 1),
                                                     "graph-compiled[reuse]": (1, 13.0, 1, 1)}))]
    usable, _ = curves.split(loaded)
    rows = {r.variant: r for r in settings.side_by_side(usable)}
    assert rows["graph-compiled[reuse]"].ratio.point == pytest.approx(10 / 13)
    assert rows["graph-compiled[reuse]"].eager.point == pytest.approx(100 / 130)  # its own points' eager
    assert rows["graph[reuse]"].eager.point == pytest.approx(1.0)
    (line,) = [x for x in report.settings_lines(usable) if "graph-compiled[reuse]" in x]
    assert "0.77x to 0.77x the steady speed" in line and "eager in the same points 0.77x to 0.77x" in line
    # in the figure too, each group's eager in a panel of its own, never the other group's at the same batch
    figure = settings_figure(usable)
    panels = {" ".join(ax.get_title().split()): ax for ax in figure.axes if ax.get_visible()}
    assert len(panels) == 4  # two variants, two groups' eager
    # three across, the fourth in a band below: four in one row were 17.6 inches, shrunk on the page
    places = [(ax.get_subplotspec().rowspan.start, ax.get_subplotspec().colspan.start) for ax in panels.values()]
    assert sorted(places) == [(0, 0), (0, 1), (0, 2), (1, 0)] and figure.get_figwidth() == pytest.approx(3 * 4.4)
    for variant, drift in (("graph[reuse]", 1.0), ("graph-compiled[reuse]", 100 / 130)):
        title = (f"eager generate() in {variant}'s points: length_bucket 64 (their run-to-run drift: eager ignores "
                 "the setting)")
        (line,) = [ln for ln in panels[title].lines if ln.get_label() == "16 new tokens"]
        assert list(line.get_ydata()) == pytest.approx([drift]), variant


def test_two_variants_of_one_point_share_one_eager_panel_which_says_when_the_setting_moves_eager_too():
    # a policy probe: recapture and reuse in every point, seed 0 and 1; a seed draws other weights and prompts for
    # eager too, so eager's ratio is no drift there (the figure's title had called it that)
    def entry(order, seed):
        params = {"name": f"p{order}", "model": "synthetic", "dtype": "float16", "engines": ["eager", "graph"],
                  "batch_size": 2, "requests": 2, "max_new_tokens": 16, "seed": seed}
        return {"order": order, "slug": f"p{order}", "status": "valid", "params": params}

    def both(graph_ms, eager_ms):
        return point(2, 16, {"eager": (1, eager_ms, 1, 1), "graph[recapture]": (1, graph_ms, 1, 1),
                             "graph[reuse]": (1, graph_ms * 1.02, 1, 1)})

    usable, _ = curves.split([(entry(0, 0), both(10.0, 100.0)), (entry(1, 1), both(10.2, 150.0))])
    panels = [ax for ax in settings_figure(usable).axes if ax.get_visible()]
    titles = [" ".join(ax.get_title().split()) for ax in panels]
    assert titles == ["graph[recapture]: seed 1", "graph[reuse]: seed 1",
                      "eager generate() in graph[recapture]'s and graph[reuse]'s points: seed 1 (seed changes "
                      "eager's run too)"]
    recapture, reuse, eager = panels
    assert recapture.get_ylim() == reuse.get_ylim()  # one setting's variants on one scale
    # the variants' 2% gap not drawn flat by eager's 0.67x: the variants' axis spans theirs and 1 alone
    assert recapture.get_ylim()[0] > 0.9 and eager.get_ylim()[0] < 0.67


def test_each_settings_panel_draws_that_settings_points_only():
    # length_bucket 0, 64 and 128: graph 10, 5 and 4 ms a request, so 64 is 2x the first setting and 128 2.5x
    rows = [(_entry(3 * i + k, "synthetic", batch, bucket), _graph(batch, ms * batch))
            for i, batch in enumerate((2, 4)) for k, (bucket, ms) in enumerate(((0, 10.0), (64, 5.0), (128, 4.0)))]
    usable, _ = curves.split(rows)
    panels = [ax for ax in settings_figure(usable).axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels][0::2] == ["graph[reuse]: length_bucket 64",
                                                       "graph[reuse]: length_bucket 128"]
    assert [ax.get_subplotspec().rowspan.start for ax in panels] == [0, 0, 1, 1]  # a row per setting
    assert all(ax.get_title().startswith("eager generate() in graph[reuse]'s points") for ax in panels[1::2])
    for ax, ratio in zip(panels[0::2], (2.0, 2.5)):
        (line,) = [ln for ln in ax.lines if ln.get_label() == "16 new tokens"]
        assert list(line.get_xdata()) == [2, 4] and list(line.get_ydata()) == pytest.approx([ratio] * 2)


def test_a_failed_synthetic_point_joins_the_model_of_its_own_shape_and_a_key_only_some_records_have_still_varies():
    def entry(order, layers, batch, status="valid", **extra):
        params = {"name": f"l{order}", "model": "synthetic", "dtype": "float16", "device": "cuda",
                  "engines": ["eager", "graph"], "batch_size": batch, "requests": batch, "max_new_tokens": 16,
                  "layers": layers, **extra}
        return {"order": order, "slug": f"l{order}", "status": status, "params": params}

    four = _graph(2, 10.0)
    two = copy.deepcopy(four.to_dict())
    two["metadata"]["model"]["name"] = "tiny-llama-2L"
    loaded = [(entry(0, 4, 2), four), (entry(1, 2, 2), Result.from_dict(two)), (entry(2, 4, 4), _graph(4, 20.0)),
              (entry(3, 2, 4, status="failed"), None)]
    assert [w.setting for w in settings.per_point(loaded)] == [()] * 4  # no 'layers' setting from the failed one
    older = [(entry(0, 4, 2, steps_per_graph=1), four), (entry(1, 4, 2, steps_per_graph=4), _graph(2, 5.0)),
             (entry(2, 4, 2), _graph(2, 20.0))]  # an older record without the key
    assert [w.setting for w in settings.per_point(older)] == [(("steps_per_graph", "1"),), (("steps_per_graph", "4"),),
                                                              (("steps_per_graph", settings.NOT_RECORDED),)]
    usable, _ = curves.split(older)
    assert len(curves.by_section(usable)) == 3  # three sections, none drawing two points at batch 2


def test_a_failed_point_whose_twins_resolved_to_two_models_joins_neither():
    # dtype auto resolved per machine: which model the failed point would have been is unknown, and joining either
    # would make its length_bucket a setting of that model's points
    def entry(order, bucket, status="valid"):
        return {"order": order, "slug": f"a{order}", "status": status,
                "params": {"name": f"a{order}", "model": "synthetic", "dtype": "auto", "engines": ["eager", "graph"],
                           "batch_size": 2, "requests": 2, "max_new_tokens": 16, "length_bucket": bucket}}

    wide = copy.deepcopy(_graph(2, 12.0).to_dict())
    wide["metadata"]["dtype"] = "float32"
    loaded = [(entry(0, 0), _graph(2, 10.0)), (entry(1, 0), Result.from_dict(wide)),
              (entry(2, 64, status="failed"), None)]
    assert [w.setting for w in settings.per_point(loaded)] == [()] * 3


def test_the_report_titles_each_section_with_its_setting_and_puts_the_settings_side_by_side(tmp_path):
    record = {"spec": {"name": "s"}, "executor": "local", "wall_s": 1.0}
    loaded = _loaded()
    text = report.summary(record, loaded)
    assert "## Synthetic model: tiny-llama-fixture, float16, length_bucket 0, on " in text
    assert "## Synthetic model: tiny-llama-fixture, float16, length_bucket 64, on " in text
    assert "## Pretrained model: SmolLM2-135M-Instruct (Q4_1 dequantized), float16, on " in text
    heading = [line for line in text.splitlines() if line.endswith(": settings side by side")]
    assert len(heading) == 1 and heading[0].startswith("## Synthetic model: tiny-llama-fixture, float16, on ")
    assert "| first / this |" in text and "the first setting, length_bucket 0, over each other setting's" in text
    assert "| graph[reuse] | 16 | 4 | 4 | length_bucket 64 | 40.000 | 20.000 | 2.000 |" in text
    (line,) = [x for x in report.answer_lines(record, loaded) if "graph[reuse] at length_bucket 64" in x]
    assert "2.00x to 2.00x the steady speed at length_bucket 0" in line
    assert line.endswith("; eager in the same points 1.00x to 1.00x, their run-to-run drift (eager ignores the "
                         "setting)")
    assert not any(x.startswith("Synthetic model: tiny-llama-fixture, float16: eager at") for x in
                   report.answer_lines(record, loaded))  # eager's ratio stands beside each variant's, not alone
    blocks = report.blocks(record, loaded, str(tmp_path / "figures"), str(tmp_path))
    figures = [b.body for b in blocks if b.kind == "figure"]
    assert len(figures) == len(set(figures)) and all(Path(f).is_file() for f in figures)  # none drawn over another
    assert any("length_bucket-64" in f for f in figures)
    (drawn,) = [f for f in figures if f.endswith("-settings.png")]
    assert Path(drawn).name == "sweep-synthetic-tiny-llama-fixture-float16-settings.png"
    (caption,) = [b.text for b in blocks if b.kind == "figure" and b.body == drawn]
    assert caption.endswith("; every 95% interval here is its samples' whole range")
    assert report.SETTINGS_EAGER_CAPTION in caption  # these points ran eager: its panel is drawn and named

    # points that ran no eager (the turn-order probes' two policies): no eager panel, none promised
    def without_eager(result):
        data = result.to_dict()
        return Result.from_dict({**data, "calls": [c for c in data["calls"] if c["engine"] != "eager"]})

    bare = [(entry, result and without_eager(result)) for entry, result in loaded]
    blocks = report.blocks(record, bare, str(tmp_path / "bare"), str(tmp_path))
    (caption,) = [b.text for b in blocks if b.kind == "figure" and b.body.endswith("-settings.png")]
    assert caption.startswith(report.SETTINGS_FIGURE_CAPTION) and "eager" not in caption
    assert ": settings side by side" not in report.summary(record, [loaded[0], loaded[4]])  # one setting a model


def test_the_readme_block_gives_each_setting_its_own_grid_and_the_models_side_by_side_their_first_setting():
    record = {"spec": {"name": "s", "report": "sweep"}, "executor": "local", "wall_s": 1.0}
    text = sweep_readme.readme_block(record, _loaded()[:4], "s")
    assert text.count("steady speed-up over eager generate()") == 2
    assert "length_bucket 0, on " in text and "length_bucket 64, on " in text
    # two models, one with two settings: a grid per section, not one range per model over both settings
    both = sweep_readme.readme_block(record, _loaded(), "s")
    assert both.count("steady speed-up over eager generate()") == 3 and "lowest to highest" not in both
    text = report.summary(record, _loaded())
    assert "## The models side by side" in text
    assert "(each model at its first setting: tiny-llama-fixture float16 at length_bucket 0)" in text
    assert "| graph[reuse] | 16 | 2 | 2 | 5.000 | 0.625 |" in text  # the tiny model at bucket 0: 100 / 20 ms


def test_a_sweep_without_eager_has_settings_side_by_side_without_eager_s_drift():
    # probe-turn-alone runs graph's policies alone: no eager point to set the drift beside
    loaded = []
    for order, (batch, bucket) in enumerate([(2, 0), (2, 64)]):
        result = point(batch, 16, {"graph[reuse]": (1, 40.0 if bucket else 80.0, 1, 1)})
        loaded.append((_entry(order, "synthetic", batch, bucket), result))
    usable, _ = curves.split(loaded)
    (line,) = report.settings_lines(usable)
    assert "graph[reuse] at length_bucket 64: 2.00x to 2.00x the steady speed" in line and "eager" not in line


def test_a_sweep_of_one_iteration_reports_its_settings_with_no_interval_and_no_verdict(tmp_path):
    """iterations: 1 leaves one steady sample a side: a ratio without an interval, never faster or slower (the
    report stopped on it, after every point had run)."""
    one = {(v, p): [ms] for v, ms in (("eager", 100.0), ("graph[reuse]", None)) for p in ("steady",
                                                                                          "steady_after_update")}
    rows = []
    for batch in (2, 4):
        for bucket in (0, 64):
            ms = 10.0 * batch if bucket == 0 else 5.0 * batch
            samples = {key: ([ms] if value == [None] else value) for key, value in one.items()}
            rows.append((_entry(len(rows), "synthetic", batch, bucket),
                         point(batch, 16, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (1, ms, 1, 1)},
                               steady_samples=samples)))
    record = {"spec": {"name": "s"}, "executor": "local", "wall_s": 1.0}
    (line,) = [x for x in report.answer_lines(record, rows) if "graph[reuse] at length_bucket 64" in x]
    assert "2.00x to 2.00x the steady speed at length_bucket 0; faster at 0 of 2 places, slower at 0" in line
    assert "| graph[reuse] | 16 | 4 | 4 | length_bucket 64 | 40.000 | 20.000 | 2.000 | - | - |" in report.summary(
        record, rows)
    assert any(b.kind == "figure" for b in report.blocks(record, rows, str(tmp_path / "figures"), str(tmp_path)))


def test_eager_s_ratio_between_two_settings_is_drift_alone_only_where_eager_runs_the_same_in_both():
    base = (("length_bucket", "0"), ("policy", "recapture then reuse"), ("seed", "0"))
    assert settings.moves_eager((("length_bucket", "64"),) + base[1:], base) is None
    assert settings.moves_eager((base[0], ("policy", "reuse then recapture"), base[2]), base) is None
    # a seed draws other weights and prompts for eager too; the order of turns moves eager's place among them
    assert settings.moves_eager(base[:2] + (("seed", "1"),), base) == "seed changes eager's run too"
    assert settings.moves_eager((("length_bucket", "64"), ("turn_order", "reverse")), (("length_bucket", "0"),
                                                                                       ("turn_order", "fixed"))) == (
        "turn_order changes eager's run too")
    # a point whose parameters were not recorded: unknown, either way round
    for pair in ((settings.UNRECORDED, base), (base, settings.UNRECORDED)):
        assert "not recorded" in settings.moves_eager(*pair)


def test_a_policy_list_is_named_as_the_order_it_is():
    # a list is the order the instances are built and take turns in, not two policies: its title says so
    loaded = []
    for order in (["recapture", "reuse"], ["reuse", "recapture"]):
        entry = _entry(len(loaded), "synthetic", 2, 0)
        entry["params"]["policy"] = order
        loaded.append((entry, _graph(2, 20.0)))
    assert [w.setting for w in settings.per_point(loaded)] == [(("policy", "recapture then reuse"),),
                                                               (("policy", "reuse then recapture"),)]
    usable, _ = curves.split(loaded)
    sections = list(curves.by_section(usable).values())
    assert ", policy recapture then reuse, on " in model_title(sections[0])
    assert model_stem(sections[1]).endswith("-float16-policy-reuse-then-recapture")
