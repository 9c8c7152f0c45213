"""Plain text: the console summary, the headline answer, and why a result is invalid.

`number` is the one number format of every presentation module: thousands separators, 3 decimals,
small values in 3 significant digits, "-" for what was not measured; no raw float ever reaches a reader.
"""
from __future__ import annotations

import json
import math
import re
from typing import Callable

from .. import analysis, effects
from ..result import Result
from ..stats import interval_name

MIB = 1024 ** 2
NO_GRAPH_NOTE = "no CUDA graph (CPU run): the graph engine ran its static-cache step eagerly"
LABEL_TITLES = {"synthetic": "Synthetic model", "pretrained": "Pretrained model"}


def run_title(result: Result) -> str:
    """Label, model, dtype and run: what every figure title names, so results are never mistaken (the same model
    in fp16 and fp32 read alike without its dtype)."""
    dtype = result.metadata.get("dtype")
    return f"{LABEL_TITLES[result.label]}: {result.model_name}{', ' + dtype if dtype else ''} ({result.run_name})"


def number(value, digits: int = 3) -> str:
    if hasattr(value, "item") and not isinstance(value, str):
        value = value.item()  # a numpy scalar from a DataFrame cell
    # pandas' NA (a blank of a nullable integer column) and NaT (of a time column) by their types' names: this
    # module does without pandas
    if value is None or type(value).__name__ in ("NAType", "NaTType") or (isinstance(value, float)
                                                                          and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        # A value that fixed decimals would round to zero (a small learning rate) keeps 3 significant digits.
        return f"{value:.3g}" if value and digits and round(value, digits) == 0 else f"{value:,.{digits}f}"
    return str(value)


def counted(count, noun: str) -> str:
    """'1 cycle', '2 cycles', '1,024 requests': a count before its noun, singular only for one; a count not
    recorded reads '- cycles'. The noun's plural is its singular with an s (every count word here)."""
    return f"{number(count)} {noun}{'' if count == 1 else 's'}"


def span(values: analysis.Span | None, unit: str = "") -> str:
    """A range as `low..high` (one value when both ends round the same)."""
    if values is None:
        return "-"
    fmt = (lambda v: f"{v:.2f}") if unit == "x" else number
    low, high = fmt(values.low), fmt(values.high)
    return (low if low == high else f"{low}..{high}") + unit


def ratio(value: analysis.Ratio | None, digits: int = 3) -> str:
    """A ratio with its 95% bootstrap interval: `1.004x (95% 1.001..1.007x)`, `(whole range ...)` where that
    interval is its samples' whole range (stats.Ratio.whole_range); `no interval` with one sample each."""
    if value is None:
        return "-"
    point = f"{value.point:.{digits}f}x"
    if not value.has_interval:
        return f"{point} (no interval: one sample each)"
    return f"{point} ({value.bounds_name} {value.low:.{digits}f}..{value.high:.{digits}f}x)"


def phase_name(result_controls: set[int], cycle: int, phase: str) -> str:
    """A phase as tables name it; a control cycle's after-update phases say so."""
    return phase + (" (control)" if cycle in result_controls and phase.endswith("after_update") else "")


def timing_line(result: Result) -> str | None:
    """How many calls the timing check flagged; None for a result without timing checks."""
    checked = analysis.timing_checked(result)
    if not checked:
        return None
    flagged = analysis.timing_flagged(checked)
    return (f"timing check: {len(flagged)} of {len(checked)} calls flagged (measured parts over the measured "
            f"total by more than {analysis.MAX_TIMING_OVERLAP:.0%})")


def _cell(value) -> str:
    # A table cell: numbers formatted, and a pipe in a name or an error cannot split the row.
    return (value if isinstance(value, str) else number(value)).replace("|", "\\|").replace("\n", " ")


def readme_blocks(kind: str) -> re.Pattern:
    """A README's generated blocks of one kind, `<!-- readme-KIND NAME -->` to `<!-- end readme-KIND -->`; NAME is
    the folder under reports/ the block is rendered from."""
    return re.compile(rf"<!-- readme-{kind} (\S+) -->\n.*?<!-- end readme-{kind} -->", re.S)


def fill_blocks(text: str, kind: str, render: Callable[[str], str]) -> str:
    """`text` with every block of `kind` rebuilt as render(NAME): a test that the README is what this returns
    keeps hand-typed figures out of those blocks."""
    return readme_blocks(kind).sub(
        lambda match: f"<!-- readme-{kind} {match.group(1)} -->\n{render(match.group(1))}\n<!-- end readme-{kind} -->",
        text)


def table(header: list[str], rows: list[list]) -> list[str]:
    """A markdown table; cells through `number`."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(map(_cell, row)) + " |" for row in rows]


def align(header: list[str], rows: list[list[str]], left: int = 3) -> list[str]:
    """A fixed-width table whose columns fit their widest cell; the first `left` columns are text."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]

    def line(cells):
        return "  ".join(str(c).ljust(w) if i < left else str(c).rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    head = line(header)
    return [head, "-" * len(head), *map(line, rows)]


def goal_measured(goal: analysis.Goal):
    """A goal's measured value as its threshold reads it: a ratio with its x (12.342x against >= 12.0x)."""
    value = goal.measured
    if goal.threshold.endswith("x") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{number(value)}x"
    return value


def goal_detail(goal: analysis.Goal) -> str:
    """What a goal's measurement came from, or why it was not measured."""
    interval = []
    if goal.interval is not None:
        bounds = (f"{interval_name([goal.interval])} {number(goal.interval.low)}..{number(goal.interval.high)}"
                  if goal.interval.has_interval else "no interval")
        interval = [bounds + ("" if goal.interval_note in ("", "both sides resampled") else f" ({goal.interval_note})")]
    return ", ".join([f"{what} {number(value)}{' ' + unit if unit else ''}" for what, value, unit in goal.inputs]
                     + interval + ([goal.note] if goal.note else []))


# -- headline ---------------------------------------------------------------------------------
def headline_lines(result: Result) -> list[str]:
    """The answer first: speed-up, cost of an update for each policy, break-even, parity, validity."""
    answer = analysis.headline(result)
    # "generate()'s speed", not "faster than": a range's low end may be under 1x (0.68..2.22x)
    lines = [f"{variant}: {span(speedup, 'x')} generate()'s speed in steady state"
             + _bounds(answer.speedup_intervals.get(variant), "over its steady phases")
             for variant, speedup in answer.speedups.items()]
    if answer.first_after_update:
        lines.append("first call after an update: " + "; ".join(
            f"{f.variant} {span(f.ms, ' ms')} ({span(f.over_steady, 'x')} steady{_bounds(f.intervals, '', ', ')})"
            for f in answer.first_after_update)
            + "; intervals resample the steady samples only (the first call is one sample)")
    lines.append(controls_line(answer))
    if answer.first_update_ms is not None or answer.later_updates_ms is not None:
        later = "" if answer.later_updates_ms is None else f", later {span(answer.later_updates_ms, ' ms')}"
        lines.append(f"training update: first {number(answer.first_update_ms)} ms{later}")
    for row in answer.break_even:
        lines.append(f"break-even {row.candidate} vs {row.baseline}: {row.break_even.verdict}")
    lines.append(f"parity: {answer.parity_matched}/{answer.calls} calls matched generate(); "
                 + ("valid" if answer.valid else "INVALID: " + "; ".join(answer.problems)))
    unstable = [(weights, sets, calls) for weights, sets, calls in analysis.generate_token_sets(result) if sets > 1]
    if unstable:
        lines.append("generate() is not reproducible run to run here: its calls with the same weights gave "
                     + "; ".join(f"{sets} different token sets in {calls} calls {weights}"
                                 for weights, sets, calls in unstable)
                     + " (a mismatch at a near-tie may be that noise, not an engine's error)")
    if not result.cuda_graph:
        lines.append(NO_GRAPH_NOTE)
    return lines


def _bounds(hull: analysis.Span | None, where: str, lead: str = " (") -> str:
    if hull is None:
        return "" if lead != " (" else " (no bootstrap interval: one sample each)"
    close = ")" if lead == " (" else ""
    each = ", each its samples' whole range," if hull.whole_range else ""
    return f"{lead}95% bootstrap intervals{each} span {span(hull, 'x')}{' ' + where if where else ''}{close}"


def effects_rule() -> str:
    """How after-update effects are judged, in words; read when used (so a changed margin says so)."""
    return ("Control cycles take no optimizer step: what they move is drift. A real update's effect counts only when "
            "its 95% bootstrap interval clears every control's and it differs by more than "
            f"{effects.STEADY_MARGIN:.0%} either way from every control's after / before (the margin: two replays of "
            "the same kernels in one run differ by a few percent). generate()'s after / before in the same cycle is "
            "context, not part of the verdict: it keeps no graph, so it shows the host's drift while those samples "
            "were taken.")


def _beside_generate(effect) -> str:
    """generate()'s move in the effect's cycle, and whether the effect lies within the margin of it."""
    other = effect.generate_ratio
    if other is None:
        return ""
    # within_margin calls ratios that are not measurable "within" (for a verdict, the cautious reading); here
    # that would print a closeness nobody measured
    points = (effect.ratio.point, other.point)
    close = (f", within {effects.STEADY_MARGIN:.0%} of it"
             if effects.measurable(*points) and effects.within_margin(*points) else "")
    return f" (generate() {other.point:.3f}x in that cycle{close})"


def _unjudged(answer: analysis.Headline) -> str:
    """Real cycles' effects with no verdict (too few samples, or no control of that variant), counted by reason."""
    reasons = [e.verdict for e in answer.effects if not e.control
               and e.verdict in (effects.VERDICT_FEW, effects.VERDICT_NO_CONTROL)]
    if not reasons:
        return ""
    counts = ", ".join(f"{reasons.count(r)} {r}" for r in dict.fromkeys(reasons))
    return f"; without a verdict: {counts}"


def controls_line(answer: analysis.Headline) -> str:
    """Whether any real update moved a steady state beyond what the control cycles show as drift."""
    if not answer.controls:
        return "no control cycle in this run: after-update effects cannot be told from drift"
    beyond = answer.beyond_drift
    if not beyond:
        return (f"after-update effects beyond drift: none ({answer.controls} control cycle(s); every real update "
                f"with a verdict within a control's interval or within {effects.STEADY_MARGIN:.0%} of its after / "
                f"before, the margin{_unjudged(answer)})")
    # generate() keeps no graph: what it moved in the same cycle is the host, and readers should see it beside.
    return "after-update effects beyond drift: " + "; ".join(
        f"{e.variant} c{e.cycle} {ratio(e.ratio)} of steady before{_beside_generate(e)}" for e in beyond
    ) + _unjudged(answer)


def headline_text(result: Result) -> str:
    return "\n".join(headline_lines(result))


# -- console summary --------------------------------------------------------------------------
def console_summary(result: Result) -> str:
    """The per-phase table bench prints after a run, its updates, validity, then the headline."""
    meta = result.metadata
    header = ["variant", "cycle", "phase", "n", "median ms", "IQR ms", "spread", "capture ms", "captures", "tok/s",
              "kernel ms", "parity"]
    rows, controls = [], analysis.control_cycles(result)
    for r in analysis.summary_rows(result):
        profile = result.profile.get(r.variant)
        kernel = profile.kernel_ms if profile and (r.cycle, r.phase) == (profile.cycle, profile.phase) else None
        rows.append([r.variant, str(r.cycle), phase_name(controls, r.cycle, r.phase), str(r.samples.n),
                     number(r.samples.median), number(r.samples.iqr), "wide" if r.samples.wide else "",
                     number(r.parts_ms["capture"]), str(r.captures), number(r.tokens_per_s, 0), number(kernel),
                     "ok" if r.parity_ok else "FAIL"])
    lines = [f"{result.label} | {result.model_name} | {meta.get('device')} {meta.get('dtype')}"
             + ("" if result.cuda_graph else " | no CUDA graph"), *align(header, rows)]
    timing = timing_line(result)
    if timing:
        lines.append(timing)
    for update in sorted(result.updates, key=lambda u: u.cycle):
        kind = " (control: no optimizer step)" if update.extra.get("control") else ""
        if update.loss is None:
            lines.append(f"update cycle {update.cycle}: {update.optimizer} lr={number(update.lr)} "
                         f"FAILED (non-finite){kind}")
        else:
            lines.append(f"update cycle {update.cycle}: {update.optimizer} lr={number(update.lr)} "
                         f"loss={number(update.loss, 4)} {number(update.ms)} ms{kind}")
    lines += ["", "answer:", *("  " + line for line in headline_lines(result))]
    return "\n".join(lines)


def invalid_summary(result: Result) -> str:
    """Why a result is invalid, in one paragraph (the study notebook's last cell raises it)."""
    parts = result.validity_problems()  # derived from the records, the one place validity is decided
    unmatched = result.unmatched_calls()
    if unmatched:
        # The problems name the first mismatch in words; the record adds the reference's top-2 tokens.
        first = unmatched[0]
        if first.parity is None:
            parts.append("the first was compared with no reference (none computed)")
        else:
            parts.append(f"the first mismatch as recorded: {json.dumps(first.parity.mismatch)}")
    return "the result is invalid (written anyway, for inspection): " + "; ".join(parts)
