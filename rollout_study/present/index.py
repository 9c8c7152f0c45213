"""index.html of a root of run or report folders, rebuilt from what is on disk.

Every folder with a result or a study notebook gets a row; an unreadable result is shown as such
instead of stopping the page. Synthetic and pretrained runs are listed in separate tables.
"""
from __future__ import annotations

import html
from pathlib import Path

from ..record import LABELS

from ..result import Result

LINKS = ("report.html", "study.html", "summary.md", "result.json")
MIXED = "synthetic and pretrained"
TITLES = {"synthetic": "Synthetic model runs", "pretrained": "Pretrained model runs",
          MIXED: "Sweeps over synthetic and pretrained models (each labelled in its report)",
          None: "Runs without a readable result"}
STYLE = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
         "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}"
         ".ok{color:#070}.warn{color:#a60;font-weight:bold}.bad{color:#c00;font-weight:bold}"
         ".answer{white-space:pre-line;font-size:90%}")


def entry(folder: Path) -> dict | None:
    """One folder as the index shows it; None for a folder no run wrote."""
    links = [name for name in LINKS if (folder / name).exists()]
    row = {"folder": folder.name, "label": None, "model": "-", "machine": "-", "date": "-", "graph": "-",
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
    return {**row, "label": result.label, "model": result.model_name, "machine": result.machine,
            "date": result.metadata.get("time_start") or "-",
            "validity": "valid" if not problems else "INVALID: " + "; ".join(problems),
            "graph": "CUDA graph" if result.cuda_graph else "no CUDA graph (CPU run)",
            "answer": answer}


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
    first = results[0] if results else None
    labels = list(dict.fromkeys(r.label for r in results))
    # A sweep over synthetic and pretrained models gets a section of its own, each model with its label.
    label = labels[0] if len(labels) == 1 else (MIXED if labels else None)
    models = list(dict.fromkeys((r.label, r.model_name) for r in results))
    named = models[0][1] if len(models) == 1 else "; ".join(f"{name} ({kind})" for kind, name in models)
    return {**row, "label": label, "model": named if first else "-",
            "machine": first.machine if first else "-", "date": first.metadata.get("time_start", "-") if first else "-",
            "graph": "-" if first is None else ("CUDA graph" if first.cuda_graph else "no CUDA graph (CPU run)"),
            "validity": _sweep_validity(problems, sweep.point_problems(loaded[1]), len(loaded[1])),
            "answer": f"sweep of {len(loaded[1])} points ({record['spec'].get('report')})\n{answer}"}


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
            "<th>validity</th><th>files</th></tr>")
    body = []
    for r in rows:
        e = {k: html.escape(str(v)) for k, v in r.items() if k != "links"}
        css = "ok" if r["validity"] == "valid" else ("warn" if r["validity"].startswith("valid sweep;") else "bad")
        links = " ".join(f'<a href="{e["folder"]}/{html.escape(name)}">{html.escape(name)}</a>' for name in r["links"])
        body.append(f"<tr><td>{e['folder']}</td><td class=\"answer\">{e['answer']}</td><td>{e['model']}</td>"
                    f"<td>{e['machine']}</td><td>{e['graph']}</td><td>{e['date']}</td>"
                    f"<td class=\"{css}\">{e['validity']}</td><td>{links}</td></tr>")
    return f"<table>{head}{''.join(body)}</table>"


def page(rows: list[dict]) -> str:
    # One table per label: the index never lists synthetic and pretrained runs together either.
    sections = [f"<h2>{TITLES[label]}</h2>{_table(group)}"
                for label in (*LABELS, MIXED, None) if (group := [r for r in rows if r["label"] == label])]
    content = "".join(sections) or "<p>No reports yet.</p>"
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>Rollout study reports</title>"
            f"<style>{STYLE}</style></head><body><h1>Rollout study reports</h1>{content}</body></html>\n")
