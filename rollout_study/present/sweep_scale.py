"""How a sweep's figures move with model size: one variant, batch and new-token count across the models.

The per-model sections draw each model alone; this puts the models a sweep ran side by side, for a sweep
of two or more. Models are ordered by parameter count, and every table column and figure tick names the
model's label (synthetic or pretrained), shape, dtype and parameter count, so a synthetic shape is never
read as the pretrained model it copies. A row or a line appears only where at least two models have a
valid point with that variant at that batch and new-token count: figures never compare across different
workloads, and each value comes from its own model's points, as in the per-model sections
(sweep_curves.py defines them).
"""
from __future__ import annotations

import os

import pandas as pd
from matplotlib.figure import Figure

from .. import sweep_curves as curves
from ..sweep_curves import Point
from .figures import save_png
from .sweep_figures import _colors
from .text import MIB

Models = dict  # (label, name, dtype) -> that model's valid points, as curves.by_model gives them


def ordered(models: Models) -> list[tuple]:
    """The models' keys by parameter count (then label, so a pretrained model and its synthetic shape keep an order)."""
    return sorted(models, key=lambda key: (parameters(models[key]) or 0, key[0] != "synthetic", key[1], key[2]))


def parameters(points: list[Point]) -> int | None:
    model = points[0].result.metadata.get("model") or {}
    return model.get("parameters")


def _size(points: list[Point]) -> str:
    count = parameters(points)
    return "size unknown" if count is None else (f"{count / 1e9:.2f} B" if count >= 1e9 else f"{count / 1e6:.1f} M")


def short_name(key: tuple, points: list[Point]) -> str:
    label, name, dtype = key
    return f"{label} {name} ({dtype}, {_size(points)})"


def tick(key: tuple, points: list[Point]) -> str:
    label, name, dtype = key
    return f"{label}\n{name}\n{dtype}, {_size(points)}"


def _per_model(models: Models, rows_of) -> dict:
    """(variant, new tokens, batch) -> {model key: row}, kept where two or more models have the row."""
    table: dict = {}
    for key in ordered(models):
        for row in rows_of(models[key]):
            table.setdefault((row.variant, row.new_tokens, row.batch), {})[key] = row
    return {place: by_model for place, by_model in table.items() if len(by_model) >= 2}


def scale_table(models: Models) -> pd.DataFrame:
    """Per variant, new tokens and batch: each model's steady speed-up over generate() and ms per token."""
    keys = ordered(models)
    speedups = _per_model(models, curves.speedups)
    latencies = {place: by_model for place, by_model in _per_model(models, curves.latencies).items()
                 if place in speedups}
    rows = []
    for place in sorted(speedups, key=lambda p: (curves.variant_rank(p[0]), p[1], p[2])):
        row = {"variant": place[0], "new tokens": place[1], "batch": place[2]}
        for key in keys:
            name = short_name(key, models[key])
            speedup, latency = speedups[place].get(key), latencies.get(place, {}).get(key)
            row[f"speed-up, {name}"] = speedup and speedup.ratio.point
            row[f"ms per token, {name}"] = latency and latency.ms_per_token
        rows.append(row)
    return pd.DataFrame(rows)


def tokens_shown(models: Models) -> int | None:
    """The new-token count the figure draws: the largest at which two or more models share a speed-up row."""
    shared = {tokens for _, tokens, _ in _per_model(models, curves.speedups)}
    return max(shared) if shared else None


# (row label, rows of one model, value of a row); the capture rows exist for the variants that capture
QUANTITIES = (
    ("speed-up over eager generate() (steady)", curves.speedups, lambda r: r.ratio.point),
    ("capture ms (first call)", curves.captures, lambda r: r.capture_ms),
    ("kept after the first call (MiB)", curves.captures, lambda r: None if r.kept_bytes is None else r.kept_bytes / MIB),
)


def scale_figure(models: Models, figures_dir: str | None = None) -> Figure | None:
    """Rows: the QUANTITIES; columns: the variants; x: the models by parameter count; one line per batch,
    at one new-token count (`tokens_shown`). None where no two models share a point."""
    tokens = tokens_shown(models)
    if tokens is None:
        return None
    keys = ordered(models)
    names = [v for v in curves.variants([p for key in keys for p in models[key]]) if v != curves.BASELINE]
    batches = sorted({p.batch for key in keys for p in models[key] if p.new_tokens == tokens})
    colors = _colors(batches)
    fig = Figure(figsize=(max(4.4 * len(names), 6), 3.0 * len(QUANTITIES) + 0.8), layout="constrained")
    axes = fig.subplots(len(QUANTITIES), max(len(names), 1), squeeze=False)
    for row, (label, rows_of, value) in enumerate(QUANTITIES):
        shared = _per_model(models, rows_of)
        for column, variant in enumerate(names):
            ax, drawn = axes[row][column], False
            for batch in batches:
                by_model = shared.get((variant, tokens, batch), {})
                xy = [(keys.index(key), value(r)) for key, r in by_model.items() if value(r) is not None]
                if len(xy) >= 2:
                    xy.sort()
                    ax.plot([x for x, _ in xy], [y for _, y in xy], marker="o", color=colors[batch],
                            label=f"batch {batch}")
                    drawn = True
            if not drawn:
                ax.text(0.5, 0.5, "no two models with this value", ha="center", va="center",
                        transform=ax.transAxes, fontsize=8)
            if row == 0:
                ax.axhline(curves.CROSSOVER, color="#c00", linestyle="--", linewidth=0.8)
                ax.axhline(1.0, color="black", linewidth=0.6)
                ax.set_title(variant, fontsize=9)
                if drawn:
                    ax.legend(fontsize=7)
            ax.set_xticks(range(len(keys)))
            ax.set_xticklabels([tick(k, models[k]) for k in keys], fontsize=6)
            ax.set_xlim(-0.4, len(keys) - 0.6)
            ax.set_ylabel(label, fontsize=7)
            ax.grid(alpha=0.3)
    fig.suptitle(f"The models side by side at {tokens} new tokens, by parameter count\n(each value from its own "
                 f"model's valid points; synthetic and pretrained named at each tick)", fontsize=10)
    if figures_dir is not None:
        os.makedirs(figures_dir, exist_ok=True)
        save_png(fig, path(figures_dir), dpi=100)
    return fig


def path(figures_dir: str) -> str:
    return os.path.join(figures_dir, "sweep-models-side-by-side.png")
