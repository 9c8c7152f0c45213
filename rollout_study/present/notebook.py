"""The report notebook's content: blocks per label and run, how a notebook shows them, and blocks as markdown.

A section per label (synthetic, pretrained) holds every run of that label; each run opens with its
headline answer, then its validity, then tables and figures. `show` displays blocks as HTML; `blocks_markdown`
writes a sweep's or hazard matrix's summary.md from the very blocks its notebook shows.

Every string that reaches HTML is escaped here: model names, run names, commands and error texts
come from result files and may hold markup, table cells and headings among them; every table's id derives
from the block's position, so rebuilding a report from the same result gives byte-identical HTML.
"""
from __future__ import annotations

import html
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from .. import analysis
from ..record import LABELS
from ..result import Result
from ..stats import whole_range_note
from . import captures, figures, floors, kernels, other_split, policy_gaps, tables
from .text import LABEL_TITLES, NO_GRAPH_NOTE, effects_rule, headline_lines, number, table, timing_line


@dataclass
class Block:
    kind: str  # heading, answer, note, warning, table, figure
    text: str = ""
    body: Any = None  # heading level, answer lines, DataFrame, or PNG path
    key: str = ""  # stable id of the block within the report (its table's id)


def check_parameters(namespace: dict, before: set, expected: dict[str, str]) -> None:
    """A report notebook's parameters, before it reads anything: papermill only warns about a name its parameters
    cell lacks (`-p result_file X` ran as an empty report), so a name set since `before` that is none of `expected`
    is refused, as is a value of another kind (expected: name -> 'text' or 'list of text')."""
    from ..param_values import ParameterError
    from ..params import set_since

    unknown = sorted(set(set_since(namespace, before)) - set(expected))
    if unknown:
        raise ParameterError(f"notebook parameters: unknown parameter(s) {', '.join(unknown)}; known: "
                             f"{', '.join(sorted(expected))}")
    for name, kind in expected.items():
        value = namespace.get(name)
        text = isinstance(value, str) and value.strip() != ""
        if not (text if kind == "text" else isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise ParameterError(f"{name} must be {'a non-empty text' if kind == 'text' else 'a list of texts'}, "
                                 f"got {value!r}")


def read_results(paths: Iterable[str]) -> list[Result]:
    return [Result.read(path) for path in paths]


def group_by_label(results: list[Result]) -> dict[str, list[Result]]:
    """Results split by label, synthetic first; labels without results are left out."""
    groups = {label: [r for r in results if r.label == label] for label in LABELS}
    return {label: group for label, group in groups.items() if group}


def section_heading(label: str, results: list[Result]) -> str:
    names = list(dict.fromkeys(r.model_name for r in results))
    return f"{LABEL_TITLES[label]}: {', '.join(names)}"


def run_blocks(result: Result, figures_dir: str, position: int | None = None) -> list[Block]:
    """Everything shown for one result: the answer first, then validity, tables and figures."""
    one = [result]
    stem = figures.figure_stem(result, position)
    blocks = [Block("heading", f"Run {result.run_name} ({LABEL_TITLES[result.label].lower()} {result.model_name}) "
                               f"on {result.machine}, {result.metadata.get('time_start')}", 3),
              Block("answer", "Answer", headline_lines(result))]
    if not result.cuda_graph:
        blocks.append(Block("warning", NO_GRAPH_NOTE))
    problems = result.validity_problems()
    if problems:
        blocks.append(Block("warning", "INVALID run: " + "; ".join(problems) + ". Details below."))
    else:
        blocks.append(Block("note", "Valid run: every parity check passed and no phase failed."))
    summary = tables.summary_table(one)
    wide = int((summary["spread"] == "wide IQR").sum())
    timing = timing_line(result)
    blocks.append(Block("table", "Latency per phase (medians; IQR over 10% of the median is flagged: "
                                 f"{wide} phase(s) flagged; control: after an update with no optimizer step"
                                 + (f"; {timing}" if timing else "") + ")", summary))
    for kind, caption, make in figures.FIGURES:
        make(result, figures_dir, stem)
        blocks.append(Block("figure", caption, figures.figure_path(figures_dir, stem, kind)))
    untouched = sorted(analysis.untouched_variants(result))
    breakdown_note = (f"; measured calls of {', '.join(untouched)} are untouched, all in other: the split is in the "
                      "instrumented calls below" if untouched else "")
    blocks += [
        Block("table", "Goals of the issues, checked against this result", tables.goals_table(result)),
        Block("table", "Speed-up over generate() per steady phase, with 95% bootstrap intervals"
              + (f"; {note}" if (note := whole_range_note([r for *_, r in analysis.speedup_ratios(result)],
                                                          why=True)) else ""), tables.speedup_table(one)),
        Block("table", f"Steady after an update over steady before ({analysis.before_text(result)}), against "
                       "control cycles. " + effects_rule(), tables.effects_table(one)),
        Block("table", "Break-even: rollouts per update U where the candidate costs no more than its baseline",
              tables.break_even_table(one)),
        Block("table", f"Disjoint breakdown of {figures.LOWER_MEDIAN} (ms; a real call, of an even count the lower "
                       "of the middle two: its total can sit below the median)" + breakdown_note,
              tables.breakdown_table(one)),
        Block("table", "Memory and captures per phase (the whole process's allocator, largest over the phase's calls)",
              tables.memory_table(one)),
        Block("table", "Cold starts: first call per variant in fresh processes", tables.cold_start_table(one)),
        Block("table", "Profile: wall vs summed kernel time (empty on CPU)", tables.profile_table(one)),
        Block("table", floors.TITLE, floors.floors_table(one)),
        Block("note", floors.floor_note(result)),
    ]
    gaps = policy_gaps.gaps_table(one)
    if not gaps.empty:
        blocks.append(Block("table", f"{policy_gaps.TITLE}. {policy_gaps.NOTE}", gaps))
    outside = other_split.split_table(one)
    if not outside.empty:
        blocks += [Block("table", other_split.TITLE, outside), Block("note", other_split.NOTE)]
    longest = kernels.kernels_table(one)
    if not longest.empty:
        blocks += [Block("table", kernels.TITLE, longest), Block("note", kernels.NOTE)]
        tracing = kernels.tracing_note(result)
        if tracing:
            blocks.append(Block("note", tracing))
    graphs = captures.captures_table(one)
    if not graphs.empty:
        blocks += [Block("table", captures.TITLE, graphs), Block("note", captures.NOTE)]
    if untouched:
        blocks.append(Block("table", "Instrumented calls: prefill/decode split, beside untouched calls taken in turns",
                            tables.instrumented_table(one)))
    if result.extra.get("profiles"):
        blocks.append(Block("table", "Profiles before and after each update (profiling process)",
                            tables.profiles_table(one)))
    blocks += [
        Block("table", "Training updates", tables.updates_table(one)),
        Block("table", "Parity against generate() per phase", tables.parity_table(one)),
        Block("table", "Parity mismatches", tables.mismatch_table(one)),
        Block("table", "Failures", tables.failures_table(one)),
        Block("table", "Metadata", tables.metadata_table(result)),
    ]
    return blocks


def section_blocks(label: str, results: list[Result], figures_dir: str) -> list[Block]:
    """The section of one label: its heading, then every run of that label. Empty when there is none."""
    if not results:
        return []
    if tables.require_single_label(results) != label:
        raise tables.MixedLabelsError(f"section {label!r} was given {results[0].label} results")
    blocks = [Block("heading", section_heading(label, results), 2)]
    for position, result in enumerate(results):
        blocks += run_blocks(result, figures_dir, position if len(results) > 1 else None)
    for index, block in enumerate(blocks):
        block.key = f"{label}-{index}"
    return blocks


# -- HTML -------------------------------------------------------------------------------------
LONG_WORD = 40  # characters: no run, variant or phase name has a piece this long, a kernel's name may
BREAKS = re.compile(r"(?<=_)(?=[^_\s])|(?<=\S)(?=\[)")  # html.escape adds neither underscores nor brackets


def table_html(frame: pd.DataFrame, key: str) -> str:
    """A table as a reader sees it: escaped, numbers formatted, text left-aligned and numbers right-aligned, the
    same bytes on every rebuild (its id from the block's position). Written here, not by pandas' Styler, whose
    id and classes on every cell made two thirds of a report's table bytes (the executed notebook holds them
    once more): one class on a number's cell is all the alignment needs."""
    numeric = [pd.api.types.is_numeric_dtype(frame[c]) and not pd.api.types.is_bool_dtype(frame[c])
               for c in frame.columns]
    table_id = f"T_{_escape(key)}"
    head = "".join(f"<th>{_escape(column)}</th>" for column in frame.columns)
    rows = ["<tr>" + "".join(_cell(number(v), right) for v, right in zip(row, numeric)) + "</tr>"
            for row in frame.itertuples(index=False, name=None)]
    return (f"<style>#{table_id} th, #{table_id} td {{text-align: left}} #{table_id} td.n {{text-align: right}}"
            f'</style>\n<table id="{table_id}">\n<thead><tr>{head}</tr></thead>\n<tbody>\n' + "\n".join(rows)
            + "\n</tbody>\n</table>\n")


def _cell(text: str, right: bool) -> str:
    """A number's cell, right-aligned; a text cell with a line-break opportunity after an underscore and before a
    bracket, so that a printed table (page.PRINT) wraps to the paper: first_after_update and
    graph-compiled[recapture] were single words that took a run's phases table 89 pixels past an A4 page. A cell
    with a piece past LONG_WORD characters even so (a kernel's name may have none) may break anywhere there."""
    if right:
        return f'<td class="n">{_escape(text)}</td>'
    long = any(len(piece) > LONG_WORD for word in str(text).split() for piece in BREAKS.split(word))
    opening = '<td class="w">' if long else "<td>"
    return f"{opening}{BREAKS.sub('<wbr>', _escape(text))}</td>"


def _escape(text: str) -> str:
    return html.escape(str(text))


def block_html(block: Block) -> str:
    """The HTML of one block; a figure's HTML is its caption (its PNG is shown beside it)."""
    if block.kind == "heading":
        return f"<h{block.body}>{_escape(block.text)}</h{block.body}>"
    if block.kind == "answer":
        items = "".join(f"<li>{_escape(line)}</li>" for line in block.body)
        return f"<p><b>{_escape(block.text)}</b></p><ul>{items}</ul>"
    if block.kind == "note":
        return f"<p>{_escape(block.text)}</p>"
    if block.kind == "warning":
        return (f'<div style="border:2px solid #c00;padding:6px;font-weight:bold;color:#c00">'
                f"{_escape(block.text)}</div>")
    caption = f"<p><b>{_escape(block.text)}</b></p>"
    if block.kind == "table":
        return caption + ("<p><i>none</i></p>" if block.body.empty else table_html(block.body, block.key))
    return caption


def figure_html(block: Block) -> str:
    """A figure by reference: its PNG's path relative to the folder the notebook runs in (figures/ beside
    the report), so each PNG is stored once. Embedded, it was stored three times, in figures/, in the
    executed notebook and in its HTML: 11 MB for the sweep report of the tiny model's first 61 H200
    points, of which the figures were 6 MB, where the device takes the whole tracked tree in 64 MiB."""
    source = Path(os.path.relpath(block.body)).as_posix()
    if source == ".." or source.startswith("../"):  # a link out of the folder breaks once the folder is published
        raise ValueError(f"figure {block.body!r}: a report's figures must be inside the folder its notebook runs in "
                         f"({os.getcwd()!r}); pass a relative figures_dir such as 'figures'")
    return (f'<img src="{html.escape(source, quote=True)}" alt="{_escape(block.text)}" '
            f'style="max-width:100%">')


def show(blocks: list[Block]) -> None:
    """Display blocks in a notebook: everything as escaped HTML, figures linked from their PNG files."""
    from IPython.display import HTML, display

    for block in blocks:
        display(HTML(block_html(block)))
        if block.kind == "figure":
            display(HTML(figure_html(block)))


# -- markdown ---------------------------------------------------------------------------------
def _prose(text: str) -> str:
    # Error excerpts reach the warnings: a `<class ...>` would vanish as an HTML tag, a `*` or a backtick
    # turn what follows into emphasis or code
    return text.replace("\\", "\\\\").replace("<", "&lt;").replace("`", "\\`").replace("*", "\\*")


def blocks_markdown(blocks: list[Block], title: str | None = None) -> str:
    """summary.md of a report made of blocks: the same blocks its notebook shows, in the same order, as markdown,
    so the two cannot say different things; figures are left out (their PNGs are in figures/). Under `title`, or
    where it is None, the first block (a heading) as the title."""
    if title is None:
        first, *blocks = blocks
        if first.kind != "heading":
            raise ValueError(f"no title: the first block is of kind {first.kind!r}, not a heading")
        title = first.text
    lines = [f"# {_prose(title)}", ""]
    for block in blocks:
        if block.kind == "figure":
            continue
        if block.kind == "heading":
            lines += ["#" * block.body + " " + _prose(block.text)]
        elif block.kind == "answer":
            lines += [f"**{_prose(block.text)}**", ""] + [f"- {_prose(line)}" for line in block.body]
        elif block.kind == "note":
            lines += [_prose(block.text)]
        elif block.kind == "warning":
            lines += [f"**Warning:** {_prose(block.text)}"]
        elif block.kind == "table":
            frame = block.body
            rows = ["none"] if frame.empty else table(list(frame.columns), frame.values.tolist())
            lines += [f"**{_prose(block.text)}**", ""] + rows
        else:
            raise ValueError(f"a block of kind {block.kind!r}: summary.md has no form for it")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
