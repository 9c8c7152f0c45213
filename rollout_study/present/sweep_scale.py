"""How a sweep's figures move with model size: one variant, batch, request count and new-token count across
the models.

The per-model sections draw each model alone; this puts the models a sweep ran side by side, for a sweep of
two or more. Models are ordered by parameter count (a model of unknown size last), and every table column and
the figure's kept-memory ticks name the model's label (synthetic or pretrained), shape, dtype, parameter count
and prompts (the other rows' ticks its label, size and dtype), so a synthetic shape is never read as the
pretrained model it copies. A row or a line appears only where at least two models have a valid point with
that variant at that batch, request count and new-token count. What else differs between models is named, not
hidden: a pretrained model's chat prompts are not a synthetic model's random ones, so the prompt lengths may
differ. A place where one model has two points (a sweep that varied another parameter) is left out for that
model rather than show one of them. Each value comes from its own model's points, as in the per-model sections
(sweep_curves.py defines them).
"""
from __future__ import annotations

import os
import textwrap

import pandas as pd
from matplotlib.figure import Figure

from .. import sweep_curves as curves
from ..sweep_curves import Point
from .drawing import banded_figure, fit_suptitle, save_png
from .sweep_panels import legend, line_colors
from .text import MIB

Models = dict  # (label, name, dtype) -> that model's valid points, as curves.by_model gives them


def ordered(models: Models) -> list[tuple]:
    """The models' keys by parameter count, unknown last (then label, so a pretrained model and its synthetic
    shape keep an order)."""
    def size(key):
        count = parameters(models[key])
        return count is None, count or 0, key[0] != "synthetic", key[1], key[2]
    return sorted(models, key=size)


def parameters(points: list[Point]) -> int | None:
    model = points[0].result.metadata.get("model") or {}
    return model.get("parameters")


def _size(points: list[Point]) -> str:
    count = parameters(points)
    return "size unknown" if count is None else (f"{count / 1e9:.2f} B" if count >= 1e9 else f"{count / 1e6:.1f} M")


def _prompts(points: list[Point]) -> str:
    """The prompts the model's points used: source and length (a range where they differ)."""
    workloads = [p.result.metadata.get("workload") or {} for p in points]
    sources = sorted({str(w.get("prompt_source") or "?") for w in workloads})
    lengths = sorted({w["prompt_len"] for w in workloads if w.get("prompt_len") is not None})
    length = "?" if not lengths else (f"{lengths[0]}" if len(lengths) == 1 else f"{lengths[0]}-{lengths[-1]}")
    return f"{'/'.join(sources)} prompts of {length} tokens"


def short_name(key: tuple, points: list[Point]) -> str:
    label, name, dtype = key
    return f"{label} {name} ({dtype}, {_size(points)}, {_prompts(points)})"


TICK_WIDTH = 22  # characters a tick line may take: three models' ticks side by side overlapped at full length


def tick(key: tuple, points: list[Point]) -> str:
    """The last quantity's tick (each band's bottom row): everything that tells the models apart, each part wrapped
    to TICK_WIDTH."""
    label, name, dtype = key
    parts = (label, name, f"{dtype}, {_size(points)}", _prompts(points))
    return "\n".join(textwrap.fill(part, TICK_WIDTH) for part in parts)


def brief_tick(key: tuple, points: list[Point]) -> str:
    """The other quantities' tick: synthetic or pretrained, the size and the dtype; the last one's names the rest."""
    return f"{key[0]}\n{_size(points)}, {key[2]}"


def _per_model(models: Models, rows_of) -> dict:
    """(variant, new tokens, batch, requests) -> {model key: row}, kept where two or more models have one row
    there; a model with two rows at one place (another parameter varied) is left out of that place."""
    table: dict = {}
    twice = set()
    for key in ordered(models):
        for point in models[key]:
            for row in rows_of([point]):
                place = (row.variant, row.new_tokens, row.batch, point.requests)
                if key in table.setdefault(place, {}):
                    twice.add((place, key))
                table[place][key] = row
    for place, key in twice:
        del table[place][key]
    return {place: by_model for place, by_model in table.items() if len(by_model) >= 2}


def scale_table(models: Models) -> pd.DataFrame:
    """Per variant, new tokens, batch and requests: each model's steady speed-up over generate() and ms per token."""
    keys = ordered(models)
    speedups = _per_model(models, curves.speedups)
    latencies = {place: by_model for place, by_model in _per_model(models, curves.latencies).items()
                 if place in speedups}
    rows = []
    for place in sorted(speedups, key=lambda p: (curves.variant_rank(p[0]), p[1], p[2], p[3])):
        row = {"variant": place[0], "new tokens": place[1], "batch": place[2], "requests": place[3]}
        for key in keys:
            name = short_name(key, models[key])
            speedup, latency = speedups[place].get(key), latencies.get(place, {}).get(key)
            row[f"speed-up, {name}"] = speedup and speedup.ratio.point
            row[f"ms per token, {name}"] = latency and latency.ms_per_token
        rows.append(row)
    return pd.DataFrame(rows)


def tokens_shown(models: Models) -> int | None:
    """The new-token count the figure draws: the largest at which two or more models share a speed-up row."""
    shared = {tokens for _, tokens, _, _ in _per_model(models, curves.speedups)}
    return max(shared) if shared else None


# (row label, rows of one model, value of a row); capture rows exist for every variant but eager: the
# capture part of its first call (0 ms where it captured nothing)
QUANTITIES = (
    ("speed-up over eager generate() (steady)", curves.speedups, lambda r: r.ratio.point),
    ("capture ms (first call)", curves.captures, lambda r: r.capture_ms),
    ("kept after the first call (MiB)", curves.captures,
     lambda r: None if r.kept_bytes is None else r.kept_bytes / MIB),
)


def scale_figure(models: Models, figures_dir: str | None = None) -> Figure | None:
    """A panel per variant (in bands: drawing.banded), its rows the QUANTITIES; x: the models by parameter count;
    one line per batch, at one new-token count (`tokens_shown`). None where no two models share a point."""
    tokens = tokens_shown(models)
    if tokens is None:
        return None
    keys = ordered(models)
    names = [v for v in curves.variants([p for key in keys for p in models[key]]) if v != curves.BASELINE]
    lines = sorted({(p.batch, p.requests) for key in keys for p in models[key] if p.new_tokens == tokens})
    colors = line_colors(lines)
    fig, panels = banded_figure(len(names), 4.4, 3.0 * len(QUANTITIES), rows=len(QUANTITIES), extra_height=0.8,
                                min_width=6)
    for row, (label, rows_of, value) in enumerate(QUANTITIES):
        shared = _per_model(models, rows_of)
        for panel, variant in zip(panels, names):
            ax, drawn, ys = panel[row], False, []
            for index, (batch, requests) in enumerate(lines):
                by_model = shared.get((variant, tokens, batch, requests), {})
                # each batch a little apart at its model's tick: two batches of one value would hide each other
                offset = 0.3 * (index / (len(lines) - 1) - 0.5) if len(lines) > 1 else 0.0
                xy = [(keys.index(key), value(r)) for key, r in by_model.items() if value(r) is not None]
                if len(xy) >= 2:
                    xy.sort()
                    ys += [y for _, y in xy]
                    color = colors[(batch, requests)]
                    said = f"batch {batch}" + ("" if requests == batch else f", {requests} requests")
                    ax.plot([x + offset for x, _ in xy], [y for _, y in xy], marker="o", linestyle="none",
                            color=color, label=said)
                    # A line only between neighbours of one label: none draws a trend from synthetic to pretrained.
                    for (x0, y0), (x1, y1) in zip(xy, xy[1:]):
                        if keys[x0][0] == keys[x1][0]:
                            ax.plot([x0 + offset, x1 + offset], [y0, y1], color=color)
                    drawn = True
            if not drawn:
                ax.text(0.5, 0.5, "no two models with this value", ha="center", va="center",
                        transform=ax.transAxes, fontsize=8)
            elif row and max(ys) - min(ys) < 0.05 * max(abs(y) for y in ys):  # row 0, the speed-up, has its 1x line
                # nearly one value (hf-compile's -32 MiB: one cuBLAS workspace): from 0, not a trend in 0.3 MiB
                ax.set_ylim(min(0, min(ys)) * 1.2, max(0, max(ys)) * 1.2 or 1)
            if row == 0:
                ax.axhline(curves.CROSSOVER, color="#c00", linestyle="--", linewidth=0.8)
                ax.axhline(1.0, color="black", linewidth=0.6)
                ax.set_title(variant, fontsize=9)
            ax.set_xticks(range(len(keys)))
            last = row == len(QUANTITIES) - 1
            ax.set_xticklabels([(tick if last else brief_tick)(k, models[k]) for k in keys], fontsize=6)
            ax.set_xlim(-0.5, len(keys) - 0.5)
            ax.set_ylabel(label, fontsize=7)
            ax.grid(alpha=0.3)
    legend(fig, [ax for panel in panels for ax in panel])  # under the panels: one in each top panel covered its points
    fit_suptitle(fig, f"The models side by side at {tokens} new tokens, by parameter count\n(each value from its "
                      "own model's valid points; synthetic and pretrained named at each tick, lines only between "
                      "models of one label; the models in full under the kept-memory panels)")
    if figures_dir is not None:
        os.makedirs(figures_dir, exist_ok=True)
        save_png(fig, path(figures_dir), dpi=100)
    return fig


def path(figures_dir: str) -> str:
    return os.path.join(figures_dir, "sweep-models-side-by-side.png")
