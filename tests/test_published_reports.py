"""Every published report in reports/ is valid, reads back from its raw JSON, names the code that measured it,
and says what its raw JSON says: its summary.md is what the current presentation code renders from the raw
results alone. A hand-edited figure, a report left behind by a presentation change, or raw files lost from
beside a report fail here."""
from pathlib import Path

import pytest

from rollout_study import environment, sweep
from rollout_study.present import hazards, markdown
from rollout_study.present import sweep as sweep_report
from rollout_study.publish import code_problems
from rollout_study.result import Result

REPORTS = Path(__file__).resolve().parent.parent / "reports"
RUNS = sorted(p.parent for p in REPORTS.glob("*/result.json"))
SWEEPS = sorted(p.parent for p in REPORTS.glob("*/sweep.json"))


def _rendered(folder: Path) -> tuple[str, list[str], list[Result]]:
    """(summary.md as the current code renders it, why the folder is invalid, every result in it)."""
    if folder in SWEEPS:
        record, points = sweep.load(folder)
        results = sweep.finished(points)
        text = (hazards.summary(record, results) if record["spec"].get("report") == "hazards"
                else sweep_report.summary(record, points, folder=folder))
        return text, sweep.validity_problems(folder, (record, points)), results
    result = Result.read(folder / "result.json")
    return markdown.summary(result), result.validity_problems(), [result]


@pytest.mark.parametrize("folder", RUNS + SWEEPS, ids=lambda p: p.name)
def test_a_published_report_says_what_its_raw_results_say(folder):
    text, problems, results = _rendered(folder)
    assert problems == []
    assert results
    # After a change to the presentation code: python -m rollout_study report reports/<name>
    assert (folder / "summary.md").read_text(encoding="utf-8") == text, (
        f"{folder.name}/summary.md is not what its raw JSON renders to: rebuild it with "
        f"`python -m rollout_study report reports/{folder.name}`")
    assert (folder / "report.html").is_file()


def test_published_results_name_the_code_that_measured_them():
    if environment._git("rev-parse", "--is-shallow-repository") != "false":
        pytest.skip("a shallow clone (or no git) lacks the commits the results name")
    results = [result for folder in RUNS + SWEEPS for result in _rendered(folder)[2]]
    assert len(results) > len(RUNS) + len(SWEEPS)  # the sweeps' points, each one
    assert code_problems(results, shown=len(results)) == []


def test_every_published_folder_holds_its_raw_results():
    published = sorted(p for p in REPORTS.iterdir() if p.is_dir() and p.name != "probes-h200")
    assert published == sorted(RUNS + SWEEPS)
    assert len(SWEEPS) >= 4 and len(RUNS) >= 7  # the reports the README quotes; none may go missing silently


def test_the_readme_sweep_grids_are_the_committed_sweeps():
    from rollout_study.present import sweep_readme

    text = (REPORTS.parent / "README.md").read_text(encoding="utf-8")
    names = sweep_readme.BLOCK.findall(text)
    assert "sweep-h200-tiny" in names and all((REPORTS / name / "sweep.json").is_file() for name in names)
    assert sweep_readme.fill_readme(text, REPORTS) == text  # after a new publish: fill_readme rewrites them
    grid = sweep_readme.readme_block(*sweep.load(REPORTS / "sweep-h200-tiny"))
    assert "| graph[reuse] | 64 | " in grid and "84 points, 84 valid" in grid
