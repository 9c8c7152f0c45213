"""index.html of a root of run or report folders, rebuilt from what is on disk.

Every folder with a result or a study notebook gets a row; an unreadable result is shown as such
instead of stopping the page. Synthetic and pretrained runs are listed in separate tables. A run's row and a
sweep's take model (with dtypes), machine, graph, date and code from one function (`described`), and a legend
under the title says what each column holds.
"""
from __future__ import annotations

import html
from pathlib import Path

from ..record import LABELS

from ..result import Result
from .page import CONTENTS, PRINT, WIDE_TABLES, with_contents
from .provenance import code_lines

LINKS = ("report.html", "study.html", "summary.md", "result.json")
MIXED = "synthetic and pretrained"
TITLES = {"synthetic": "Synthetic model runs", "pretrained": "Pretrained model runs",
          MIXED: "Sweeps over synthetic and pretrained models (each labelled in its report)",
          None: "Runs without a readable result"}
STYLE = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}" + WIDE_TABLES + CONTENTS +
         "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}"
         ".ok{color:#070}.warn{color:#a60;font-weight:bold}.bad{color:#c00;font-weight:bold}"
         ".answer{white-space:pre-line;font-size:90%}.lines{white-space:pre-line}.legend{font-size:90%;max-width:70em}"
         + PRINT)
# What each column holds, as the code above fills it: the page is read without the code beside it.
LEGEND = (
    ("answer", "a run's headline, as its report opens: each graph variant's speed against generate() in steady "
               "state, its first call after a training update, what an update changed beyond drift (against control "
               "cycles), the update's time, break-even and parity with generate(). A sweep's: how many points it "
               "has, then the answer lines its report opens with (a hazard sweep: the verdicts of its update path x "
               "graph policy matrix), the last naming code, software and machine."),
    ("model", "the model, then the dtype it ran in (a sweep: every dtype its points ran in)."),
    ("machine", "the GPU it ran on, or the CPU where it had none (a sweep: each its points ran on)."),
    ("graph", "whether the graph engines could capture and replay CUDA graphs: \"CUDA graph\" where the run was on "
              "a CUDA device, \"no CUDA graph (CPU run)\" where they ran their static-cache step eagerly. Not a "
              "speed-up: those are in answer. A sweep: of its points with a result."),
    ("date", "when the run started, in UTC, as its result records it (before the model loaded). A sweep: the "
             "earliest start among its points with a result."),
    ("code", "the commit the result names (10 hex digits); whether the tree was clean, dirty or unknown, and who "
             "said so: git (git status in the checkout that ran it), ROLLOUT_STUDY_COMMIT (the commit named on a "
             "lent machine, whose .git is not asked, so the tree is unknown) or not recorded (results from before "
             "the source was kept); and the fingerprint of the code that measures (10 hex digits), or not recorded "
             "(results from before it was). Where a sweep's points differ, each is listed with how many name it."),
    ("validity", "valid, or INVALID with the reasons; a curve sweep's failed or invalid points are findings, "
                 "counted here and listed in its report."),
)


def entry(folder: Path) -> dict | None:
    """One folder as the index shows it; None for a folder no run wrote."""
    links = [name for name in LINKS if (folder / name).exists()]
    row = {"folder": folder.name, "label": None, "model": "-", "machine": "-", "date": "-", "graph": "-", "code": "-",
           "validity": "no result", "answer": "", "links": links}
    if (folder / "sweep.json").exists():
        return sweep_entry(folder, row)
    if not (folder / "result.json").exists():
        return row if (folder / "study.ipynb").exists() else None
    from .text import headline_text

    try:
        result = Result.read(folder / "result.json")
        answer = headline_text(result)
    except Exception as err:  # any unreadable entry is shown, never allowed to stop the page
        return {**row, "validity": f"unreadable result: {type(err).__name__}"}
    problems = result.validity_problems()
    return {**row, **described([result]), "label": result.label,
            "validity": "valid" if not problems else "INVALID: " + "; ".join(problems), "answer": answer}


def sweep_entry(folder: Path, row: dict) -> dict:
    """A sweep folder: its answer lines (hazard report) and validity, from its points."""
    from .. import hazards, sweep
    from . import sweep as sweep_report
    from .hazards import answer_lines

    row = {**row, "links": [name for name in ("report.html", "summary.md", "sweep.json") if (folder / name).exists()]}
    try:
        loaded = sweep.load(folder)
        record, results = loaded[0], sweep.finished(loaded[1])
        problems = sweep.validity_problems(folder, loaded)
        if record["spec"].get("report") == "sweep":
            answer = "\n".join(sweep_report.answer_lines(record, loaded[1], folder))
        else:
            answer = "\n".join(answer_lines(hazards.matrix(results), results))
    except Exception as err:  # an unreadable sweep is shown, never allowed to stop the page
        return {**row, "validity": f"unreadable sweep: {type(err).__name__}"}
    labels = list(dict.fromkeys(r.label for r in results))
    # A sweep over synthetic and pretrained models gets a section of its own, each model with its label.
    label = labels[0] if len(labels) == 1 else (MIXED if labels else None)
    return {**row, **described(results), "label": label,
            "validity": _sweep_validity(problems, sweep.point_problems(loaded[1]), len(loaded[1])),
            "answer": f"sweep of {len(loaded[1])} points ({record['spec'].get('report')})\n{answer}"}


def described(results: list[Result]) -> dict:
    """The model (with its dtypes), machine, graph, date and code of a run or of a sweep's points: one function
    for both, so that a single run's row says all that a sweep's does (the index once gave no run's dtype, and
    named the code of sweeps alone)."""
    if not results:
        return {"code": "\n".join(code_lines(results))}
    models = list(dict.fromkeys((r.label, r.model_name) for r in results))
    if len(models) == 1:
        model = f"{models[0][1]}\ndtype {_dtypes(results)}"
    else:
        of = {key: [r for r in results if (r.label, r.model_name) == key] for key in models}
        model = "\n".join(f"{name} ({kind}, dtype {_dtypes(of[kind, name])})" for kind, name in models)
    graphs = sum(r.cuda_graph for r in results)
    graph = ("CUDA graph" if graphs == len(results) else "no CUDA graph (CPU run)" if not graphs
             else f"CUDA graph in {graphs} of {len(results)} points, the others CPU runs")
    # Every start is environment.now(): UTC, one format, so the earliest is the least string.
    starts = [r.metadata["time_start"] for r in results if r.metadata.get("time_start")]
    return {"model": model, "machine": "; ".join(dict.fromkeys(r.machine for r in results)), "graph": graph,
            "date": min(starts) if starts else "-", "code": "\n".join(code_lines(results))}


def _dtypes(results: list[Result]) -> str:
    return ", ".join(sorted({str(r.metadata.get("dtype") or "not recorded") for r in results}))


def _sweep_validity(problems: list[str], failed_points: list[str], points: int) -> str:
    """A curve sweep publishes its failed and invalid points as findings: the row says how many."""
    if problems:
        return "INVALID: " + "; ".join(problems)
    if failed_points:
        return f"valid sweep; {len(failed_points)} of {points} points failed or invalid (listed in its report)"
    return "valid"


def report_folders(root: Path) -> list[Path]:
    """The report folders of a runs or reports root: not the hidden ones a run, a publish or a rebuild works in."""
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def entries(root: Path) -> list[dict]:
    root = Path(root)
    if not root.is_dir():
        return []
    return [row for row in map(entry, report_folders(root)) if row is not None]


def _table(rows: list[dict]) -> str:
    head = ("<tr><th>run</th><th>answer</th><th>model</th><th>machine</th><th>graph</th><th>date</th>"
            "<th>code</th><th>validity</th><th>files</th></tr>")
    body = []
    for r in rows:
        e = {k: html.escape(str(v)) for k, v in r.items() if k != "links"}
        css = "ok" if r["validity"] == "valid" else ("warn" if r["validity"].startswith("valid sweep;") else "bad")
        links = " ".join(f'<a href="{e["folder"]}/{html.escape(name)}">{html.escape(name)}</a>' for name in r["links"])
        body.append(f"<tr><td>{e['folder']}</td><td class=\"answer\">{e['answer']}</td>"
                    f"<td class=\"lines\">{e['model']}</td><td>{e['machine']}</td><td>{e['graph']}</td>"
                    f"<td>{e['date']}</td><td class=\"answer\">{e['code']}</td>"
                    f"<td class=\"{css}\">{e['validity']}</td><td>{links}</td></tr>")
    return f"<table>{head}{''.join(body)}</table>"


def page(rows: list[dict]) -> str:
    # One table per label: the index never lists synthetic and pretrained runs together either.
    sections = [f"<h2>{TITLES[label]}</h2>{_table(group)}"
                for label in (*LABELS, MIXED, None) if (group := [r for r in rows if r["label"] == label])]
    content = "".join(sections) or "<p>No reports yet.</p>"
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>Rollout study reports</title>"
            f"<style>{STYLE}</style></head><body>{with_contents(f'<h1>Rollout study reports</h1>{legend()}{content}')}"
            "</body></html>\n")


def legend() -> str:
    items = "".join(f"<li><b>{html.escape(name)}</b>: {html.escape(text)}</li>" for name, text in LEGEND)
    return f"<ul class=\"legend\">{items}</ul>"
