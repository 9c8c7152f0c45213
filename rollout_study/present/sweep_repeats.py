"""The sweep report's points repeated alone, in words and tables: what a repeat contrasts, the answer's line,
a row per repeated point and a row per steady phase compared. The rule and the verdicts are repeats.py's.
"""
from __future__ import annotations

import pandas as pd

from .. import repeats, sweep

HEADING = "Points repeated alone"
PHASES_CAPTION = "Every steady phase compared (low and high: the interval at the rule's level, 1 - 0.05/n)"


def contrast(record: dict) -> str:
    """What a repeat alone contrasts. Side by side only where some invocation ran more than one worker; with one,
    nothing ran beside a point: where the runs alone ran by the sweep's executor (since they run twice), a shift is
    run to run; in older records a Ray point was repeated in a local process, so a shift is also the executor's."""
    invocations = sweep.invocations(record.get("wall")) or [record]  # older records: executor, workers at the top
    workers = [w["workers"] for w in invocations if w.get("workers") is not None]
    executors = sorted({str(w.get("executor")).split()[0] for w in invocations if w.get("executor")})
    alone_by = {e["executor"] for e in (record.get("repeats") or {}).get("points", []) if e.get("executor")}
    if not workers:
        return "between the sweep's run and the run alone (how many points ran at once is not recorded)"
    if max(workers) > 1:
        return f"by running side by side (up to {max(workers)} workers, {' and '.join(executors)} executor)"
    if executors == ["local"] or alone_by == set(executors):
        return (f"run to run: the sweep's run and the runs alone by one executor ({executors[0]}), one at a time, so a "
                "shift is the host's between them, not a neighbour's")
    return (f"between its {' and '.join(executors)} run and the run alone (one worker: nothing ran beside it, so a "
            "shift is the executor's or the host's between the two runs, not a neighbour's)")


def _one_run(verdicts: list[repeats.Verdict]) -> str:
    """Said where a record predates the second run alone: one run cannot tell a neighbour from drift."""
    if any(v.runs == 1 for v in verdicts):
        return (f" (one run alone per point: the sweep ran before repeats made {repeats.ALONE_RUNS} a point, so a "
                "shift may be run-to-run drift, which one run cannot tell apart)")
    return ""


def rule_note(record: dict) -> str:
    """The rule the verdicts apply (this code's), and where the sweep's record keeps another, that it does."""
    kept = (record.get("repeats") or {}).get("rule")
    if not kept or repeats.same_rule(kept):
        return "Rule: " + repeats.RULE
    return (f"Rule: {repeats.RULE}. The sweep's record keeps another, the rule of the code that ran it, which these "
            f"verdicts do not apply: \"{kept}\"")


def answer_line(record: dict, verdicts: list[repeats.Verdict]) -> str:
    ran = [v for v in verdicts if v.verdict != "not repeated"]
    moved = [v.slug for v in ran if v.verdict == "moved"]
    skipped = len(verdicts) - len(ran)
    uncompared = sum(v.verdict == "not compared" for v in ran)  # why: the point table's column
    near = [v.beside for v in ran if v.beside is not None]
    why = "a run without a result, other threads or cores, or too few samples"
    if ran and uncompared == len(ran):  # no verdict at all: said first, not after "0 moved"
        counts = (f"none compared ({why}: the point table says which), so no verdict on whether they moved "
                  f"{contrast(record)}{_one_run(ran)}")
    else:
        counts = (f"{len(moved)} moved" + (f" ({', '.join(moved)})" if moved else "")
                  + f" {contrast(record)}{_one_run(ran)}, {sum(v.verdict == 'not moved' for v in ran)} not moved"
                  + (f", {uncompared} not compared ({why})" if uncompared else ""))
    return (f"repeated alone: {len(ran)} point(s), {counts}"
            + (f"; {sum(1 for n in near if n)} of {len(near)} ran beside other points in the sweep" if near else "")
            + (f"; {skipped} sampled point(s) not repeated (failed or invalid in the sweep's run)" if skipped else ""))


def point_caption(record: dict) -> str:
    return f"Per repeated point: moved {contrast(record)}"


def point_table(verdicts: list[repeats.Verdict]) -> pd.DataFrame:
    rows = []
    for v in verdicts:
        # A moved point's row shows a phase that moved: a larger ratio whose interval holds 1 is noise, not a shift
        worst = max(v.moved or v.shifts, key=lambda s: abs(s.ratio.point - 1), default=None)
        drift = worst and worst.run_to_run
        rows.append({"point": v.slug, "model": v.model or "-", "verdict": v.verdict,
                     "runs alone": v.runs or None, "points beside it": v.beside,
                     "phases moved": f"{len(v.moved)}/{len(v.shifts)}" if v.shifts else "-",
                     "largest shift": worst and f"{worst.variant} c{worst.cycle} {worst.phase}",
                     "sweep / nearest alone": worst and worst.ratio.point, "low": worst and worst.ratio.low,
                     "high": worst and worst.ratio.high, "alone 2 / alone 1": drift and drift.point, "why": v.why})
    return pd.DataFrame(rows).astype({"runs alone": "Int64", "points beside it": "Int64"}) if rows else pd.DataFrame()


def phase_table(verdicts: list[repeats.Verdict]) -> pd.DataFrame:
    return pd.DataFrame([{"point": v.slug, "variant": s.variant, "cycle": s.cycle, "phase": s.phase,
                          "in the sweep ms": s.side.median,
                          **{f"alone {i + 1} ms": a.median for i, a in enumerate(s.alones or (s.alone,))},
                          "sweep / nearest alone": s.ratio.point, "low": s.ratio.low, "high": s.ratio.high,
                          "alone 2 / alone 1": s.run_to_run and s.run_to_run.point, "verdict": s.verdict}
                         for v in verdicts for s in v.shifts])
