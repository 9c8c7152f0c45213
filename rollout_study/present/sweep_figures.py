"""The sweep report's figures: one set per model (label and shape) and setting, never two models in one plot.

Each function takes one section's valid points (one model at one setting: sweep_settings.py) and returns a
bare matplotlib Figure, saved as PNG when given a folder. A panel per variant (whatever engines the points ran;
the capture figure a row of panels per variant), one line per new-token count (or per batch, against new tokens);
batch sizes are powers of two, so the batch axis is log 2. The numbers come from sweep_curves.py; failed or
invalid points never reach a figure, whose title names them. The panels, lines, names and titles are
sweep_panels.py's, which the settings figure (sweep_settings_figure.py) and the models side by side
(sweep_scale.py) draw with too.
"""
from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from .. import sweep_curves as curves
from ..sweep_curves import Point
from .drawing import fit_ylabel, log_axis, new_figure
from .sweep_panels import (bars_name, batch_axis, by_tokens, figure_legend, finish, grid, legend, line_colors,
                           log_said, variant_title)
from .text import MIB


def speedup_figure(points: list[Point], figures_dir: str | None = None, not_drawn: str = "") -> Figure:
    rows = curves.speedups(points)
    names = [v for v in curves.variants(points) if v != curves.BASELINE]
    fig, axes = grid(len(names))
    colors = line_colors(p.new_tokens for p in points)
    for ax, variant in zip(axes, names):
        # The bars: 95% bootstrap intervals (with 3 calls a side, their whole range: bars_name names which), wide
        # where generate()'s host-bound calls spread (present/host.py).
        values = by_tokens(ax, rows, variant, lambda r: r.ratio.point, colors, log=False,
                           interval=lambda r: (r.ratio.low, r.ratio.high))
        ax.axhline(curves.CROSSOVER, color="#c00", linestyle="--", linewidth=0.8, label=f"{curves.CROSSOVER}x")
        ax.axhline(1.0, color="black", linewidth=0.6)
        ax.set_ylim(0, max(values + [curves.CROSSOVER]) * 1.1)
        variant_title(ax, variant, points)
        bounds = bars_name([r.ratio for r in rows if r.variant == variant])
        fit_ylabel(ax, f"speed-up over eager generate() (steady, {bounds})")
        batch_axis(ax, [p.batch for p in points])
    legend(fig, axes)
    return finish(fig, points, "steady speed-up vs batch", figures_dir, "speedup", not_drawn)


def latency_figure(points: list[Point], figures_dir: str | None = None, not_drawn: str = "") -> Figure:
    rows = curves.latencies(points)
    names = curves.variants(points)
    fig, axes = grid(len(names))
    colors = line_colors(p.new_tokens for p in points)
    for ax, variant in zip(axes, names):
        by_tokens(ax, rows, variant, lambda r: r.ms_per_token, colors)
        variant_title(ax, variant, points)
        fit_ylabel(ax, f"ms per generated token (steady / (requests x new tokens){log_said(ax, ', ')})", 7)
        batch_axis(ax, [p.batch for p in points])
    legend(fig, axes)
    return finish(fig, points, "per-token latency vs batch", figures_dir, "latency", not_drawn)


# Linear axes: a growth of zero (the pool already large enough) is a value to show, which a log axis cannot
MEMORY_ROWS = (("capture ms (first call)", lambda r: r.capture_ms),
               ("peak allocated - start (MiB)",
                lambda r: None if r.peak_delta_bytes is None else r.peak_delta_bytes / MIB),
               ("reserved growth (MiB; after the call before it in run order, so it moves with the order)",
                lambda r: None if r.reserved_delta_bytes is None else r.reserved_delta_bytes / MIB))


# hf-continuous on a GPU: no graph of its own counted, its capture part the manager's warm-up, which captures them
WARM_UP = "warm-up ms (first call; no graphs counted)"


def capture_figure(points: list[Point], figures_dir: str | None = None, not_drawn: str = "") -> Figure:
    """A row per variant, a column per quantity: six variants in one row of three-high columns made a figure
    25 inches wide, each panel a sliver at page width."""
    rows = curves.captures(points)
    names = [v for v in curves.variants(points) if v != curves.BASELINE]
    fig = new_figure(5.0 * len(MEMORY_ROWS), 2.8 * max(len(names), 1) + 0.8)
    axes = fig.subplots(max(len(names), 1), len(MEMORY_ROWS), squeeze=False)
    colors = line_colors(p.new_tokens for p in points)
    graphs = points[0].result.cuda_graph  # on the CPU no engine captures: its capture part is no warm-up
    for row, variant in enumerate(names):
        mine = [r for r in rows if r.variant == variant]
        counted = any(r.captures for r in mine) or not graphs
        for column, (label, value) in enumerate(MEMORY_ROWS):
            ax = axes[row][column]
            if by_tokens(ax, rows, variant, value, colors, log=False):
                # From 0: a 0.6% move in peak filled a panel from 32.2 to 32.4 MiB; growth falls below 0 where the
                # call before this one held memory this one freed
                ax.axhline(0.0, color="black", linewidth=0.6)
            else:  # no value to tick: a 0 to 1 axis behind the note would read as one
                ax.text(0.5, 0.5, _unrecorded(mine), ha="center", va="center", transform=ax.transAxes,
                        fontsize=8)
                ax.set_yticks([])
            fit_ylabel(ax, label if column or counted else WARM_UP)
            batch_axis(ax, [p.batch for p in points])
            variant_title(ax, variant, points)
    legend(fig, axes.flat)
    return finish(fig, points, "capture time and graph memory of the first call vs batch", figures_dir, "capture",
                  not_drawn)


def _unrecorded(rows) -> str:
    """Why a capture panel has no value: where memory was recorded (its peak), each of the variant's first calls
    opened its run, with no call before it to count reserved growth from (the turn-order probes' first of two
    instances); where none was, no CUDA allocator recorded it."""
    if rows and all(r.peak_delta_bytes is None for r in rows):
        return "not recorded (no CUDA allocator on the CPU)"
    if rows and all(r.opened_run for r in rows):
        return "none: its first call opened the run,\nno call before it to count from"
    return "not recorded"


def after_update_figure(points: list[Point], figures_dir: str | None = None, not_drawn: str = "") -> Figure:
    rows = curves.after_update(points)
    names = sorted({r.variant for r in rows}, key=curves.variant_rank)
    fig, axes = grid(len(names))
    colors = line_colors(p.new_tokens for p in points)
    values = []
    for ax, variant in zip(axes, names):
        values += by_tokens(ax, rows, variant, lambda r: r.first_ms, colors)
    for ax, variant in zip(axes, names):
        if values and max(values) > min(values):  # one scale for every panel: the policies' first calls compare
            log_axis(ax, values)
        variant_title(ax, variant, points)
        fit_ylabel(ax, f"first call after a real update (ms{log_said(ax, ', ')}, one scale for all panels)")
        batch_axis(ax, [p.batch for p in points])
    legend(fig, axes)
    return finish(fig, points, "first call after an update vs batch", figures_dir, "after-update", not_drawn)


NEVER, NEVER_AT = "never (grey band at the top)", 0.94  # axes fraction: above the margin the U axis keeps
# breakeven._disagrees_before's words: a verdict read after the updates from steady states that tie or differ
# the other way where before them they differed (1B buckets, batch 64 / 512 tokens: U=1 from a tie after, 0.893x
# before; tiny hf-continuous, batch 2 / 256 tokens: a tie after, 0.649x before, the same side as the verdict)
BEFORE = "but before any update"
TIE = "pays off from U=1 on its first call alone: the steady states tie (see the table)"
# short enough for two legend columns under three panels (figure_legend): one longer stacked the legend in one column
TURNED = "steady states before any update differ as they do not after it (red ring; its new tokens)"


def break_even_figure(points: list[Point], figures_dir: str | None = None, not_drawn: str = "") -> Figure:
    rows = curves.break_evens(points)
    pairs = list(dict.fromkeys((r.candidate, r.baseline) for r in rows))
    fig, axes = grid(len(pairs))
    colors = line_colors(p.new_tokens for p in points)
    batches = sorted({p.batch for p in points})
    kinds = set()  # the kinds of mark drawn in any panel: the legend names those alone
    for ax, (candidate, baseline) in zip(axes, pairs):
        mine = [r for r in rows if (r.candidate, r.baseline) == (candidate, baseline)]
        values, drawn = _break_even_marks(ax, mine, colors, batches)
        kinds |= drawn
        # "never" and "no difference" have no U: counted here, so an empty batch reads as neither a gap nor a U=1
        unplotted = [r.break_even.verdict.split(":")[0] for r in mine if r.break_even.first_u is None]
        if unplotted:
            counts = ", ".join(f"{verdict} {unplotted.count(verdict)}" for verdict in dict.fromkeys(unplotted))
            ax.text(0.02, 0.02, f"no U (see the table): {counts}", transform=ax.transAxes, fontsize=7,
                    va="bottom")
        if not values:  # no U on its axis: ticks at -0.05 to 0.06 would read as one
            ax.text(0.5, 0.5, "no point pays off for some U\n(see the table)", ha="center", va="center",
                    transform=ax.transAxes, fontsize=8)
            ax.set_yticks([])
        elif max(values) > min(values):
            log_axis(ax, values)
            low, high = ax.get_ylim()
            ax.set_ylim(low / 1.3, high * 1.3)  # a U of 1 on the axis's edge would hide in the spine
        else:  # one U everywhere (1, mostly): whole rollouts from 0, not 0.96-1.04
            ax.set_ylim(0, 2 * values[0])
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        if "never" in drawn:
            _never_band(ax)
        ax.grid(alpha=0.3)
        ax.set_title(f"{candidate} vs {baseline}", fontsize=9)
        fit_ylabel(ax, f"rollouts per update U{log_said(ax, ' (', ')')}")
        batch_axis(ax, batches)  # every panel the sweep's batches, drawn or not
    drawn = {r.new_tokens for r in rows
             if r.break_even.first_u is not None or r.break_even.verdict.startswith("never")}
    if drawn:  # once for the figure: a legend in each panel covered its marks
        handles = [Line2D([], [], color=color, marker="o", label=f"{count} new tokens")
                   for count, color in colors.items() if count in drawn]
        # each kind of mark named only where drawn: the probes' all-U=1 panels listed triangles drawn nowhere
        marks = {"from": Line2D([], [], color="black", marker="o", linestyle="none", label="pays off from U"),
                 "tie": Line2D([], [], color="black", marker="s", markerfacecolor="white", linestyle="none",
                               label=TIE),
                 "up": Line2D([], [], color="black", marker="v", markerfacecolor="white", linestyle="none",
                              label="only up to U"),
                 "never": Line2D([], [], color="black", marker="x", linestyle="none", label=NEVER),
                 "ring": Line2D([], [], marker="o", markersize=11, markerfacecolor="none", markeredgecolor="#c00",
                                linestyle="none", label=TURNED)}
        handles += [handle for kind, handle in marks.items() if kind in kinds]
        figure_legend(fig, handles, [h.get_label() for h in handles])
    return finish(fig, points, "break-even rollouts per update vs batch", figures_dir, "break-even", not_drawn)


def _turned(break_even) -> bool:
    """A U drawn (from, or only up to) whose verdict the steady states before the updates contradict."""
    return break_even.first_u is not None and BEFORE in break_even.verdict


def _break_even_marks(ax, rows, colors, batches) -> tuple[list[float], set[str]]:
    """Per new-token count: "pays off from U" as dots on a line over the sweep's batches that breaks at any
    batch without one (an "only up to U", a "never", an invalid point: a line across it would claim a U there),
    "only up to U" as open triangles pointing down (it pays off at U or fewer), "never" as a cross in a grey
    band at the top, where no U is drawn. A U=1 from the first calls alone, where the steady states tie, is an
    open square on its line. Where the counts share a U (1, mostly) their lines
    coincide: each count's is drawn thinner than the one before, so every colour shows, and its triangles and
    crosses sit a little apart. A U whose verdict the steady states before the updates contradict gets a red
    ring, its new-token count beside it. Returns the U drawn, and the kinds of mark drawn ("from", "tie", "up",
    "never", "ring")."""
    values, drawn, rings = [], set(), []
    for index, (tokens, color) in enumerate(colors.items()):
        shift = 2 ** (0.06 * (index - (len(colors) - 1) / 2))
        line = {r.batch: r.break_even for r in rows if r.new_tokens == tokens}
        froms = [line[b].first_u if b in line and line[b].first_u is not None and line[b].last_u is None
                 else float("nan") for b in batches]
        ups = [(b, line[b].last_u) for b in batches if b in line and line[b].last_u is not None]
        rings += [(b, u, tokens) for b, u in zip(batches, froms) if u == u and _turned(line[b])]
        if any(u == u for u in froms):  # NaN is not equal to itself
            # a U=1 the first calls alone decide (the steady states tie) is a square, as the run report's figure
            # shades nothing there: a dot read as a steady gain the study did not resolve. Open circles were drawn
            # first: the counts' concentric rings read as their concentric dots (the tiny sweep's reuse panel). At
            # the lines' zorder, so the next count's smaller dot or square is drawn over this one, not hidden under it
            ties = [i for i, (b, u) in enumerate(zip(batches, froms)) if u == u and not line[b].steady_differs]
            gains = [i for i, u in enumerate(froms) if u == u and i not in ties]
            size = max(9 - 2 * index, 3)
            ax.plot(batches, froms, marker="o", color=color, markersize=size, linewidth=max(4 - index, 1),
                    markevery=gains)
            if ties:
                ax.scatter([batches[i] for i in ties], [froms[i] for i in ties], marker="s", s=size ** 2,
                           facecolors="white", edgecolors=color, linewidths=1.2, zorder=2)
                drawn.add("tie")
            values += [u for u in froms if u == u]
            drawn |= {"from"} if gains else set()
        if ups:
            # over the lines, filled white: the 1B batch 16 / 512 tokens triangle hid under the U=1 lines of the
            # other counts and its ring read as "pays off"
            ax.scatter([b * shift for b, _ in ups], [u for _, u in ups], marker="v", s=60, facecolors="white",
                       edgecolors=color, linewidths=1.5, zorder=4)
            values += [u for _, u in ups]
            drawn.add("up")
            rings += [(b * shift, u, tokens) for b, u in ups if _turned(line[b])]
        # "never" has no U to draw at: a cross at the panel's top, else the sweep's negative result (a graph slower
        # than generate()) hides as a gap under the other counts' lines
        nevers = [b for b in batches if b in line and line[b].verdict.startswith("never")]
        if nevers:
            ax.scatter([b * shift for b in nevers], [NEVER_AT] * len(nevers), marker="x", color=color,
                       transform=ax.get_xaxis_transform())
            drawn.add("never")
    if rings:
        ax.scatter([b for b, _, _ in rings], [u for _, u, _ in rings], marker="o", s=150, facecolors="none",
                   edgecolors="#c00", linewidths=1.2, zorder=5)
        whose = {}  # where the counts' U coincide (1, mostly) the ring alone did not say whose: one label a place
        for b, u, tokens in rings:
            whose.setdefault((b, u), []).append(tokens)
        for (b, u), counts in whose.items():
            ax.annotate(", ".join(map(str, counts)), (b, u), xytext=(6, 6), textcoords="offset points", fontsize=7,
                        color="#c00")
        drawn.add("ring")
    return values, drawn


def _never_band(ax) -> None:
    """The grey band the "never" crosses sit in, named, with the U axis raised so no U is drawn in it: a cross
    on a U axis alone read as a U near the top."""
    low, high = ax.get_ylim()
    if ax.get_yscale() == "log":
        ax.set_ylim(low, low * (high / low) ** (1 / 0.86))
    else:
        ax.set_ylim(low, low + (high - low) / 0.86)
    ax.fill_between([0, 1], NEVER_AT - 0.05, NEVER_AT + 0.05, color="#eeeeee", zorder=0, transform=ax.transAxes)
    ax.text(-0.015, NEVER_AT, "never", transform=ax.transAxes, fontsize=8, va="center", ha="right")  # a tick's place


def growth_figure(points: list[Point], figures_dir: str | None = None, not_drawn: str = "") -> Figure:
    rows = curves.growth(points)
    names = curves.variants(points)
    fig, axes = grid(len(names))
    colors = line_colors(p.batch for p in points)
    for ax, variant in zip(axes, names):
        for row in [r for r in rows if r.variant == variant]:
            # a batch with one valid token count has no line: its dots named here, else an unlabelled lone dot
            ax.scatter(row.new_tokens, row.steady_ms, color=colors[row.batch], s=14,
                       label=None if row.fit is not None else f"batch {row.batch}: one new-token count, no line")
            if row.fit is not None:
                xs = [min(row.new_tokens), max(row.new_tokens)]
                through = " (through 2 points)" if row.fit.n == 2 else ""  # a line always fits two
                ax.plot(xs, [row.fit.intercept + row.fit.slope * x for x in xs], color=colors[row.batch],
                        label=f"batch {row.batch}: b = {f'{row.fit.slope:#.3g}'.rstrip('.')} ms per new token{through}")
        variant_title(ax, variant, points)
        ax.set_xlabel("new tokens")
        fit_ylabel(ax, "steady median of the whole call (ms)")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # each panel's own slopes: one legend for all could not say whose
            ax.legend(fontsize=7, loc="upper left")
    lines = "; lines: least squares a + b n" if any(r.fit is not None for r in rows) else ""
    by_batch = ", colours: batch size" if len(colors) > 1 else ""
    return finish(fig, points, f"steady time vs new tokens n{lines}{by_batch}", figures_dir, "growth", not_drawn)


# (file kind, caption, function)
# The figures whose x axis is the batch: a section of one batch size would draw each as a point per line (the
# probes' sections, 25 such figures in one report), so they are left out there and a note says so
OVER_BATCH = ("speedup", "latency", "capture", "after-update", "break-even")
OVER_TOKENS = ("growth",)  # likewise for a section of one new-token count (the Ray smoke sweep's 16)
FIGURES = (
    ("speedup", "Steady speed-up over eager generate() vs batch, one line per new-token count, with its 95% "
                "bootstrap interval (dashed: the crossover threshold)", speedup_figure),
    ("latency", "Per-token latency vs batch", latency_figure),
    ("capture", "Capture time and graph memory of the first call vs batch", capture_figure),
    ("after-update", "First call after a real update vs batch, per variant", after_update_figure),
    ("break-even", "Break-even: rollouts per update U from which each variant pays off (dots; open squares: U=1 "
                   "from the first calls alone, the steady states tie), or up to which only (open triangles), vs "
                   "batch; never: crosses in the grey band at the top", break_even_figure),
    ("growth", "Steady time vs new tokens with the fitted line a + b n, per batch", growth_figure),
)
