"""The report's figures: bare matplotlib Figures (no pyplot state), saved as PNG in a figures folder.

Each figure function takes one result (one label), an optional folder and file stem, and returns
the Figure; `FIGURES` lists them with the file suffix and caption the report uses. Colours and
variant order come from the engine registry. Latencies span 10 ms to seconds, so time axes are
logarithmic with plain labelled ticks (1-2-5 per decade) that bracket every plotted value.
"""
from __future__ import annotations

import math
import os
import re
import textwrap

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, PercentFormatter

from .. import analysis
from ..engines import variant_color
from ..record import PARTS, variant_name
from ..result import Result
from .drawing import (COLUMNS, band_starts, banded_figure, fit_suptitle, fit_ylabel, log_axis, new_figure,
                      save_png)
from .text import MIB, NO_GRAPH_NOTE, number, run_title

# Set2's muted shades: the variants' colours (engines' `colors`, tab10) mean variants in every other figure
PART_COLORS = {"allocation": "#e5c494", "warmup": "#fc8d62", "compile": "#8da0cb", "capture": "#e78ac3",
               "prefill": "#a6d854", "decode": "#66c2a5", "other": "#b3b3b3"}
# The call the breakdown splits (analysis.median_call): named apart from the median, which need be no call
LOWER_MEDIAN = "the lower-median call"
MEMORY_PANELS = {"allocated": "allocated", "reserved": "reserved", "peak_allocated": "peak allocated"}


# -- helpers ----------------------------------------------------------------------------------
def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "run"


def figure_stem(result: Result, position: int | None = None) -> str:
    return f"{result.label}-{_safe(result.run_name)}" + ("" if position is None else f"-{position}")


def figure_path(figures_dir: str, stem: str, kind: str) -> str:
    return os.path.join(figures_dir, f"{stem}-{kind}.png")


def phase_label(cycle: int, phase: str, controls=frozenset()) -> str:
    """`c1 steady after update`; after a control update (no optimizer step) `c0 steady after control update`."""
    if cycle in controls and phase.endswith("_after_update"):
        phase = phase.replace("_after_update", "_after_control_update")
    return f"c{cycle} {phase.replace('_', ' ')}"


def _finish(fig: Figure, result: Result, what: str, figures_dir: str | None, stem: str | None, kind: str) -> Figure:
    fit_suptitle(fig, f"{run_title(result)}: {what}" + ("" if result.cuda_graph else "\n" + NO_GRAPH_NOTE))
    if figures_dir is not None:
        os.makedirs(figures_dir, exist_ok=True)
        save_png(fig, figure_path(figures_dir, stem or figure_stem(result), kind), dpi=110)
    return fig


def _legend(ax, **kwargs) -> None:
    # Only when something is labelled: an empty legend() warns "No artists with labels found".
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kwargs)


def _legend_outside(ax, fontsize: float = 8) -> None:
    """The legend right of the panel: inside ("best") it covered samples, bar tops and line ends wherever the
    data filled every corner (hf-continuous's 986 ms first call after a control update). The constrained
    layout makes room for it, so the saved PNG keeps it whole."""
    _legend(ax, fontsize=fontsize, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def _x_phases(ax, groups, rotation: int = 20, fontsize: int = 8, controls=frozenset()) -> None:
    # upright text centred on its tick; slanted text ends at it
    ax.set_xticks(range(len(groups)), [phase_label(c, p, controls) for c, p in groups], rotation=rotation,
                  ha="center" if rotation == 90 else "right", fontsize=fontsize)


# -- figures ----------------------------------------------------------------------------------
def latency_figure(result: Result, figures_dir: str | None = None, stem: str | None = None) -> Figure:
    """Every sample (dots), the median (bar) and IQR (error bar) per phase and variant, on a log axis."""
    fig = new_figure(11, 4.5)
    ax = fig.add_subplot()
    groups, names = result.phase_groups(), result.variants()
    width = 0.8 / max(len(names), 1)
    values = []
    for v, variant in enumerate(names):
        color = variant_color(variant)
        for g, (cycle, phase) in enumerate(groups):
            samples = result.samples(variant, cycle, phase)
            if samples is None:
                continue
            values += samples.values
            x = g - 0.4 + width * (v + 0.5)
            low, high = samples.quartiles
            ax.errorbar([x], [samples.median], yerr=[[samples.median - low], [high - samples.median]], fmt="_",
                        markersize=14, capsize=4, color=color, label=variant if g == 0 else None)
            # each sample its own place across the bar's width (modulo 5 put ten samples on five places)
            spread = [x + width * 0.35 * (i - (samples.n - 1) / 2) / max(samples.n - 1, 1) for i in range(samples.n)]
            ax.scatter(spread, samples.values, s=8, alpha=0.5, color=color)
    _x_phases(ax, groups, controls=analysis.control_cycles(result))
    ax.set_ylabel("wall time per rollout call (ms, log scale)")
    log_axis(ax, values)
    _legend_outside(ax)
    ax.grid(axis="y", alpha=0.3)
    return _finish(fig, result, "latency per phase (median, IQR, samples)", figures_dir, stem, "latency")


def breakdown_figure(result: Result, figures_dir: str | None = None, stem: str | None = None) -> Figure:
    """The lower-median call's disjoint parts per phase, per variant: ms on one scale shared by every variant (its
    upper panel), share of the call (its lower panel).

    A real call (analysis.median_call), so its parts sum to its total; of an even count it is the lower of the middle
    two, below the median the latency figure and the tables give (interleaved eager c0 steady after update: 182.0
    against 189.0), and the figure says so. The lower panels are what make a 13 ms steady call readable beside a
    500 ms first call.
    """
    names, groups = result.variants(), result.phase_groups()
    untouched = analysis.untouched_variants(result)
    unsplit = untouched_by_design(result) - untouched  # no instrumented calls in this run: nothing splits them
    fig, panels = banded_figure(len(names), 4, 7, rows=2, share_rows=True)
    highest, crowded = 0.0, len(groups) > 8  # upright totals of many bars ran into each other
    for (top, bottom), variant in zip(panels, names):
        calls = [result.calls_of(variant, c, p) for c, p in groups]
        medians = [analysis.median_call(found) if found else None for found in calls]
        totals = [call.total_ms if call else 0.0 for call in medians]
        ms_base, share_base = [0.0] * len(groups), [0.0] * len(groups)
        for part in PARTS:
            ms = [call.breakdown_ms[part] if call else 0.0 for call in medians]
            share = [m / t if t else 0.0 for m, t in zip(ms, totals)]
            top.bar(range(len(groups)), ms, bottom=ms_base, color=PART_COLORS[part], label=part)
            bottom.bar(range(len(groups)), share, bottom=share_base, color=PART_COLORS[part])
            ms_base = [b + h for b, h in zip(ms_base, ms)]
            share_base = [b + h for b, h in zip(share_base, share)]
        highest = max([highest] + totals)
        for g, total in enumerate(totals):
            if total:
                top.annotate(number(total, 1), (g, total), ha="center", va="bottom", fontsize=6,
                             rotation=90 if crowded else 0)
        note = ("\n(untouched calls: all in other;\nsplit in the instrumented calls)" if variant in untouched
                else "\n(untouched calls: all in other;\nthis run made no instrumented calls)" if variant in unsplit
                else "")
        top.set_title(variant + note, fontsize=9)
        top.set_xticks(range(len(groups)), [])
        # 14 phase names at 35 degrees ran into each other in a 4-inch panel (reference-adamw-fp16); 10 read fine
        _x_phases(bottom, groups, rotation=90 if len(groups) > 10 else 35, fontsize=7,
                  controls=analysis.control_cycles(result))
        bottom.yaxis.set_major_formatter(PercentFormatter(1.0))
        for ax in (top, bottom):
            ax.grid(axis="y", alpha=0.3)
    if highest:  # room over the tallest bar for its total (adamw-fp16's upright 3,064.9 ran into the frame)
        panels[0][0].set_ylim(0, highest * (1.3 if crowded else 1.08))
    for top, bottom in band_starts(panels):
        fit_ylabel(top, f"ms of {LOWER_MEDIAN} (shared scale)", fontsize=9)
        fit_ylabel(bottom, "share of the call", fontsize=9)
    _legend_outside(panels[min(COLUMNS, len(panels)) - 1][0], fontsize=7)  # right of the first band
    return _finish(fig, result, f"disjoint breakdown of {LOWER_MEDIAN} (a real call: of an even count the lower "
                   "of the middle two, which sits below the median)", figures_dir, stem, "breakdown")


UNTOUCHED = "measured calls untouched"


def untouched_by_design(result: Result) -> set[str]:
    """Variants whose engine leaves its measured calls whole (eager: `generate()` is not split), as the run's
    engine metadata says."""
    # The engine's own words (engines/eager.py, code the published runs' fingerprint holds): a wording changed
    # there drops this note, and the breakdown test's metadata, in the same words, fails
    return {variant_name(engine["engine"], engine.get("policy")) for engine in result.metadata.get("engines") or ()
            if str(engine.get("breakdown", "")).startswith(UNTOUCHED)}


def _grouped_bars(ax, result: Result, values_of) -> None:
    """One bar per variant in each phase group; `values_of(variant)` gives one value per group."""
    names, groups = result.variants(), result.phase_groups()
    width = 0.8 / max(len(names), 1)
    for v, variant in enumerate(names):
        ax.bar([g - 0.4 + width * (v + 0.5) for g in range(len(groups))], values_of(variant), width=width,
               color=variant_color(variant), label=variant)


def memory_figure(result: Result, figures_dir: str | None = None, stem: str | None = None) -> Figure:
    """One panel per allocator statistic (allocated, reserved, peak allocated), then captures per phase."""
    rows = {(r.variant, r.cycle, r.phase): r for r in analysis.summary_rows(result)}
    groups = result.phase_groups()
    fig = new_figure(11, 9)
    axes = fig.subplots(len(MEMORY_PANELS) + 1, 1, sharex=True)

    def per_group(variant, get):
        return [get(rows[(variant, c, p)]) if (variant, c, p) in rows else 0 for c, p in groups]

    for ax, (kind, title) in zip(axes, MEMORY_PANELS.items()):
        has = any(r.memory_bytes[kind] is not None for r in rows.values())
        if has:
            _grouped_bars(ax, result, lambda v: per_group(v, lambda r: (r.memory_bytes[kind] or 0) / MIB))
        else:
            ax.set_yticks([])
            ax.text(0.5, 0.5, "no allocator statistics: CPU run", ha="center", va="center", transform=ax.transAxes)
        # the whole process's allocator, not the variant's own: each bar holds what the engines and calls before it
        # left (reference-tiny's graph[reuse] read 65.3 MiB beside eager's 33.1 and added 0.1 itself)
        ax.set_ylabel(f"{title}, whole\nprocess (MiB)")
        ax.grid(axis="y", alpha=0.3)
    captures = axes[-1]
    _grouped_bars(captures, result, lambda v: per_group(v, lambda r: r.captures))
    captures.yaxis.set_major_locator(MaxNLocator(integer=True))
    captures.set_ylim(0, max([1] + [r.captures for r in rows.values()]) * 1.15)
    captures.set_ylabel("captures\nin phase")
    _x_phases(captures, groups, controls=analysis.control_cycles(result))
    # On the first panel with bars: on a CPU run only the captures panel has any.
    labelled = next((ax for ax in axes if ax.get_legend_handles_labels()[0]), axes[-1])
    _legend_outside(labelled)
    return _finish(fig, result, "the process's memory, largest over each phase's calls (run order), and captures "
                   "per phase", figures_dir, stem, "memory")


def throughput_figure(result: Result, figures_dir: str | None = None, stem: str | None = None) -> Figure:
    rows = {(r.variant, r.cycle, r.phase): r.tokens_per_s for r in analysis.summary_rows(result)}
    fig = new_figure(11, 4)
    ax = fig.add_subplot()
    _grouped_bars(ax, result, lambda v: [rows.get((v, c, p)) or 0.0 for c, p in result.phase_groups()])
    _x_phases(ax, result.phase_groups(), controls=analysis.control_cycles(result))
    ax.set_ylabel("generated tokens per second (median)")
    _legend_outside(ax)
    ax.grid(axis="y", alpha=0.3)
    return _finish(fig, result, "tokens per second", figures_dir, stem, "throughput")


def timeline_figure(result: Result, figures_dir: str | None = None, stem: str | None = None) -> Figure:
    """Cumulative wall time of each variant's calls plus the updates, in run order; updates marked."""
    fig = new_figure(11, 4.5)
    ax = fig.add_subplot()
    values, controls = [], analysis.control_cycles(result)
    for variant in result.variants():
        events = analysis.timeline(result, variant)  # never empty: variants() are those with calls
        color = variant_color(variant)
        # steps-post draws each event's total from its step to the next one's: the last event had no width, its
        # rise a vertical stroke at the right edge among the others' (eager's final 35,457 ms read as 33,866,
        # below lines it ends above), so each line runs one step on past its last event
        steps, totals = [e.step for e in events], [e.cumulative_ms for e in events]
        ax.plot(steps + [steps[-1] + 1], totals + [totals[-1]], drawstyle="steps-post", color=color, label=variant)
        # A control update takes no optimizer step (its time is the copy and the collection): marked apart, so
        # its step is not read as a training update's cost
        for control, marker in ((False, "x"), (True, "o")):
            updates = [e for e in events if e.kind == "update" and (e.cycle in controls) == control]
            ax.scatter([e.step for e in updates], [e.cumulative_ms for e in updates], marker=marker, s=40,
                       **({"facecolors": "none", "edgecolors": color} if control else {"color": color}))
        values += [e.cumulative_ms for e in events]
    ax.set_xlabel("event in run order (rollout calls and updates; x: training update"
                  + ("; o: control update, no optimizer step)" if controls else ")"))
    ax.set_ylabel("cumulative wall time (ms, log scale)")
    log_axis(ax, values)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # events are whole: no 2.5, 7.5
    _legend_outside(ax)
    ax.grid(alpha=0.3)
    return _finish(fig, result, "cumulative wall time over the run", figures_dir, stem, "timeline")


def break_even_figure(result: Result, figures_dir: str | None = None, stem: str | None = None) -> Figure:
    """Per pair: cost per update against rollouts per update U (log-log, top) and the candidate's cost
    minus the baseline's (bottom, where lines that nearly coincide on top still part); where the
    candidate pays off is shaded, unless the steady states tie (within their interval, or for two policies
    of one engine within the margin: see the title)."""
    rows = analysis.break_even_rows(result)
    fig, panels = banded_figure(len(rows), 5, 7, rows=2)
    if not rows:
        panels[0][0].text(0.5, 0.5, "no pair measured after an update", ha="center", va="center",
                          transform=panels[0][0].transAxes)
    for (top, bottom), row in zip(panels, rows):
        bounds = [u for u in (row.break_even.first_u, row.break_even.last_u) if u]
        horizon = min(max([10] + [2 * u for u in bounds]), 10 ** 6)
        span = sorted({round(10 ** (math.log10(horizon) * i / 200)) for i in range(201)})
        lines = {}
        for variant, first, steady in ((row.baseline, row.baseline_first_ms, row.baseline_steady_ms),
                                       (row.candidate, row.candidate_first_ms, row.candidate_steady_ms)):
            lines[variant] = [analysis.rollouts_cost(first, steady, u) for u in span]
            top.plot(span, lines[variant], color=variant_color(variant), label=variant)
        difference = [c - b for c, b in zip(lines[row.candidate], lines[row.baseline])]
        bottom.plot(span, difference, color=variant_color(row.candidate))
        bottom.axhline(0, color="black", linewidth=0.8)
        for ax in (top, bottom):
            # Steady states that tie (their interval, or the margin between two replays of the same kernels): the
            # medians' slopes differ by no gap the study resolves, so their crossing is no bound; the verdict
            # (title) comes from the first calls and nothing is shaded.
            if row.break_even.first_u is not None and row.break_even.steady_differs:
                ax.axvspan(row.break_even.first_u, row.break_even.last_u or horizon, color="#2ca02c", alpha=0.1,
                           label=f"{row.candidate} pays off" if ax is top else None)
            log_axis(ax, span, "x", room=False)  # room there ended the "pays off" shading short of the frame
            ax.tick_params(axis="x", labelrotation=30, labelsize=7)
            ax.grid(alpha=0.3)
        log_axis(top, lines[row.baseline] + lines[row.candidate])
        verdict = "\n".join(textwrap.wrap(row.break_even.verdict, 70))  # the longer verdicts fit their panel
        top.set_title(f"{row.candidate} vs {row.baseline}:\n{verdict}", fontsize=8)
        bottom.set_xlabel("rollouts per update U")
        bottom.set_ylabel(f"{row.candidate} minus {row.baseline} (ms)", fontsize=7)
        _legend(top, fontsize=7)
    for top, _ in band_starts(panels):
        top.set_ylabel("first + (U-1) x steady (ms)")
    return _finish(fig, result, "cost per update vs rollouts per update", figures_dir, stem, "break-even")


# (file kind, caption, function): the kind is the PNG name's suffix each function saves under.
FIGURES = (
    ("latency", "Latency per phase and variant", latency_figure),
    ("breakdown", "Breakdown of the lower-median call", breakdown_figure),
    ("memory", "Memory and captures: the whole process's allocator after each phase's calls (largest over them), "
               "so a variant's bars include what the variants before it left; captures per phase", memory_figure),
    ("throughput", "Tokens per second", throughput_figure),
    ("timeline", "Cumulative wall time: calls and updates in run order", timeline_figure),
    ("break-even", "Break-even: cost per update against rollouts per update", break_even_figure),
)
