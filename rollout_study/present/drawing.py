"""What every figure draws with: text wrapped to fit its figure or panel, log axes with plain 1-2-5 ticks, panels
in bands, the PNG writer.

Panels grow down in bands of at most COLUMNS, not across: a report page draws a figure at the page's width (about
1,250 pixels in a browser, a printed page less), and the eight break-even pairs of an all-engines run in one row
(4,400 pixels) were drawn at 28%, their titles and ticks too small to read; the models side by side (six variants,
2,640 pixels) at 47%."""
from __future__ import annotations

import io
import math
import textwrap

from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator


def save_png(fig: Figure, path: str, dpi: int) -> None:
    """The figure as a PNG of at most 256 colours: line plots on white need no more, and the file is about a
    third of full colour (the sweep's capture figure: 515 to 164 KB), where the published reports travel
    to the GPU machine with the whole tracked tree in 64 MiB. Median cut is deterministic, so a rebuilt
    report's figures keep their bytes."""
    from PIL import Image

    rendered = io.BytesIO()
    fig.savefig(rendered, format="png", dpi=dpi)
    rendered.seek(0)
    with Image.open(rendered) as image:
        image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, format="PNG",
                                                                                        optimize=True)


def fit_text(text: str, inches: float, fontsize: float) -> str:
    """`text` wrapped, each of its lines, to about `inches` at `fontsize`: a saved PNG clips a title or axis label
    longer than its figure or panel, and a title clipped at both ends loses its first word ("Synthetic")."""
    per_line = max(int(inches * 72 / (fontsize * 0.62)), 16)  # 0.62: a wide average character of DejaVu Sans
    return "\n".join(textwrap.fill(line, per_line) if line else line for line in text.split("\n"))


def fit_suptitle(fig: Figure, text: str, fontsize: float = 10) -> None:
    fig.suptitle(fit_text(text, 0.95 * fig.get_figwidth(), fontsize), fontsize=fontsize)


def fit_ylabel(ax, text: str, fontsize: float = 8) -> None:
    """An axis label wrapped to its panel's height (less the title's and ticks' room)."""
    rows = ax.get_subplotspec().get_gridspec().nrows if ax.get_subplotspec() else 1
    ax.set_ylabel(fit_text(text, 0.7 * ax.figure.get_figheight() / rows, fontsize), fontsize=fontsize)


def fit_title(ax, text: str, fontsize: float = 9) -> None:
    """A panel's title wrapped to its width: a long one ran into its neighbour's."""
    columns = ax.get_subplotspec().get_gridspec().ncols if ax.get_subplotspec() else 1
    ax.set_title(fit_text(text, 0.95 * ax.figure.get_figwidth() / columns, fontsize), fontsize=fontsize)


def _ticks_125(low: float, high: float) -> list[float]:
    """1-2-5 ticks from the largest one at or below `low` to the smallest one at or above `high`."""
    ticks = [m * 10.0 ** e for e in range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1)
             for m in (1, 2, 5)]
    below = max(t for t in ticks if t <= low * (1 + 1e-9))
    above = min(t for t in ticks if t >= high * (1 - 1e-9))
    return [t for t in ticks if below <= t <= above]


def log_axis(ax, values: list[float], axis: str = "y", room: bool = True) -> None:
    """A log axis whose labelled 1-2-5 ticks bracket every value, labels in plain numbers (13, 20, 200).
    `room`: False for an axis whose lines and shading run from edge to edge (the run break-even's U)."""
    positive = [v for v in values if v and v > 0]
    if not positive:
        return
    ticks = _ticks_125(min(positive), max(positive))
    scaled = ax.yaxis if axis == "y" else ax.xaxis
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
    scaled.set_major_locator(FixedLocator(ticks))
    scaled.set_minor_locator(NullLocator())
    scaled.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    low, high = ticks[0], ticks[-1]
    # a value on an edge tick was drawn half cut off by the frame (the Ray smoke twin's 0.1985 ms per token under
    # 0.2): room beyond that edge, 4% of the span
    margin = (high / low) ** 0.04 if room else 1.0
    if min(positive) < low * margin:
        low /= margin
    if max(positive) > high / margin:
        high *= margin
    (ax.set_ylim if axis == "y" else ax.set_xlim)(low, high)


def new_figure(width: float, height: float) -> Figure:
    """A bare, constrained Figure of `width` x `height` inches: no pyplot state, nothing global, nothing shown twice
    by a notebook's inline backend."""
    return Figure(figsize=(width, height), layout="constrained")


COLUMNS = 3  # three panels of 4 to 5 inches are 1,200 to 1,650 pixels at 100 or 110 dpi: near full size on a page


def bands(n: int, columns: int = COLUMNS) -> tuple[int, int]:
    """(bands, columns) for `n` panels: one band of `n` when `n` fits, else full bands and a last partial one."""
    columns = max(min(n, columns), 1)
    return max(-(-n // columns), 1), columns


def banded(fig: Figure, n: int, rows: int = 1, share_rows: bool = False, columns: int = COLUMNS) -> list[list]:
    """`n` panels of `rows` axes each (a quantity per row), `columns` panels to a band, bands top to bottom; each
    panel's axes top to bottom, panels in reading order; the last band's spare cells hidden. `share_rows`: a row of
    every panel shares one y axis (one scale across bands too), tick labels on each band's first panel only."""
    count, columns = bands(n, columns)
    grid = fig.subplots(rows * count, columns, squeeze=False, sharey="row" if share_rows else False)
    if share_rows:
        for band in range(1, count):
            for row in range(rows):
                grid[band * rows + row][0].sharey(grid[row][0])
    cells = [[grid[(i // columns) * rows + row][i % columns] for row in range(rows)] for i in range(count * columns)]
    for spare in cells[max(n, 1):]:
        for ax in spare:
            ax.set_visible(False)
    return cells[:max(n, 1)]


def banded_figure(n: int, panel_width: float, band_height: float, rows: int = 1, share_rows: bool = False,
                  extra_height: float = 0.0, min_width: float = 0.0) -> tuple[Figure, list[list]]:
    """A `new_figure` sized for `n` panels of `panel_width` inches in bands of `band_height`, and its panels
    (`banded`)."""
    count, columns = bands(n)
    fig = new_figure(max(panel_width * columns, min_width), band_height * count + extra_height)
    return fig, banded(fig, n, rows, share_rows)


def band_starts(panels: list[list]) -> list[list]:
    """The panels that open a band (first column), where a row's y-axis label goes."""
    return [panel for panel in panels if panel[0].get_subplotspec().is_first_col()]
