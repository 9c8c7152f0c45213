"""Every published report in reports/ is valid, reads back from its raw JSON, names the code that measured it,
and says what its raw JSON says: its summary.md is what the current presentation code renders from the raw
results alone. A hand-edited figure, a report left behind by a presentation change, or raw files lost from
beside a report fail here."""
import html
import os
import re
from pathlib import Path

import pytest

from rollout_study import environment, sweep
from rollout_study.present import hazards, markdown, sweep_readme
from rollout_study.present import sweep as sweep_report
from rollout_study.present.page import CONTENTS_FROM, ID
from rollout_study.publish import code_problems
from rollout_study.result import Result

REPORTS = Path(__file__).resolve().parent.parent / "reports"
README = REPORTS.parent / "README.md"
RUNS = sorted(p.parent for p in REPORTS.glob("*/result.json"))
SWEEPS = sorted(p.parent for p in REPORTS.glob("*/sweep.json"))
DIAGNOSTICS = {"probes-h200"}  # probe outputs, not reports: its README says so, and no index or table reads it
# Published before results recorded their code's fingerprint: their commit is all they name. Every report
# published since must carry the fingerprint, which publish checks against the commit's.
BEFORE_FINGERPRINTS = {"reference-tiny", "pretrained-smollm2", "reference-adamw-bf16", "reference-adamw-fp16",
                       "hazards-tiny", "hazards-smollm2"}


def _results(folder: Path) -> list[Result]:
    return sweep.finished(sweep.load(folder)[1]) if folder in SWEEPS else [Result.read(folder / "result.json")]


@pytest.mark.parametrize("folder", RUNS + SWEEPS, ids=lambda p: p.name)
def test_a_published_report_says_what_its_raw_results_say(folder):
    # The same choice as pipeline.sweep_report_step's: hazard sweeps have their own summary.
    if folder in SWEEPS:
        record, points = sweep.load(folder)
        text = (hazards.summary(record, sweep.finished(points)) if record["spec"].get("report") == "hazards"
                else sweep_report.summary(record, points, folder=folder))
        problems = sweep.validity_problems(folder, (record, points))
    else:
        result = Result.read(folder / "result.json")
        text, problems = markdown.summary(result), result.validity_problems()
    assert problems == []
    assert (folder / "summary.md").read_text(encoding="utf-8") == text, (
        f"{folder.name}/summary.md is not what its raw JSON renders to: after a change to the presentation code, "
        f"rebuild it with `python -m rollout_study report reports/{folder.name}`")
    assert (folder / "report.html").is_file()


@pytest.mark.parametrize("page", [REPORTS / "index.html", *sorted(REPORTS.glob("*/*.html"))],
                         ids=lambda p: str(p.relative_to(REPORTS)))
def test_every_link_within_a_published_page_has_its_target_and_every_section_its_anchor(page):
    text = page.read_text(encoding="utf-8")
    ids = [html.unescape(found.group(2)) for found in ID.finditer(text)]  # as the browser reads them
    assert len(ids) == len(set(ids)), f"{page}: an id given twice"
    assert [a for a in map(html.unescape, re.findall(r'href="#([^"]*)"', text)) if a not in ids] == []
    sections = re.findall(r"<h2([^>]*)>", text)
    assert all(ID.search(attributes) for attributes in sections)
    assert ('<nav class="contents">' in text) == (len(sections) >= CONTENTS_FROM)


def test_published_results_name_the_code_that_measured_them():
    results = {folder.name: _results(folder) for folder in RUNS + SWEEPS}
    assert all(r.metadata.get("git", {}).get("commit") for rs in results.values() for r in rs)
    unfingerprinted = {name for name, rs in results.items()
                       if any(not r.metadata["git"].get("code_sha256") for r in rs)}
    assert unfingerprinted <= BEFORE_FINGERPRINTS, f"published without the code's fingerprint: {unfingerprinted}"
    if environment._git("rev-parse", "--is-shallow-repository") != "false":
        pytest.skip("a shallow clone (or no git) lacks the commits the results name")
    every = [r for rs in results.values() for r in rs]
    assert code_problems(every, shown=len(every)) == []


def test_every_report_the_readme_names_is_published_with_its_raw_results():
    named = set(re.findall(r"reports/([a-z0-9][a-z0-9._-]*)/", README.read_text(encoding="utf-8"))) - DIAGNOSTICS
    assert named and all((REPORTS / name).is_dir() for name in named), sorted(n for n in named
                                                                              if not (REPORTS / n).is_dir())
    published = {p.name for p in REPORTS.iterdir() if p.is_dir()} - DIAGNOSTICS
    assert published == {p.name for p in RUNS + SWEEPS}  # no folder without its raw JSON


def test_the_readme_sweep_grids_are_the_committed_sweeps():
    text = README.read_text(encoding="utf-8")
    assert "sweep-h200-tiny" in sweep_readme.BLOCK.findall(text)
    # After publishing a sweep: python -m rollout_study.present.sweep_readme README.md
    assert sweep_readme.fill_readme(text, REPORTS) == text


def test_the_readme_states_the_margin_the_code_uses():
    # The README's prose types the margin by hand (the reports' text reads effects.STEADY_MARGIN): every way it says
    # it must name the constant's value, so changing the margin without the README fails here.
    from rollout_study.effects import STEADY_MARGIN
    text = " ".join(README.read_text(encoding="utf-8").split())  # prose wraps lines anywhere
    said = (re.findall(r"(\d+)% margin", text) + re.findall(r"within (\d+)% \(the margin\)", text)
            + re.findall(r"more than (\d+)% (?:either way )?from (?:every|the) control", text)
            + re.findall(r"within (\d+)% of (?:it|that|each other|the cheapest)\b", text))
    assert len(said) >= 13 and set(said) == {f"{100 * STEADY_MARGIN:.0f}"}, said
    assert re.findall(r"1/(\d\.\d+) to (\d\.\d+) is no gap", text) == [(f"{1 + STEADY_MARGIN:.2f}",) * 2]


def test_a_linked_raw_result_is_another_reports_own_file_of_the_same_name():
    # publish.link_copies: a whole sweep links the raw results it shares with its published subsets; each link must
    # stay within reports/, name a point file of another report (not a link), and that file must be there
    links = [p for p in REPORTS.glob(f"*/{sweep.POINTS_FOLDER}/*") if p.is_symlink()]
    for link in links:
        named = Path(os.readlink(link))
        assert named.parts[:2] == ("..", "..") and named.parts[3:] == (sweep.POINTS_FOLDER, link.name), link
        target = link.parent / named
        assert named.parts[2] != link.parts[-3] and target.is_file() and not target.is_symlink(), link
    # and one copy of each: no two reports hold the same raw result as two files
    files = {}
    for point in REPORTS.glob(f"*/{sweep.POINTS_FOLDER}/*.json"):
        if not point.is_symlink():
            files.setdefault(point.name, []).append(point)
    copies = [sorted(str(p.relative_to(REPORTS)) for p in same) for same in files.values()
              if len(same) > 1 and len({p.read_bytes() for p in same}) == 1]
    assert not copies, f"{len(copies)} raw results published twice, e.g. {copies[0]}"
