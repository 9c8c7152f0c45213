"""The sweep figures' shared parts: a section's names and titles, its panels and their batch axis, one line per
new-token count with its bars, the legend under the panels, and the title that names a section's failed points.
Every sweep figure (sweep_figures.py, sweep_settings_figure.py, sweep_scale.py) draws with these."""
from __future__ import annotations

import os
import re

from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from .. import sweep_settings as settings
from ..stats import interval_name
from ..sweep_curves import BASELINE, Point
from .drawing import banded_figure, fit_suptitle, fit_title, log_axis, save_png
from .host import baseline_between_points
from .text import LABEL_TITLES, NO_GRAPH_NOTE


def model_name(points: list[Point]) -> str:
    """Label first, so a synthetic shape is never read as the pretrained model."""
    label, name, dtype = points[0].model
    return f"{LABEL_TITLES[label]}: {name}, {dtype}"


def model_title(points: list[Point]) -> str:
    """A section's title: the model, its setting where the sweep varied more than the curves' axes (a section's
    points share it), the machine."""
    setting = settings.text(points[0].setting)
    return f"{model_name(points)}{', ' + setting if setting else ''}, on {points[0].result.machine}"


def settings_heading(points: list[Point]) -> str:
    """A model's settings side by side: its name and machine, every setting's points."""
    return f"{model_name(points)}, on {points[0].result.machine}: settings side by side"


def safe_stem(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")


def model_stem(points: list[Point]) -> str:
    label, name, dtype = points[0].model
    return safe_stem(f"{label}-{name}-{dtype}-{settings.text(points[0].setting)}")


def line_colors(keys) -> dict:
    """One viridis colour per distinct key (new-token count, batch, ...), in sorted order: every sweep figure,
    the models side by side among them, reads its lines on the same scale."""
    keys = sorted(set(keys))
    cmap = colormaps["viridis"]
    return {k: cmap(0.85 * i / max(len(keys) - 1, 1)) for i, k in enumerate(keys)}


def batch_axis(ax, batches) -> None:
    ticks = sorted(set(batches))
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("batch size")
    ax.set_xlim(ticks[0] / 1.25, ticks[-1] * 1.25)  # every batch off the edges, one alone too


def grid(n: int, height: float = 3.6):
    """A figure of `n` panels, drawing.COLUMNS to a row, and its axes in reading order (spare cells hidden)."""
    fig, panels = banded_figure(n, 5.0, height, min_width=6)
    return fig, [ax for (ax,) in panels]


def finish(fig: Figure, points: list[Point], what: str, figures_dir: str | None, kind: str,
           not_drawn: str = "") -> Figure:
    """Titled with the section and, where some of its points failed or are invalid, which (`not_drawn`: a line
    that ends early would otherwise read as a sweep that stopped there)."""
    note = "" if points[0].result.cuda_graph else "\n" + NO_GRAPH_NOTE
    fit_suptitle(fig, f"{model_title(points)}: {what}{note}" + (f"\n{not_drawn}" if not_drawn else ""))
    if figures_dir is not None:
        os.makedirs(figures_dir, exist_ok=True)
        save_png(fig, path(figures_dir, points, kind), dpi=100)
    return fig


def path(figures_dir: str, points: list[Point], kind: str) -> str:
    return os.path.join(figures_dir, f"sweep-{model_stem(points)}-{kind}.png")


def by_tokens(ax, rows, variant: str, y, colors, log: bool = True, interval=None) -> list[float]:
    """One line per new-token count of `variant`'s rows against batch; returns the plotted values.
    `interval`: a row's (low, high), drawn as an error bar where both are known."""
    values = []
    for index, (tokens, color) in enumerate(colors.items()):
        line = sorted((r for r in rows if r.variant == variant and r.new_tokens == tokens), key=lambda r: r.batch)
        kept = [(r, y(r)) for r in line if y(r) is not None]
        # Each new-token count's line sits a little apart (the axis is log 2), so one count's bar or dot at a batch
        # does not hide another's: reserved growth comes in 2 MiB steps, and the policy-order probe's 64- and
        # 256-token dots (4 and 34 MiB both) coincided
        shift = 2 ** (0.05 * (index - (len(colors) - 1) / 2))
        if kept:
            ax.plot([r.batch * shift for r, _ in kept], [v for _, v in kept], marker="o", color=color,
                    label=f"{tokens} new tokens")
            values += [v for _, v in kept]
            for r, v in kept:
                low, high = interval(r) if interval else (None, None)
                if low is not None and high is not None:
                    ax.errorbar([r.batch * shift], [v], yerr=[[v - low], [high - v]], color=color, capsize=2,
                                linewidth=0.8)
                    values += [low, high]
    if log and values and max(values) > min(values):  # one value has no decade to span: left linear
        log_axis(ax, values)
    ax.grid(alpha=0.3)
    return values


def variant_title(ax, variant: str, points: list[Point]) -> None:
    """A panel's title, its variant. Eager's rows at a place come from the first valid point there that ran it
    (the first engine group's, unless that point failed); where the sweep's engine groups each ran their own
    generate(), the panel says so and how far those differ, for each speed-up divides by its own group's (the 1B
    sweep's eager panel read 0.732 ms per token at batch 16 / 512 tokens and hf-compile's 0.731, a 1.0x, where
    hf-compile's speed-up over its own group's is 1.64x)."""
    spread = [ratio for _, ratio in baseline_between_points(points)] if variant == BASELINE else []
    if spread:
        fit_title(ax, f"{variant}: each place's first valid point's (each engine group ran its own, up to "
                      f"{max(spread):.2f}x apart at one place; each speed-up divides by its group's)")
    else:
        ax.set_title(variant, fontsize=9)


def log_said(ax, before: str, after: str = "") -> str:
    """"log" for an axis label where `by_tokens` drew a log axis (one value everywhere leaves it linear)."""
    return f"{before}log{after}" if ax.get_yscale() == "log" else ""


def bars_name(ratios) -> str:
    """What a panel's bars are: with 3 calls a side every 95% interval is its calls' whole range (stats.Ratio)."""
    mixed = any(r.whole_range for r in ratios) and not all(r.whole_range for r in ratios)
    return f"bars: {interval_name(ratios)}" + (", some the whole range" if mixed else "")


def legend(fig: Figure, axes) -> None:
    """One legend for the figure, under its panels, of every label its panels draw (a legend inside a panel
    covered its points)."""
    handles = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    if handles:
        figure_legend(fig, list(handles.values()), list(handles))


def figure_legend(fig: Figure, handles, labels) -> None:
    """Under the panels, in as many columns as the figure's width holds at its widest entry's width (marker and
    gaps about 0.6 inch, a character about 0.07 at 8 points): a one-panel figure's legend of six entries in a row
    ran past both its edges."""
    widest = 0.6 + 0.07 * max(len(label) for label in labels)
    columns = max(1, min(len(handles), int(0.95 * fig.get_figwidth() // widest)))
    fig.legend(handles, labels, loc="outside lower center", ncol=columns, fontsize=8)
