"""The sweep report's settings figure: one model's settings side by side (sweep_settings.py), its points at
every setting (curves.by_model), drawn with the section figures' panels, lines and bars (sweep_panels.py).

A row per setting against the first (rows: more than three panels go on in a band below), a panel per variant,
then a panel per set of points' eager generate() (the same two points' eager, which says how far they moved run to
run where the setting leaves eager alone). Eager has
a panel of its own, not a dotted line beside the variant's: its ratios spread far wider (0.73x to 1.54x in the
policy-order probe, 0.73x to 1.49x where the seed was the same: drift alone) than the few-percent gaps a setting
makes, which an axis that held both drew flat."""
from __future__ import annotations

import os

from matplotlib.figure import Figure

from .. import sweep_settings as settings
from ..sweep_curves import Point
from .drawing import bands, fit_suptitle, fit_title, fit_ylabel, new_figure, save_png
from .sweep_panels import bars_name, batch_axis, by_tokens, legend, line_colors, safe_stem, settings_heading


def settings_figure(points: list[Point], figures_dir: str | None = None) -> Figure | None:
    """One model's settings side by side: the first setting's steady median over each other setting's vs
    batch, one line per new-token count, with its 95% interval (or whole range: `bars_name`). None where the model
    ran one setting."""
    rows = settings.side_by_side(points)
    if not rows:
        return None
    others = list(dict.fromkeys(r.setting for r in rows))
    variants = list(dict.fromkeys(r.variant for r in rows))
    layout = {setting: variants + _eager_panels([r for r in rows if r.setting == setting], variants)
              for setting in others}
    # each setting's panels in bands of drawing.COLUMNS, a setting's first band on a row of its own
    columns = bands(max(len(panels) for panels in layout.values()))[1]
    heights = [bands(len(layout[setting]), columns)[0] for setting in others]
    fig = new_figure(max(4.4 * columns, 6), 3.4 * sum(heights) + 1.0)
    cells = iter(fig.subplots(sum(heights), columns, squeeze=False))
    grid = [[ax for _ in range(height) for ax in next(cells)] for height in heights]
    colors = line_colors(r.new_tokens for r in rows)
    base = settings.text(rows[0].base)
    for axes, setting in zip(grid, others):
        mine = [r for r in rows if r.setting == setting]
        said = settings.text(setting)
        ranges = []  # the row's variants on one scale: recapture beside reuse at one setting is the comparison
        for ax, panel in zip(axes, layout[setting]):
            if isinstance(panel, str):
                ranges.append((ax, by_tokens(ax, mine, panel, lambda r: r.ratio.point, colors, log=False,
                                             interval=lambda r: (r.ratio.low, r.ratio.high))))
                fit_title(ax, f"{panel}: {said}")
                bounds = bars_name([r.ratio for r in mine if r.variant == panel])
                fit_ylabel(ax, f"steady median at {base} / at this setting (over 1: faster; {bounds})", 7)
            else:
                ours = [r for r in mine if r.variant == panel[0]]
                drawn = by_tokens(ax, ours, panel[0], lambda r: r.eager and r.eager.point, colors, log=False,
                                  interval=lambda r: (r.eager.low, r.eager.high))
                _around_one([ax], drawn)
                moved = settings.moves_eager(setting, rows[0].base)
                why = moved or "their run-to-run drift: eager ignores the setting"
                whose = " and ".join(f"{v}'s" for v in panel)
                fit_title(ax, f"eager generate() in {whose} points: {said} ({why})")
                bounds = bars_name([r.eager for r in ours if r.eager])
                fit_ylabel(ax, f"eager's steady median at {base} / at this setting ({bounds})", 7)
            batch_axis(ax, [r.batch for r in mine])
        _around_one([ax for ax, _ in ranges], [v for _, values in ranges for v in values])
        for spare in axes[len(layout[setting]):]:
            spare.set_visible(False)
    legend(fig, [ax for axes in grid for ax in axes if ax.get_visible()])
    eager = any(len(panels) > len(variants) for panels in layout.values())
    fit_suptitle(fig, f"{settings_heading(points)}\nsteady speed against {base} vs batch, a row per setting"
                 + (": the variants, then eager generate() in the same two points, on its own axis" if eager else ""))
    if figures_dir is not None:
        os.makedirs(figures_dir, exist_ok=True)
        save_png(fig, settings_path(figures_dir, points), dpi=100)
    return fig


def _eager_panels(mine, variants: list[str]) -> list[tuple[str, ...]]:
    """Eager's panels at one setting: one per set of variants whose rows hold the same eager ratios (one point ran
    them all: a probe's two policies), one each where they came from different points (the sweep's engine
    groups, each with its own eager). Each panel is the tuple of its variants."""
    panels: dict[tuple, list[str]] = {}
    for variant in variants:
        series = tuple(sorted((r.new_tokens, r.batch, r.eager.point, r.eager.low, r.eager.high)
                              for r in mine if r.variant == variant and r.eager))
        if series:
            panels.setdefault(series, []).append(variant)
    return [tuple(names) for names in panels.values()]


def _around_one(axes: list, values: list[float]) -> None:
    """From the values, not from 0, with 1 (no change) in view: a setting's gaps are a few percent, which an
    axis from 0 flattens."""
    low, high = min(values + [1.0]), max(values + [1.0])
    pad = max(0.15 * (high - low), 0.01 * high)
    for ax in axes:
        ax.axhline(1.0, color="black", linewidth=0.6)
        ax.set_ylim(low - pad, high + pad)


def settings_path(figures_dir: str, points: list[Point]) -> str:
    label, name, dtype = points[0].model
    return os.path.join(figures_dir, f"sweep-{safe_stem(f'{label}-{name}-{dtype}')}-settings.png")
