"""The sweep report's settings figure: one model's settings side by side (sweep_settings.py), its points at
every setting (curves.by_model), drawn with the section figures' panels, lines and bars (sweep_panels.py)."""
from __future__ import annotations

import os

from matplotlib.figure import Figure

from .. import sweep_settings as settings
from ..sweep_curves import Point
from .figures import fit_suptitle, fit_title, fit_ylabel, save_png
from .sweep_panels import (bars_name, batch_axis, by_tokens, grid, legend, line_colors, safe_stem,
                           settings_heading)


def settings_figure(points: list[Point], figures_dir: str | None = None) -> Figure | None:
    """One model's settings side by side (sweep_settings.py): a panel per other setting and variant, the first
    setting's steady median over that setting's vs batch, one line per new-token count, with its 95% interval (or
    whole range: `bars_name`), and dotted, eager's in the same points. None where the model ran one setting."""
    rows = settings.side_by_side(points)
    if not rows:
        return None
    panels = list(dict.fromkeys((r.setting, r.variant) for r in rows))
    fig, axes = grid(len(panels))
    colors = line_colors(r.new_tokens for r in rows)
    base = settings.text(rows[0].base)
    for ax, (setting, variant) in zip(axes, panels):
        mine = [r for r in rows if r.setting == setting]
        values = by_tokens(ax, mine, variant, lambda r: r.ratio.point, colors, log=False,
                           interval=lambda r: (r.ratio.low, r.ratio.high))
        for tokens, color in colors.items():  # the same points' eager, dotted: their drift where eager ignores it
            eager = sorted((r.batch, r.eager.point) for r in mine
                           if r.variant == variant and r.new_tokens == tokens and r.eager)
            if eager:
                ax.plot([b for b, _ in eager], [e for _, e in eager], linestyle=":", color=color,
                        label=f"eager, same points ({tokens})")
                values += [e for _, e in eager]
        ax.axhline(1.0, color="black", linewidth=0.6)
        # From the values, not from 0: the gaps a setting makes are a few percent, which an axis from 0 flattens
        low, high = min(values + [1.0]), max(values + [1.0])
        pad = max(0.15 * (high - low), 0.01 * high)
        ax.set_ylim(low - pad, high + pad)
        fit_title(ax, f"{variant}: {settings.text(setting)}")
        bounds = bars_name([r.ratio for r in mine if r.variant == variant])
        fit_ylabel(ax, f"steady median at {base} / at this setting (over 1: faster; {bounds})", 7)
        batch_axis(ax, [r.batch for r in mine])
    legend(fig, axes)
    eager = any(r.eager for r in rows)  # said only where drawn: a probe's points may run no eager
    title = (f"{settings_heading(points)}\nsteady speed against {base} vs batch"
             + (" (dotted: eager in the same two points, how far they moved run to run)" if eager else ""))
    fit_suptitle(fig, title)
    if figures_dir is not None:
        os.makedirs(figures_dir, exist_ok=True)
        save_png(fig, settings_path(figures_dir, points), dpi=100)
    return fig


def settings_path(figures_dir: str, points: list[Point]) -> str:
    label, name, dtype = points[0].model
    return os.path.join(figures_dir, f"sweep-{safe_stem(f'{label}-{name}-{dtype}')}-settings.png")
