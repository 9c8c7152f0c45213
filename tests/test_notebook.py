"""present/notebook.py: the report's blocks, their escaped HTML, and the committed report notebook."""
from __future__ import annotations

import copy
import html
import os
import re

import nbformat
import pandas as pd
import pytest

from result_fixture import MODELS, make_invalid_result_dict, make_result, make_result_dict, set_samples
from rollout_study.present import notebook, tables, text
from rollout_study.result import Result

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOSTILE = ("<script>alert(1)</script>", "<img src=x onerror=alert(1)>")


def hostile_result() -> Result:
    """The invalid fixture with markup in every string a result file carries."""
    bad = " ".join(HOSTILE)
    data = copy.deepcopy(make_invalid_result_dict())
    meta = data["metadata"]
    meta["model"]["name"] = meta["run_name"] = meta["command"] = meta["time_start"] = bad
    meta["hardware"]["cpu"], meta["software"]["torch"] = bad, bad
    meta["training"]["optimizer"] = data["updates"][0]["optimizer"] = bad
    for call in data["calls"]:
        if not call["parity"]["ok"]:
            call["parity"]["mismatch"]["kind"] = bad
    data["failures"] = [{"engine": "eager", "policy": None, "cycle": 0, "phase": "first", "error": bad}]
    data["cold_starts"][0].update(valid=False, error=bad)
    return Result.from_dict(data)


@pytest.fixture
def quick_figures(monkeypatch):
    """Figures are drawn in test_figures.py; here a stand-in only writes each file, in a fraction of the time."""
    def touch(result, figures_dir, stem):
        os.makedirs(figures_dir, exist_ok=True)
        open(notebook.figures.figure_path(figures_dir, stem, "stub"), "wb").close()
    monkeypatch.setattr(notebook.figures, "FIGURES", (("stub", "A figure", touch),))


def page(blocks) -> str:
    return "".join(notebook.block_html(b) for b in blocks)


def test_each_run_opens_with_its_answer(tmp_path, quick_figures):
    result = make_result()
    blocks = notebook.section_blocks("synthetic", [result], str(tmp_path))
    assert [b.kind for b in blocks[:3]] == ["heading", "heading", "answer"]
    assert blocks[0].text == f"Synthetic model: {MODELS['synthetic']}" and blocks[0].body == 2
    assert blocks[2].body == text.headline_lines(result)
    assert blocks[3].kind == "warning" and blocks[3].text == text.NO_GRAPH_NOTE
    assert blocks[4].kind == "note" and blocks[4].text.startswith("Valid run")
    first_table = next(i for i, b in enumerate(blocks) if b.kind in ("table", "figure"))
    assert first_table > 2


def test_section_saves_every_figure(tmp_path):
    blocks = notebook.section_blocks("synthetic", [make_result(run_name="a"), make_result(run_name="b")], str(tmp_path))
    figures = [b for b in blocks if b.kind == "figure"]
    assert len(figures) == 2 * len(notebook.figures.FIGURES)
    assert all(os.path.isfile(b.body) and os.path.dirname(b.body) == str(tmp_path) for b in figures)
    assert len({b.body for b in figures}) == len(figures)  # two runs never overwrite each other's figures
    assert len({b.key for b in blocks}) == len(blocks)


def test_graph_note_only_without_cuda_graph(tmp_path, quick_figures):
    blocks = notebook.section_blocks("pretrained", [make_result("pretrained", cuda_graph=True)], str(tmp_path))
    assert not any(b.text == text.NO_GRAPH_NOTE for b in blocks)
    assert blocks[0].text.startswith("Pretrained model: ")


def test_invalid_result_is_flagged_before_its_tables(tmp_path, quick_figures):
    blocks = notebook.section_blocks("synthetic", [hostile_result()], str(tmp_path))
    warnings = [i for i, b in enumerate(blocks) if b.kind == "warning" and b.text.startswith("INVALID")]
    assert warnings and warnings[0] < next(i for i, b in enumerate(blocks) if b.kind == "table")


def test_labels_are_never_mixed(tmp_path, quick_figures):
    with pytest.raises(tables.MixedLabelsError):
        notebook.section_blocks("synthetic", [make_result("synthetic"), make_result("pretrained")], str(tmp_path))
    with pytest.raises(tables.MixedLabelsError):
        notebook.section_blocks("synthetic", [make_result("pretrained")], str(tmp_path))
    assert notebook.section_blocks("pretrained", [], "unused") == []
    groups = notebook.group_by_label([make_result("pretrained", "p"), make_result("synthetic", "s")])
    assert list(groups) == ["synthetic", "pretrained"] and [r.run_name for r in groups["pretrained"]] == ["p"]
    assert list(notebook.group_by_label([make_result("pretrained")])) == ["pretrained"]  # the report counts them


def test_no_markup_from_a_result_reaches_the_html(tmp_path, quick_figures):
    result = hostile_result()
    blocks = notebook.section_blocks("synthetic", [result], str(tmp_path))
    rendered = page(blocks)
    for frame in (tables.metadata_table(result), tables.failures_table([result]), tables.mismatch_table([result]),
                  tables.updates_table([result])):
        rendered += notebook.table_html(frame, "t")
    # a heading from a result file (a hazard matrix's columns are its policies' names) and a cell of any type
    rendered += notebook.table_html(pd.DataFrame({" ".join(HOSTILE): [{"k": " ".join(HOSTILE)}]}), "h")
    assert "alert(1)" in rendered  # the text is there, shown as text
    assert not re.search(r"<\s*(script|img)\b", rendered, re.I)
    assert "&lt;script&gt;" in rendered


def test_blocks_read_as_markdown_in_their_order_without_figures_and_without_markup():
    bad = " ".join(HOSTILE) + " a *b* `c`"
    blocks = [notebook.Block("heading", "Sweep s", 2), notebook.Block("answer", "Answer", [bad]),
              notebook.Block("figure", "a figure", "figures/f.png"), notebook.Block("warning", bad),
              notebook.Block("note", "a note"), notebook.Block("table", "empty", pd.DataFrame()),
              notebook.Block("table", "T", pd.DataFrame({"x": [1.23456]}))]
    text_md = notebook.blocks_markdown(blocks)
    assert text_md.startswith("# Sweep s\n\n**Answer**\n\n- &lt;script>")  # the first heading as the title
    assert "a figure" not in text_md and "f.png" not in text_md
    assert r"a \*b\* \`c\`" in text_md and "<script" not in text_md and "<img" not in text_md
    assert "**Warning:** &lt;script>" in text_md and "**empty**\n\nnone\n" in text_md
    assert text_md.endswith("**T**\n\n| x |\n|---|\n| 1.235 |\n")
    assert notebook.blocks_markdown(blocks[1:2], "Title").startswith("# Title\n\n**Answer**")
    with pytest.raises(ValueError, match="the first block is of kind .answer."):
        notebook.blocks_markdown(blocks[1:2])
    with pytest.raises(ValueError, match="a block of kind 'chart'"):
        notebook.blocks_markdown([notebook.Block("chart", "new")], "Title")


def test_markdown_keeps_heading_levels_a_blank_line_after_each_block_and_backslashes_as_text():
    blocks = [notebook.Block("heading", "Section", 2), notebook.Block("table", "T", pd.DataFrame({"x": [1]})),
              notebook.Block("note", r"C:\runs *x*"), notebook.Block("heading", "Run", 3)]
    # a line right after a table would read as its row; a backslash left bare would escape the next character
    assert notebook.blocks_markdown(blocks, "Title <b>") == (
        "# Title &lt;b>\n\n## Section\n\n**T**\n\n| x |\n|---|\n| 1 |\n\n" + r"C:\\runs \*x\*" + "\n\n### Run\n")


def test_a_section_names_each_model_once_and_numbers_its_figures_only_where_it_holds_several_runs(
        tmp_path, quick_figures):
    runs = [make_result(run_name="a"), make_result(run_name="a")]
    two = notebook.section_blocks("synthetic", runs, str(tmp_path))
    assert two[0].text == f"Synthetic model: {MODELS['synthetic']}"
    assert [os.path.basename(b.body) for b in two if b.kind == "figure"] == ["synthetic-a-0-stub.png",
                                                                             "synthetic-a-1-stub.png"]
    one = notebook.section_blocks("synthetic", runs[:1], str(tmp_path))  # a published report's names stay
    assert [os.path.basename(b.body) for b in one if b.kind == "figure"] == ["synthetic-a-stub.png"]


def test_the_latency_caption_counts_the_phases_whose_spread_is_flagged(tmp_path, quick_figures):
    def caption(result):
        blocks = notebook.section_blocks("synthetic", [result], str(tmp_path))
        return next(b.text for b in blocks if b.text.startswith("Latency per phase"))

    assert ": 0 phase(s) flagged;" in caption(make_result())
    wide = set_samples(make_result_dict(), "eager", 0, "steady", [10.0, 20.0, 30.0])  # IQR half the median
    assert ": 1 phase(s) flagged;" in caption(Result.from_dict(wide))


def test_tables_render_formatted_numbers_aligned_and_stable(tmp_path, quick_figures):
    result = Result.read(os.path.join(REPO, "reports", "reference-tiny", "result.json"))
    first, again = (page(notebook.section_blocks("synthetic", [result], str(tmp_path))) for _ in range(2))
    assert first == again  # fixed table ids: rebuilding gives the same bytes
    assert "2,676.466" in first and not re.search(r">-?[\d,]*\.\d{4,}<", first)
    frame = tables.summary_table([result])
    summary = notebook.table_html(frame, "s")
    (row, *_) = re.findall(r"<tr>(<td.*?)</tr>", summary)
    cells = re.findall(r"<td( class=\"n\")?>(.*?)</td>", row)
    variant = ("", frame.iloc[0, 1].replace("[", "<wbr>["))  # text, from the left, breakable before its policy
    assert len(cells) == len(frame.columns) and cells[1] == variant
    assert cells[5] == (' class="n"', text.number(frame.iloc[0, 5]))  # median ms: a number, from the right
    assert "#T_s td.n {text-align: right}" in summary
    flags = notebook.table_html(pd.DataFrame({"ok": [True], "ms": [1.5]}), "b")
    assert '<tr><td>yes</td><td class="n">1.500</td></tr>' in flags  # a yes or no is text, from the left
    assert notebook.block_html(notebook.Block("table", "Failures", pd.DataFrame())) == (
        "<p><b>Failures</b></p><p><i>none</i></p>")  # said, not left blank


def test_a_text_cell_breaks_where_a_printed_table_needs_it_to_and_reads_as_it_was():
    kernel = "k" * 41 + "[a]"  # a piece past LONG_WORD characters between break opportunities
    texts = ["first_after_update", "graph-compiled[recapture]", "fused__scaled_dot", kernel, "<b>_x</b> & y_"]
    rendered = notebook.table_html(pd.DataFrame({"text": texts, "ms": [1234.5678, 1.0, 2.0, 3.0, 4.0]}), "p")
    cells = re.findall(r"<tr><td( class=\"w\")?>(.*?)</td><td class=\"n\">(.*?)</td></tr>", rendered)
    assert [cell[1] for cell in cells] == ["first_<wbr>after_<wbr>update", "graph-compiled<wbr>[recapture]",
                                           "fused__<wbr>scaled_<wbr>dot", "k" * 41 + "<wbr>[a]",
                                           "&lt;b&gt;_<wbr>x&lt;/b&gt; &amp; y_"]
    assert [html.unescape(cell[1].replace("<wbr>", "")) for cell in cells] == texts  # copied, it reads the same
    assert [bool(cell[0]) for cell in cells] == [False, False, False, True, False]  # the long one breaks anywhere
    assert cells[0][2] == "1,234.568" and "<wbr>" not in "".join(cell[2] for cell in cells)  # numbers stay whole


def test_show_displays_every_block(tmp_path, quick_figures, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the notebook's folder: the figures are linked from it
    blocks = notebook.section_blocks("synthetic", [make_result()], "figures")
    notebook.show(blocks)
    out = capsys.readouterr().out
    figures = sum(b.kind == "figure" for b in blocks)
    assert figures == 1 and out.count("<IPython.core.display.HTML object>") == len(blocks) + figures  # its <img>
    assert "Image object" not in out  # linked, not embedded


def test_read_results_round_trip(tmp_path):
    path = make_result().write(tmp_path / "result.json")
    assert notebook.read_results([path])[0].run_name == "fixture"


def test_report_notebook_is_committed_without_outputs_and_uses_present():
    nb = nbformat.read(os.path.join(REPO, "notebooks", "report.ipynb"), as_version=4)
    nbformat.validate(nb)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert all(cell.outputs == [] and cell.execution_count is None for cell in code)
    tagged = [cell for cell in code if "parameters" in cell.metadata.get("tags", [])]
    # the names before the parameters cell, which the first cell after them checks (notebook.check_parameters)
    assert len(tagged) == 1 and tagged[0] is code[1] and "_before_parameters = set(globals())" in code[0].source
    assert "result_files =" in tagged[0].source and "figures_dir =" in tagged[0].source
    assert "notebook.check_parameters(globals(), _before_parameters" in code[2].source
    assert all("rollout_study.report" not in cell.source and "from rollout_study import report" not in cell.source
               for cell in nb.cells)
    assert "from rollout_study.present import notebook" in code[2].source
    assert any("public engines" in cell.source for cell in nb.cells if cell.cell_type == "markdown")
    assert nb.metadata.kernelspec.name == "python3"
    with open(os.path.join(REPO, "notebooks", "report.ipynb"), encoding="utf-8") as handle:
        assert handle.read() == nbformat.writes(nb) + "\n"  # as nbformat writes it


def test_current_run_shows_effects_instruments_and_profiles(tmp_path, quick_figures):
    from result_fixture import make_result_dict, with_control, with_instruments
    result = Result.from_dict(with_instruments(with_control(make_result_dict(cuda_graph=True)), flagged=1))
    blocks = notebook.section_blocks("synthetic", [result], str(tmp_path))
    captions = [b.text for b in blocks if b.kind == "table"]
    assert any(c.startswith("Instrumented calls") for c in captions)
    assert any(c.startswith("Profiles before and after each update") for c in captions)
    assert any(c.startswith("Steady after an update over steady before") for c in captions)
    assert any("measured calls of eager are untouched" in c for c in captions)
    assert any("timing check: 1 of 48 calls flagged" in c for c in captions)
    old = [b.text for b in notebook.section_blocks("synthetic", [make_result()], str(tmp_path)) if b.kind == "table"]
    assert not any(c.startswith(("Instrumented calls", "Profiles before")) or "untouched" in c for c in old)


def test_the_breakdown_table_names_the_lower_median_call_it_splits(tmp_path, quick_figures):
    # The table's total of an even count sits below the median of the latency figure and the tables beside it
    data = make_result_dict()
    data["calls"] = [c for c in data["calls"] if not (c["engine"] == "eager" and c["phase"] == "steady"
                                                      and c["index"] == 2)]
    result = Result.from_dict(set_samples(data, "eager", 0, "steady", [40.0, 60.0]))
    block = next(b for b in notebook.section_blocks("synthetic", [result], str(tmp_path))
                 if b.text.startswith("Disjoint breakdown"))
    assert block.text.startswith("Disjoint breakdown of the lower-median call (ms; a real call, of an even count "
                                 "the lower of the middle two: its total can sit below the median)")
    steady = block.body[(block.body["variant"] == "eager") & (block.body["phase"] == "steady")]
    assert list(steady["total ms"]) == [40.0]


def test_phase_labels_name_control_updates():
    assert notebook.figures.phase_label(0, "steady_after_update", {0}) == "c0 steady after control update"
    assert notebook.figures.phase_label(1, "steady_after_update", {0}) == "c1 steady after update"
    assert notebook.figures.phase_label(0, "steady", {0}) == "c0 steady"


def test_each_run_shows_its_floors_table_and_note_after_the_profile(tmp_path, quick_figures):
    from result_fixture import make_result_dict
    from rollout_study.present import floors
    data = make_result_dict(cuda_graph=True)
    data["metadata"]["model"]["parameter_bytes"] = 4_000_000
    data["bandwidth"] = {"method": "fixture", "gb_per_s": 2000.0, "median_gb_per_s": 1800.0}
    for result in (Result.from_dict(data), make_result()):
        blocks = notebook.section_blocks("synthetic", [result], str(tmp_path))
        at = [b.text for b in blocks].index(floors.TITLE)
        assert blocks[at - 1].text.startswith("Profile: wall vs summed kernel time") and blocks[at].kind == "table"
        assert blocks[at + 1].kind == "note" and blocks[at + 1].text == floors.floor_note(result)
        html = notebook.block_html(blocks[at])
        assert ("<td" in html and "312.500" in html) == result.cuda_graph  # wall / floor of graph: 10 / 0.032 ms


def test_a_figure_is_linked_by_its_path_from_the_notebooks_folder_and_its_caption_escaped(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    caption = " ".join(HOSTILE)
    linked = notebook.figure_html(notebook.Block("figure", caption, os.path.join("figures", 'a "b".png')))
    assert linked.startswith('<img src="figures/a &quot;b&quot;.png" alt="&lt;script&gt;')
    assert len(re.findall(r"<\s*(script|img)\b", linked, re.I)) == 1  # its own <img> only
    absolute = notebook.figure_html(notebook.Block("figure", "c", str(tmp_path / "figures" / "x.png")))
    assert absolute.startswith('<img src="figures/x.png"') and str(tmp_path) not in absolute  # no machine path


def test_a_figure_outside_the_notebooks_folder_is_refused_rather_than_linked_where_it_breaks(tmp_path, monkeypatch):
    (tmp_path / "run").mkdir()
    monkeypatch.chdir(tmp_path / "run")
    with pytest.raises(ValueError, match="inside the folder its notebook runs in"):
        notebook.figure_html(notebook.Block("figure", "c", str(tmp_path / "elsewhere" / "x.png")))
    with pytest.raises(ValueError, match="figures_dir such as 'figures'"):
        notebook.figure_html(notebook.Block("figure", "c", os.path.join("..", "figures", "x.png")))
