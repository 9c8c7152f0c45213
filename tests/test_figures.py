"""present/figures.py: every figure builds without warnings, is saved, and is readable."""
from __future__ import annotations

import os
import warnings

import pytest

from result_fixture import MODELS, make_result, make_result_dict
from rollout_study.engines import variant_color
from rollout_study.present import drawing, figures
from rollout_study.result import Result
from result_fixture import add_engine, retime, set_samples, with_control, with_instruments


def legend_labels(ax) -> list[str]:
    legend = ax.get_legend()
    return [t.get_text() for t in legend.get_texts()] if legend else []


@pytest.mark.parametrize("cuda_graph", [False, True])
def test_every_figure_is_saved_titled_and_silent(tmp_path, cuda_graph):
    result = make_result("pretrained", cuda_graph=cuda_graph)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. "No artists with labels found to put in legend"
        for kind, _, make in figures.FIGURES:
            title = make(result, str(tmp_path), "stem").get_suptitle()
            assert os.path.isfile(figures.figure_path(str(tmp_path), "stem", kind))
            named = f"{MODELS['pretrained']}, {result.metadata['dtype']} ("  # model, dtype, run
            assert "Pretrained model" in title and named in " ".join(title.split())
            assert (figures.NO_GRAPH_NOTE in title) is not cuda_graph
    assert len(os.listdir(tmp_path)) == len(figures.FIGURES)


def test_log_ticks_bracket_every_value_with_plain_labels():
    assert drawing._ticks_125(13.0, 27.0) == [10.0, 20.0, 50.0]
    assert drawing._ticks_125(13.7, 3666.9) == [10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0]
    assert drawing._ticks_125(20.0, 200.0) == [20.0, 50.0, 100.0, 200.0]


def test_latency_axis_is_logarithmic_with_labelled_ticks_around_all_samples():
    data = retime(make_result_dict(), "graph[reuse]", "steady", 13.0)  # 13 ms beside 300 ms first calls
    fig = figures.latency_figure(Result.from_dict(data))
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    ticks = [t for t in ax.get_yticks() if ax.get_ylim()[0] <= t <= ax.get_ylim()[1]]
    assert min(ticks) <= 13.0 and max(ticks) >= 300.0
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert "10" in labels and "20" in labels and "200" in labels and "500" in labels
    assert legend_labels(ax) == ["eager", "graph[recapture]", "graph[reuse]"]


def test_breakdown_panels_share_one_scale_and_show_shares():
    fig = figures.breakdown_figure(make_result(cuda_graph=True))
    top = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in top] == ["eager", "graph[recapture]", "graph[reuse]"]
    assert top[0].get_shared_y_axes().joined(top[0], top[2])
    assert top[0].get_ylim() == top[2].get_ylim()
    shares = [ax for ax in fig.axes if not ax.get_title()]
    assert len(shares) == 3 and all(ax.get_ylim()[1] <= 1.1 for ax in shares)


def test_break_even_has_a_log_log_panel_per_pair_including_policies():
    data = retime(make_result_dict(), "graph[reuse]", "steady_after_update", 12.0)
    fig = figures.break_even_figure(Result.from_dict(data))
    titled = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title().split(":")[0] for ax in titled] == [
        "graph[recapture] vs eager", "graph[reuse] vs eager", "graph[reuse] vs graph[recapture]"]
    assert all(ax.get_xscale() == "log" and ax.get_yscale() == "log" for ax in titled)
    assert "only up to U=36" in titled[2].get_title()
    # The x axis reaches past the bound, so the point where it stops paying off is in view.
    assert titled[2].get_xlim()[1] >= 72
    assert titled[2].patches  # where it pays off is shaded


def test_break_even_shades_nothing_where_the_steady_states_are_within_their_interval():
    # The fixture's reuse and recapture steady states are the same samples: the first calls decide, and the
    # medians' lines are no bound to shade up to.
    fig = figures.break_even_figure(make_result())
    titled = [ax for ax in fig.axes if ax.get_title()]
    assert "within their 95% interval" in titled[2].get_title() and not titled[2].patches
    assert titled[0].patches  # recapture against eager: steady states apart, shaded from U=2


def test_break_even_bottom_panel_is_the_candidates_cost_minus_the_baselines():
    fig = figures.break_even_figure(make_result())
    bottom = fig.axes[3]  # recapture against eager: first calls of 130 and 100 ms, steady ones of 10 and 50 ms
    assert bottom.get_ylabel() == "graph[recapture] minus eager (ms)"
    us, difference = bottom.lines[0].get_data()
    assert list(us[:3]) == [1, 2, 3] and list(difference[:3]) == [30.0, -10.0, -50.0]  # dearer first, then cheaper


def test_throughput_bars_are_each_phases_tokens_per_second():
    bars = [p.get_height() for p in figures.throughput_figure(make_result()).axes[0].patches]
    # 6 requests of 8 new tokens in each median call: 48 tokens in eager's first call of 200 ms
    assert len(bars) == 18 and bars[0] == 240.0 and all(height > 0 for height in bars)


def test_break_even_of_a_run_without_a_pair_says_so_rather_than_showing_empty_axes():
    data = make_result_dict()
    data["calls"] = [c for c in data["calls"] if c["engine"] == "eager"]  # one variant: nothing to compare
    fig = figures.break_even_figure(Result.from_dict(data))
    assert [t.get_text() for t in fig.axes[0].texts] == ["no pair measured after an update"]


def test_memory_kinds_have_their_own_panels():
    fig = figures.memory_figure(make_result(cuda_graph=True))
    labels = [ax.get_ylabel() for ax in fig.axes]
    # the whole process's allocator: a later variant's bars hold what the earlier ones left
    assert labels == ["allocated, whole\nprocess (MiB)", "reserved, whole\nprocess (MiB)",
                      "peak allocated, whole\nprocess (MiB)", "captures\nin phase"]
    assert fig.axes[3].get_ylim()[1] > 2  # the tallest bar in view: a recapturing phase's two captures
    assert legend_labels(fig.axes[0]) == ["eager", "graph[recapture]", "graph[reuse]"]


def test_a_cpu_runs_allocator_panels_say_why_they_are_empty_and_its_captures_are_drawn():
    fig = figures.memory_figure(make_result())
    assert [[t.get_text() for t in ax.texts] for ax in fig.axes[:3]] == [["no allocator statistics: CPU run"]] * 3
    assert not any(ax.patches for ax in fig.axes[:3]) and fig.axes[3].patches  # no bars of zero MiB


def test_the_timeline_marks_each_update_where_it_came_in_run_order():
    result = make_result()  # two cycles: an update after each variant's 5th and 10th event
    marks = [c.get_offsets().tolist() for c in figures.timeline_figure(result).axes[0].collections
             if c.get_offsets().size]
    assert len(result.updates) == 2 and [[step for step, _ in m] for m in marks] == [[5.0, 10.0]] * 3
    assert marks[0] == [[5.0, 390.0], [10.0, 660.0]]  # eager's cumulative time with each update in it
    # a control update (no optimizer step) first: an open circle, apart from the training updates' crosses
    controlled = Result.from_dict(with_control(make_result_dict()))
    ax = figures.timeline_figure(controlled).axes[0]
    eager_real, eager_control = ax.collections[:2]
    assert [step for step, _ in eager_control.get_offsets().tolist()] == [5.0]
    assert [step for step, _ in eager_real.get_offsets().tolist()] == [10.0, 15.0]
    assert eager_control.get_facecolor().size == 0 and eager_real.get_facecolor().size
    assert "o: control update, no optimizer step" in ax.get_xlabel()


def test_a_new_engine_gets_a_line_in_every_figure():
    result = Result.from_dict(add_engine(make_result_dict(cuda_graph=True), "graph[reuse]", "newgraph"))
    for make in (figures.latency_figure, figures.throughput_figure, figures.timeline_figure):
        assert "newgraph[reuse]" in legend_labels(make(result).axes[0])
    assert "newgraph[reuse]" in [ax.get_title() for ax in figures.breakdown_figure(result).axes]


def test_figure_stem_is_a_safe_file_name():
    assert figures.figure_stem(make_result(run_name="<b>a b/c</b>"), 2) == "synthetic-b-a-b-c-b-2"
    assert figures.figure_stem(make_result(run_name="<>")) == "synthetic-run"  # a name, not "synthetic-"


def test_a_log_axis_leaves_out_zero_and_missing_values():
    from matplotlib.figure import Figure

    ax = Figure().subplots()
    drawing.log_axis(ax, [0.0, None, 13.0, 270.0])  # a call no clock could time, a phase not measured
    assert ax.get_yscale() == "log" and ax.get_ylim() == (10.0, 500.0)  # 13 and 270: off both edges


def test_a_log_axis_gives_room_beyond_an_edge_tick_a_value_sits_on():
    from matplotlib.figure import Figure

    ax = Figure().subplots()
    # the Ray smoke twin's 0.1985 ms per token under the 0.2 tick was drawn half cut off by the frame
    drawing.log_axis(ax, [0.11, 0.1985])
    low, high = ax.get_ylim()
    assert low == 0.1 and 0.2 * 1.02 < high < 0.2 * 1.05  # 4% of the span beyond the top, none under 0.11
    drawing.log_axis(ax, [0.1, 0.15])
    assert 0.1 / 1.05 < ax.get_ylim()[0] < 0.1 / 1.02 and ax.get_ylim()[1] == 0.2
    # none where lines and shading run edge to edge: the run break-even's U axis, whose shading stopped short
    drawing.log_axis(ax, [1, 10], "x", room=False)
    assert ax.get_xlim() == (1, 10)
    fig = figures.break_even_figure(make_result(cuda_graph=True))
    assert fig.axes[0].get_xlim() == (1, 10)


def test_a_figure_is_saved_in_a_palette_of_its_own_colours_with_the_same_bytes_each_time(tmp_path):
    from matplotlib.figure import Figure
    from PIL import Image

    fig = Figure(figsize=(4, 3))
    ax = fig.subplots()
    lines = {"#440154": 1, "#21918c": 2, "#fde725": 3, "#d62728": 4}  # viridis ends and middle, the study's red
    for color, y in lines.items():
        ax.plot([0, 1], [y, y], color=color, linewidth=4)
    first, again = tmp_path / "a.png", tmp_path / "b.png"
    drawing.save_png(fig, str(first), dpi=100)
    drawing.save_png(fig, str(again), dpi=100)
    assert first.read_bytes() == again.read_bytes()
    with Image.open(first) as image:
        assert image.mode == "P" and image.size == (400, 300)
        used = {color for _, color in image.convert("RGB").getcolors(maxcolors=256)}
    for color in lines:  # each line's own colour, exactly: lines stay told apart
        assert tuple(int(color[i:i + 2], 16) for i in (1, 3, 5)) in used, color


def test_every_colour_of_the_study_keeps_its_own_value_beside_the_shades_of_sloped_lines(tmp_path):
    from matplotlib.figure import Figure
    from PIL import Image

    colors = sorted(set(figures.PART_COLORS.values()) | {variant_color(v) for v in ("eager", "graph[reuse]")})
    fig = Figure(figsize=(4, 3))
    ax = fig.subplots()
    for y, color in enumerate(colors):  # sloped: each edge a run of blended shades that take palette entries
        ax.plot([0, 1], [y, y + 0.5], color=color, linewidth=4)
    drawing.save_png(fig, str(tmp_path / "a.png"), dpi=100)
    with Image.open(tmp_path / "a.png") as image:
        used = {color for _, color in image.convert("RGB").getcolors(maxcolors=256)}
    assert [c for c in colors if tuple(int(c[i:i + 2], 16) for i in (1, 3, 5)) not in used] == []


def test_a_breakdown_panel_of_calls_left_whole_says_whether_any_instrumented_call_splits_them():
    # eager's generate() calls are left whole (all in other): with instrumented calls their split is there, and
    # without them (smollm2-buckets) the panel said nothing, a plain grey bar
    whole = {"engine": "eager", "policy": None, "breakdown": "measured calls untouched (total only, in other)"}
    graph = {"engine": "graph", "policy": "recapture", "breakdown": "capture, prefill and decode timed apart"}
    data = with_instruments(make_result_dict(cuda_graph=True))
    data["metadata"]["engines"] = [whole, graph]
    split = figures.breakdown_figure(Result.from_dict(data))
    del data["instrumented_calls"]
    bare = figures.breakdown_figure(Result.from_dict(data))
    titles = [[ax.get_title() for ax in fig.axes if ax.get_title()] for fig in (split, bare)]
    assert titles[0][0] == "eager\n(untouched calls: all in other;\nsplit in the instrumented calls)"
    assert titles[1][0] == "eager\n(untouched calls: all in other;\nthis run made no instrumented calls)"
    assert titles[0][1:] == titles[1][1:] == ["graph[recapture]", "graph[reuse]"]


def test_each_timeline_line_ends_level_at_its_final_total_past_its_last_event_on_whole_ticks():
    # steps-post gave the last event no width: its rise a vertical stroke at the right edge among the other lines'
    # (pretrained-smollm2-all: eager's final 35,457 ms read as 33,866, below two lines it ends above)
    result = Result.from_dict(with_control(make_result_dict()))  # 19 events: ticks had read 2.5, 7.5, 12.5
    ax = figures.timeline_figure(result).axes[0]
    ax.figure.canvas.draw()
    for line, variant in zip(ax.lines, result.variants()):
        events = figures.analysis.timeline(result, variant)
        steps, totals = line.get_data()
        assert (steps[-1], totals[-1]) == (events[-1].step + 1, events[-1].cumulative_ms)
        assert totals[-2] == events[-1].cumulative_ms  # level over the last event's own step
        assert ax.get_xlim()[1] >= steps[-1] and ax.get_ylim()[1] >= events[-1].cumulative_ms
    shown = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert len(shown) > 2 and all(t == int(t) for t in shown)


@pytest.mark.parametrize("make", [figures.latency_figure, figures.throughput_figure, figures.timeline_figure])
def test_the_legend_stands_right_of_the_panel_and_inside_the_saved_figure(tmp_path, make):
    # loc="best" sat on samples and bar tops where they filled every corner (reference-tiny-all-interleaved)
    fig = make(Result.from_dict(with_control(make_result_dict())), str(tmp_path), "stem")
    ax = fig.axes[0]
    fig.canvas.draw()
    legend, panel = ax.get_legend().get_window_extent(), ax.get_window_extent()
    assert legend.x0 >= panel.x1
    assert fig.bbox.x0 <= legend.x0 and legend.x1 <= fig.bbox.x1 and fig.bbox.y0 <= legend.y0  # not cut off


def test_the_breakdown_names_the_call_it_splits_the_lower_median_one_not_the_median():
    data = make_result_dict()
    data["calls"] = [c for c in data["calls"] if not (c["engine"] == "eager" and c["phase"] == "steady"
                                                      and c["index"] == 2)]
    result = Result.from_dict(set_samples(data, "eager", 0, "steady", [40.0, 60.0]))  # median 50: no call
    fig = figures.breakdown_figure(result)
    eager = fig.axes[0]
    assert [t.get_text() for t in eager.texts][1] == "40.0"  # c0 steady: a real call, the lower middle one
    assert " ".join(eager.get_ylabel().split()) == "ms of the lower-median call (shared scale)"
    title = " ".join(fig.get_suptitle().split())
    assert "lower-median call" in title and "which sits below the median" in title
    assert dict((kind, caption) for kind, caption, _ in figures.FIGURES)["breakdown"].endswith("lower-median call")


def test_a_crowded_breakdowns_phase_names_stand_upright_apart_and_a_few_stay_slanted():
    # 14 phase names at 35 degrees ran into each other in a 4-inch panel (reference-adamw-fp16)
    crowded = figures.breakdown_figure(Result.from_dict(with_control(make_result_dict(), cycles=4)))
    bottom = crowded.axes[3]  # eager's share panel
    labels = bottom.get_xticklabels()
    assert len(labels) == 14 and {(t.get_rotation(), t.get_ha()) for t in labels} == {(90.0, "center")}
    crowded.canvas.draw()
    extents = sorted((t.get_window_extent().x0, t.get_window_extent().x1) for t in labels)
    assert all(right < left for (_, right), (left, _) in zip(extents, extents[1:]))  # no two touch
    few = figures.breakdown_figure(make_result()).axes[3].get_xticklabels()
    assert len(few) == 6 and {t.get_rotation() for t in few} == {35.0}
    # every bar's total inside the frame: adamw-fp16's upright 3,064.9 over its tallest bar ran into the border
    top = crowded.axes[0]
    frame = top.get_window_extent()
    totals = [t for ax in crowded.axes[:3] for t in ax.texts]
    assert totals and all(t.get_window_extent().y1 <= frame.y1 for t in totals)


def test_many_pairs_and_variants_grow_down_in_bands_of_three_on_one_scale(tmp_path):
    # an all-engines run's eight break-even pairs in one row were 4,400 pixels wide, drawn at 28% on the page
    data = make_result_dict(cuda_graph=True)
    for like in ("graph[recapture]", "graph[reuse]"):
        add_engine(data, like, "newgraph")
    result = Result.from_dict(data)
    pairs = figures.analysis.break_even_rows(result)
    assert len(pairs) == 6 and drawing.COLUMNS == 3
    from PIL import Image

    fig = figures.break_even_figure(result, str(tmp_path), "stem")
    titled = [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]
    assert [ax.get_title().split(":")[0] for ax in titled] == [f"{r.candidate} vs {r.baseline}" for r in pairs]
    assert {(ax.get_subplotspec().rowspan.start, ax.get_subplotspec().colspan.start) for ax in titled} == {
        (0, 0), (0, 1), (0, 2), (2, 0), (2, 1), (2, 2)}  # two bands of three, each pair's difference under it
    assert [ax.get_ylabel() for ax in titled] == ["first + (U-1) x steady (ms)", "", ""] * 2  # each band's first
    with Image.open(figures.figure_path(str(tmp_path), "stem", "break-even")) as image:
        assert image.size[0] == 3 * 5 * 110  # three 5-inch panels at 110 dpi, not six
    # the breakdown: five variants, three then two and a hidden spare; its ms rows on one scale across the bands
    fig = figures.breakdown_figure(result)
    tops = [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]
    assert [ax.get_title() for ax in tops] == result.variants() and len(tops) == 5
    assert [ax.get_subplotspec().rowspan.start for ax in tops] == [0, 0, 0, 2, 2]
    assert all(tops[0].get_shared_y_axes().joined(tops[0], ax) for ax in tops)
    assert len({ax.get_ylim() for ax in tops}) == 1
    shares = [ax for ax in fig.axes if ax.get_visible() and not ax.get_title()]
    assert len(shares) == 5 and all(shares[0].get_shared_y_axes().joined(shares[0], ax) for ax in shares)
    assert [bool(ax.get_ylabel()) for ax in tops + shares] == [True, False, False, True, False] * 2
    assert len([ax for ax in fig.axes if not ax.get_visible()]) == 2  # one spare cell, both its rows
    fig.canvas.draw()
    legend = tops[2].get_legend()
    assert legend and legend.get_window_extent().x1 <= fig.bbox.x1  # right of the first band, inside the figure
