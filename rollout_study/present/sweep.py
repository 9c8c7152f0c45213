"""The sweep report: curves over batch size and new tokens per model, failed points, points repeated
alone and the sweep's wall time, as tables, notebook blocks and summary.md.

Each model (label and shape) gets its own section, headed by its label, one per setting where the sweep
varied more than the curves' axes, and those settings side by side (sweep_settings.py); the numbers and their
definitions are in sweep_curves.py, the repeat rule in repeats.py (its words and tables in sweep_repeats.py),
the figures in sweep_figures.py, the wall time, each point's time and host in sweep_cost.py, the
definitions a reader gets in sweep_definitions.py.
"""
from __future__ import annotations

import pandas as pd

from .. import repeats
from .. import sweep_crossover as crossing
from .. import sweep_curves as curves
from .. import sweep_settings as settings
from . import policy_gaps, run_facts, sweep_repeats, sweep_scale
from ..record import excerpt
from ..result import Result
from ..stats import interval_name, whole_range_note
from ..sweep import missing_points, was_kept
from .notebook import Block, blocks_markdown
from .provenance import provenance_line
from .sweep_cost import HOST_CAPTION, host_lines, host_table, placement_lines, time_table, wall_table
from .sweep_definitions import definitions
from .sweep_figures import FIGURES, OVER_BATCH, OVER_TOKENS
from .sweep_panels import model_name, model_title, path, settings_heading
from .sweep_settings_figure import settings_figure, settings_path
from .text import MIB, NO_GRAPH_NOTE


SCALE_CAPTION = ("The models side by side (by parameter count): steady speed-up over eager generate() and ms per "
                 "token at each variant, batch, request count and new-token count two or more models share")
SCALE_FIGURE_CAPTION = ("The models side by side (by parameter count) at one new-token count, one colour per batch "
                        "(and request count, where it differs), a line only between neighbouring models of one label "
                        "(synthetic or pretrained; none where the labels alternate): steady speed-up over eager "
                        "generate(), capture ms and memory kept after the first call (below zero: see Definitions, "
                        "capture)")


def at_first_settings(models: dict) -> tuple[dict, str]:
    """The models side by side take each model at its first setting (two points at one place would leave it
    out there, sweep_scale.py), and say so where a model has more than one."""
    firsts = {key: settings.at_first(points) for key, points in models.items()}
    named = [f"{key[1]} {key[2]} at {settings.text(firsts[key][0].setting)}" for key in models
             if firsts[key][0].setting]
    return firsts, (f" (each model at its first setting: {'; '.join(named)})" if named else "")


def _mib(value):
    return None if value is None else value / MIB


def speedup_table(points) -> pd.DataFrame:
    return pd.DataFrame([{"variant": r.variant, "new tokens": r.new_tokens, "batch": r.batch,
                          "speed-up": r.ratio.point, "95% low": r.ratio.low, "95% high": r.ratio.high}
                         for r in curves.speedups(points)])


def latency_table(points) -> pd.DataFrame:
    return pd.DataFrame([{"variant": r.variant, "new tokens": r.new_tokens, "batch": r.batch, "requests": r.requests,
                          "steady ms": r.steady_ms, "ms per token": r.ms_per_token, "ms per decode step": r.ms_per_step}
                         for r in curves.latencies(points)])


def capture_table(points) -> pd.DataFrame:
    return pd.DataFrame([{"variant": r.variant, "new tokens": r.new_tokens, "batch": r.batch,
                          "capture ms": r.capture_ms, "captures": r.captures, "peak MiB": _mib(r.peak_delta_bytes),
                          "kept MiB": _mib(r.kept_bytes), "reserved growth MiB": _mib(r.reserved_delta_bytes)}
                         for r in curves.captures(points)])


def after_update_table(points) -> pd.DataFrame:
    return pd.DataFrame([{"variant": r.variant, "new tokens": r.new_tokens, "batch": r.batch, "first ms": r.first_ms,
                          "steady after ms": r.steady_ms, "first / steady": r.first_ms / r.steady_ms}
                         for r in curves.after_update(points)])


def break_even_table(points) -> pd.DataFrame:
    return pd.DataFrame([{"candidate": r.candidate, "baseline": r.baseline, "new tokens": r.new_tokens,
                          "batch": r.batch, "steady / baseline's": r.steady_ratio, "from U": r.break_even.first_u,
                          "up to U": r.break_even.last_u, "verdict": r.break_even.verdict}
                         for r in curves.break_evens(points)])


def growth_table(points) -> pd.DataFrame:
    return pd.DataFrame([{"variant": r.variant, "batch": r.batch, "new tokens": ", ".join(map(str, r.new_tokens)),
                          "slope ms per token": r.fit and r.fit.slope, "intercept ms": r.fit and r.fit.intercept,
                          # through two counts a line always fits: its R^2 of 1 would say nothing
                          "R^2": r.fit.r2 if r.fit and r.fit.n > 2 else None, "points": len(r.new_tokens)}
                         for r in curves.growth(points)])


def crossover_table(points) -> pd.DataFrame:
    return pd.DataFrame([{"variant": c.variant, "new tokens": c.new_tokens,
                          f"first batch under {curves.CROSSOVER}x": c.text} for c in crossing.crossovers(points)])


def settings_table(points) -> pd.DataFrame:
    """One model's settings side by side (empty where it ran one)."""
    return pd.DataFrame([{"variant": r.variant, "new tokens": r.new_tokens, "batch": r.batch, "requests": r.requests,
                          "setting": settings.text(r.setting), f"at {settings.text(r.base)} ms": r.base_ms,
                          "at this setting ms": r.setting_ms, "first / this": r.ratio.point, "95% low": r.ratio.low,
                          "95% high": r.ratio.high, "eager first / this": r.eager and r.eager.point,
                          "eager 95% low": r.eager and r.eager.low, "eager 95% high": r.eager and r.eager.high}
                         for r in settings.side_by_side(points)])


ONE_BATCH_NOTE = ("one batch size here ({batch}): the figures over batch (speed-up, latency, capture, first call "
                  "after an update, break-even) would draw a point per line, so they are left out; the tables below "
                  "give every figure")
ONE_COUNT_NOTE = ("one new-token count here ({tokens}): the growth figure (steady time vs new tokens) would draw a "
                  "dot per batch and no line, so it is left out; the growth table gives each point")
SETTINGS_FIGURE_CAPTION = ("Each other setting against the first, a row per setting, a panel per variant: the first "
                           "setting's steady median over this one's vs batch, one line per new-token count, with its "
                           "95% bootstrap interval")
# only where the points ran eager: the turn-order probes ran two policies and no eager
SETTINGS_EAGER_CAPTION = ("; then, on its own axis, eager generate()'s in the same two points (their run-to-run drift "
                          "where the setting leaves eager alone; its panel says where the setting changes eager's "
                          "run too)")


def settings_caption(points) -> str:
    first = settings.text(settings.in_order(points)[0])
    return (f"{settings_heading(points)}: steady median at the first setting, {first}, over each other setting's, at "
            "the same variant and place")


def settings_lines(points) -> list[str]:
    """One line per other setting and variant, with eager's ratio in the same points beside it: what the two points'
    drift alone moved, where eager ignores the setting."""
    rows, lines = settings.side_by_side(points), []

    def span(ratios) -> str:
        return f"{min(r.point for r in ratios):.2f}x to {max(r.point for r in ratios):.2f}x"
    for setting, variant in dict.fromkeys((r.setting, r.variant) for r in rows):
        mine = [r for r in rows if (r.setting, r.variant) == (setting, variant)]
        ratios, eager = [r.ratio for r in mine], [r.eager for r in mine if r.eager]
        # one sample a side (iterations: 1) has no interval: neither faster nor slower
        faster, slower = sum(r.side() == 1 for r in ratios), sum(r.side() == -1 for r in ratios)
        moved = settings.moves_eager(setting, mine[0].base)
        why = f"not drift alone: {moved}" if moved else "their run-to-run drift (eager ignores the setting)"
        drift = "" if not eager else f"; eager in the same points {span(eager)}, {why}"  # none without eager
        lines.append(f"{model_name(points)}: {variant} at {settings.text(setting)}: {span(ratios)} the steady speed "
                     f"at {settings.text(mine[0].base)}; faster at {faster} of {len(ratios)} places, slower at "
                     f"{slower} (the {interval_name(ratios)} clear of 1)" + drift)
    return lines


def _ranges(points) -> str:
    """What the speed-up table's and figure's captions add: how many of their intervals are their samples' whole
    range (few calls a side)."""
    note = whole_range_note([r.ratio for r in curves.speedups(points)])
    return f"; {note}" if note else ""


def not_drawn(points: list[curves.Point], rejected: list[curves.Rejected], shown: int = 6) -> str:
    """The section's failed and invalid points, for its figures' titles and captions: a line that ends early
    would otherwise read as a sweep that stopped there, or a curve that never falls under the crossover as one
    whose points all stayed over it."""
    mine = [r for r in rejected if r.model == points[0].model and r.setting == points[0].setting]
    places: dict = {}
    for r in mine:
        params = r.params or {}
        listed = params.get("engines")
        engines = ("its engines" if not listed
                   else ", ".join([e for e in listed if e != curves.BASELINE] or [curves.BASELINE]))
        batch, requests = params.get("batch_size"), params.get("requests")
        place = (batch, requests if requests not in (None, batch) else None, params.get("max_new_tokens"))
        places.setdefault(place, []).append(f"{engines} {r.status}")
    parts = [f"{where(batch, requests, tokens)} ({', '.join(said)})" for (batch, requests, tokens), said in
             sorted(places.items(), key=lambda kv: tuple(-1 if v is None else v for v in kv[0]))]
    more = [f"{len(parts) - shown} more places"] if len(parts) > shown else []
    return (f"not drawn: {len(mine)} point(s) failed or invalid (the report's table says why): "
            + "; ".join(parts[:shown] + more)) if mine else ""


def where(batch, requests, tokens) -> str:
    """A point's place as its parameters give it ("?" where they do not: its slug in the failures table)."""
    at = "?" if batch is None else batch
    return (f"batch {at}" + (f" ({requests} requests)" if requests is not None else "")
            + f" at {'?' if tokens is None else tokens} new tokens")


def failures_table(rejected: list[curves.Rejected]) -> pd.DataFrame:
    return pd.DataFrame([{"point": r.slug, "status": r.status, "why": excerpt(r.reason, 250)} for r in rejected],
                        columns=["point", "status", "why"])


MODEL_TABLES = (
    ("Steady speed-up over eager generate()", speedup_table),
    (f"Crossover: where the speed-up falls under {curves.CROSSOVER}x", crossover_table),
    ("Per-token latency (steady): ms per generated token, the steady call over requests x new tokens (amortized "
     "over the batch), and ms per decode step", latency_table),
    ("Capture time and memory of the first call", capture_table),
    ("First call after a real update", after_update_table),
    ("Break-even rollouts per update", break_even_table),
    (policy_gaps.SWEEP_TITLE, policy_gaps.persistence_table),
    ("Steady time vs new tokens: least-squares fit", growth_table),
)


def _parts(folder, record: dict, loaded):
    usable, rejected = curves.split(loaded)
    verdicts = repeats.verdicts(loaded, repeats.load(folder, record)) if record.get("repeats") else []
    return usable, rejected, verdicts


def models_without_a_valid_point(loaded: list[tuple[dict, Result | None]], usable: list) -> list[str]:
    """A model (name and dtype, as the points' parameters give them) of which no point is valid has no
    figure and no table: the answer says so, where it would otherwise say nothing."""
    def model(params: dict) -> tuple:
        return params.get("model"), params.get("dtype")

    slugs = {p.slug for p in usable}
    valid = {model(entry.get("params") or {}) for entry, _ in loaded if entry.get("slug") in slugs}
    counts: dict[tuple, int] = {}
    for entry, _ in loaded:
        key = model(entry.get("params") or {})
        if key not in valid:
            counts[key] = counts.get(key, 0) + 1
    return [f"model {name} ({dtype}): no valid point; {n} failed or invalid (listed below), so no curve"
            for (name, dtype), n in counts.items()]


def wall_seconds(record: dict) -> float:
    """Seconds the sweep spent running its points, every invocation summed (older records: `wall_s`)."""
    wall = record.get("wall") or {}
    return wall.get("total_seconds", wall.get("seconds", record.get("wall_s"))) or 0


def unfinished(record: dict) -> str | None:
    """Said where the spec has points not run yet (a report of a sweep in progress; `publish` refuses one):
    else each curve and range in it would read as the sweep's."""
    missing = missing_points(record)
    if not missing or not missing[0]:
        return None
    return (f"unfinished: {missing[0]} of the spec's {missing[1]} point(s) not run yet, so every range, curve and "
            "crossover here stops where the run points do (resume with --into)")


def answer_lines(record: dict, loaded: list[tuple[dict, Result | None]], folder=".") -> list[str]:
    usable, rejected, verdicts = _parts(folder, record, loaded)
    wall = record.get("wall") or {}
    lines = [f"{len(loaded)} point(s): {len(usable)} valid, {len(rejected)} failed or invalid; "
             f"{wall.get('executor', record.get('executor'))} executor, {wall.get('gpus', '-')} GPU(s), "
             f"{wall.get('workers', '-')} worker(s), {wall_seconds(record):.0f} s"]
    if note := unfinished(record):
        lines.append(note)
    started = [p["launcher"] for p in record.get("points", []) if p.get("launcher")]
    kept = sum(1 for p in record.get("points", []) if was_kept(p))
    if started:
        counts = ", ".join(f"{kind} {started.count(kind)}" for kind in dict.fromkeys(started))
        lines.append(f"points run here, by launcher (each a fresh process; start-up below is the launcher's): {counts}"
                     + (f"; {kept} kept from earlier invocations (the record keeps no launcher or wall time of a "
                        "kept point; each invocation's wall time is in the wall-time table)" if kept else ""))
    elif kept:  # a resume that kept every point: its entries name no launcher, the sweep file names the one used
        launcher = record["spec"].get("launcher") or "fresh"
        lines.append(f"points run here: none; all {kept} kept from earlier invocations (the record keeps no launcher "
                     f"or wall time of a kept point; the sweep file's launcher: {launcher}; each invocation's wall "
                     "time is in the wall-time table)")
    if record["spec"].get("subset_of"):
        lines.append(f"a subset of {record['spec']['subset_of']}: that file's points with these values, with the "
                     "same parameters and hashes, so the whole sweep keeps their results (--keep-from)")
    lines += models_without_a_valid_point(loaded, usable)
    ratios = []  # every section's speed-ups, for the whole-range note below
    for points in curves.by_section(usable).values():
        rows = curves.speedups(points)
        ratios += [r.ratio for r in rows]
        for variant in dict.fromkeys(r.variant for r in rows):
            mine = [r.ratio.point for r in rows if r.variant == variant]
            crossings = crossing.crossing_summary([c for c in crossing.crossovers(points) if c.variant == variant])
            lines.append(f"{model_title(points)}: {variant} {min(mine):.2f}x to {max(mine):.2f}x over eager; "
                         f"first under {curves.CROSSOVER}x at: {crossings}")
    if note := whole_range_note(ratios, "steady speed-up's 95% interval"):
        lines.append(f"intervals: {note} (few calls a side: see Definitions); the crossovers and break-evens that "
                     "read such an interval say so")
    for points in curves.by_model(usable).values():
        lines += settings_lines(points) + policy_gaps.order_lines(points, model_name(points))
    if verdicts:
        lines.append(sweep_repeats.answer_line(record, verdicts))
    return (lines + host_lines(loaded) + placement_lines(record)
            + [provenance_line([result for _, result in loaded if result is not None])])


def blocks(record: dict, loaded: list[tuple[dict, Result | None]], figures_dir: str | None = "figures",
           folder=".") -> list[Block]:
    """The report's blocks, which its notebook shows and summary.md renders; figures_dir None: no figure drawn
    and none among the blocks (summary.md's case; the figure functions' None means drawn, not saved)."""
    usable, rejected, verdicts = _parts(folder, record, loaded)
    draw = figures_dir is not None
    out = [Block("heading", f"Sweep {record['spec'].get('name')}", 2),
           Block("answer", "Answer", answer_lines(record, loaded, folder)),
           Block("answer", "Run", run_facts.sweep_lines([result for _, result in loaded if result is not None]))]
    if usable and not usable[0].result.cuda_graph:
        out.append(Block("warning", NO_GRAPH_NOTE))
    if note := unfinished(record):
        out.append(Block("warning", note))
    if rejected:
        out.append(Block("warning", f"{len(rejected)} point(s) failed or are invalid: listed below, never plotted"))
    out += [Block("answer", "Definitions", definitions()),
            Block("table", "Wall time of the sweep (compare two sweeps: rollout-study compare A B)",
                  wall_table(record)),
            Block("table", "Failed and invalid points (not in any curve)", failures_table(rejected)),
            Block("table", "Where each point's time went (seconds; the last row sums the points)", time_table(loaded)),
            Block("table", HOST_CAPTION, host_table(loaded))]
    for points in curves.by_section(usable).values():
        out.append(Block("heading", model_title(points), 2))
        one_batch, one_count = (len({getattr(p, key) for p in points}) == 1 for key in ("batch", "new_tokens"))
        if one_batch:
            out.append(Block("note", ONE_BATCH_NOTE.format(batch=points[0].batch)))
        if one_count:
            out.append(Block("note", ONE_COUNT_NOTE.format(tokens=points[0].new_tokens)))
        ranges = _ranges(points)  # one note for the speed-up figure and table, which show the same intervals
        missing = not_drawn(points, rejected)
        for kind, caption, make in FIGURES:
            if draw and not (one_batch and kind in OVER_BATCH) and not (one_count and kind in OVER_TOKENS):
                make(points, figures_dir, missing)
                out.append(Block("figure", f"{model_title(points)}: {caption}" + (ranges if kind == "speedup" else "")
                                 + (f"; {missing}" if missing else ""), path(figures_dir, points, kind)))
        out += [Block("table", f"{model_title(points)}: {caption}" + (ranges if make is speedup_table else ""),
                      make(points))
                for caption, make in MODEL_TABLES]
    models = curves.by_model(usable)
    for points in models.values():
        if not (side_by_side := settings_table(points)).empty:
            out.append(Block("heading", settings_heading(points), 2))
            rows = settings.side_by_side(points)
            # the figure's bars and the table's intervals: the settings' ratios and eager's in the same points
            note = whole_range_note([r for row in rows for r in (row.ratio, row.eager) if r])
            if draw:
                settings_figure(points, figures_dir)
                eager = SETTINGS_EAGER_CAPTION if any(row.eager for row in rows) else ""
                out.append(Block("figure", SETTINGS_FIGURE_CAPTION + eager + (f"; {note}" if note else ""),
                                 settings_path(figures_dir, points)))
            out.append(Block("table", settings_caption(points) + (f"; {note}" if note else ""), side_by_side))
        if not (ordered := policy_gaps.order_table(points)).empty:
            out.append(Block("table", f"{model_name(points)}: {policy_gaps.ORDER_TITLE}", ordered))
    firsts, note = at_first_settings(models)
    if sweep_scale.tokens_shown(firsts) is not None:
        out.append(Block("heading", "The models side by side", 2))
        if draw:
            sweep_scale.scale_figure(firsts, figures_dir)
            out.append(Block("figure", SCALE_FIGURE_CAPTION + note, sweep_scale.path(figures_dir)))
        out.append(Block("table", SCALE_CAPTION + note, sweep_scale.scale_table(firsts)))
    if record.get("repeats"):
        out += [Block("heading", sweep_repeats.HEADING, 2), Block("note", sweep_repeats.rule_note(record)),
                Block("table", sweep_repeats.point_caption(record), sweep_repeats.point_table(verdicts)),
                Block("table", sweep_repeats.PHASES_CAPTION, sweep_repeats.phase_table(verdicts))]
    for index, block in enumerate(out):
        block.key = f"sweep-{index}"
    return out


def summary(record: dict, loaded: list[tuple[dict, Result | None]], folder=".") -> str:
    return blocks_markdown(blocks(record, loaded, None, folder))  # under the first block: "Sweep NAME"
