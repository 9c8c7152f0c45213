"""The hazard report: the matrix (update path x graph policy, and a column per peer engine), the stale
replays it shows, and the cost of one RL step per path, as tables, markdown and notebook blocks.

A hazard sweep runs one model; its label (synthetic or pretrained) heads every block. Its Run block states what
a single run's does (dtype, device, workload, optimizer), each setting once where every point shares it and per
update path where it differs; the cost table's caption and headings say how many samples each median is over.
"""
from __future__ import annotations

import pandas as pd

from .. import effects, hazards
from ..record import excerpt
from ..result import Result
from . import run_facts
from .markdown import table
from .notebook import Block, blocks_markdown
from .provenance import commit_text, provenance_line
from .text import LABEL_TITLES, counted, fill_blocks

DIAGNOSTIC_NOTE = ("version-only (the engine's former check: version counters alone) and unchecked (no check: "
                   "the control that shows a stale replay) are diagnostic policies, never used for rollouts; "
                   "recapture and reuse are the engine's real policies and must never read STALE.")
PEER_NOTE = ("Columns named after an engine (hf-compile, hf-continuous) are peers without refresh policies: their "
             "verdict is parity after each sync and what their first call after it did (recompiled, re-recorded its "
             "CUDA graphs, rebuilt, or kept); compiles and recordings per sync come from the engine's notes.")


def _counts(values: tuple) -> str:
    return ", ".join("-" if v is None else str(v) for v in values)


def later_updates(cells: list[hazards.HazardCell]) -> str:
    """Which updates a cell's step and sync ms are over (hazards._cell: those after its run's first, else the only
    one), per number of real updates the runs had: a run of 2 cycles has one sample, not a median."""
    def words(n: int) -> str:
        if n == 0:
            return "no update"
        if n == 1:
            return "update 1 of 1, one sample, its one-off set-up included"
        return "update 2 of 2, one sample" if n == 2 else f"median of updates 2..{n}"
    return " or ".join(words(n) for n in sorted({c.syncs for c in cells}))


def _calls(values, kind: str) -> str:
    """A count of calls as a caption reads it: one number, or the range where cells differ."""
    values = list(values)
    low, high = min(values, default=0), max(values, default=0)
    return counted(high, f"{kind} call") if low == high else f"{low} to {high} {kind} calls"


def _median_of(values, kind: str) -> str:
    """"the median of 10 first calls", or "the one first call" where every cell has one (a run of one sync)."""
    values = list(values)
    return f"the one {kind} call" if values and set(values) == {1} else f"the median of {_calls(values, kind)}"


def cells_table(cells: list[hazards.HazardCell]) -> pd.DataFrame:
    """One row per path and policy: verdict, captures, sync, first call after the sync, parity; with peer
    engines, their compilations and CUDA-graph recordings per sync (sweeps without peers read as before)."""
    peers, later = any(c.peer for c in cells), later_updates(cells)
    return pd.DataFrame([{
        "update path": c.path, "policy": c.policy + (" (diagnostic)" if c.diagnostic else ""), "verdict": c.verdict,
        "captures after syncs": c.captures, "syncs": c.syncs, f"sync ms ({later})": c.sync_ms,
        "first call after sync ms": c.first_ms, "steady after sync ms": c.steady_ms, "parity": c.parity,
        **({"compiles per sync": _counts(c.compiles), "CUDA-graph recordings per sync": _counts(c.recordings)}
           if peers else {})}
        for c in cells])


def matrix_table(cells: list[hazards.HazardCell]) -> pd.DataFrame:
    """Verdicts at a glance: paths down, policies across."""
    paths = list(dict.fromkeys(c.path for c in cells))
    policies = list(dict.fromkeys(c.policy for c in cells))
    verdict = {(c.path, c.policy): c.verdict for c in cells}
    return pd.DataFrame([{"update path": p, **{q: verdict.get((p, q), "-") for q in policies}} for p in paths])


def stale_table(cells: list[hazards.HazardCell]) -> pd.DataFrame:
    """Every cell that is not plainly right, with what went wrong first (tokens, top-2 margin)."""
    return pd.DataFrame([{"update path": c.path, "policy": c.policy, "verdict": c.verdict, "first divergence": c.detail}
                         for c in cells if c.detail], columns=["update path", "policy", "verdict", "first divergence"])


def cost_table(cells: list[hazards.HazardCell]) -> pd.DataFrame:
    """One RL step per path and real policy: trainer step + sync + first rollout + (U - 1) steady rollouts.

    Step and sync are over the updates after the run's first, which pays one-off set-up (`later_updates`)."""
    rows, later = [], later_updates([c for c in cells if not c.diagnostic])
    for c in cells:
        if c.diagnostic:
            continue
        row = {"update path": c.path, "policy": c.policy, "verdict": c.verdict, f"step ms ({later})": c.step_ms,
               f"sync ms ({later})": c.sync_ms, "first ms": c.first_ms, "steady ms": c.steady_ms}
        row.update({f"RL step ms, U={u}": c.rl_step_ms(u) for u in hazards.ROLLOUTS_PER_UPDATE})
        rows.append(row)
    return pd.DataFrame(rows)


def cost_caption(cells: list[hazards.HazardCell]) -> str:
    """Where each term of the cost table comes from, with the counts its medians are over: U=64 multiplies the
    steady median by 63, so a reader must see how few calls that median is."""
    priced = [c for c in cells if not c.diagnostic]
    most = max(hazards.ROLLOUTS_PER_UPDATE)
    return (f"Cost of one RL step per update path (real policies): step + sync + first + (U - 1) x steady ms; "
            f"step and sync: {later_updates(priced)} (a run's first update pays one-off set-up); first ms: "
            f"{_median_of((c.first_calls for c in priced), 'first')} (one per sync); steady ms: "
            f"{_median_of((c.steady_calls for c in priced), 'steady')} after the syncs, which U={most} counts "
            f"{most - 1} times")


NAMED = 3  # cells named beside the cheapest; the rest counted


def cheapest_note(cells: list[hazards.HazardCell]) -> str:
    """How to read the cheapest lines; read when used (the margin may change)."""
    one = all(c.syncs <= 2 for c in cells)  # later_updates: a run of 1 or 2 updates prices one step
    return ("cheapest RL step (trainer step + sync + first rollout + U - 1 steady ones; proven cells only): each path "
            f"ran in its own process and its trainer step is that process's {later_updates(cells)}, so the cells "
            f"within {effects.STEADY_MARGIN:.0%} of the cheapest (two replays of the same kernels in one run differ by "
            "a few percent) are named beside it, unranked, and a wider lead may still be that "
            f"{'one sample' if one else 'one process'}'s: the cost table gives each cell's step ms")


def cheapest(cells: list[hazards.HazardCell]) -> list[str]:
    """Per rollouts-per-update U, the cheapest path and policy whose verdict is right, and every other one within
    the margin of it: each path ran in its own process, with single-sample trainer steps and first calls, so a gap
    of a few percent between them is no ranking (on the H200 at U=64, copy or data-copy with reuse came first
    by 0.3 to 1.1%). A wider lead can be the trainer step's one sample too (SmolLM2 at U=8: copy's 6.8% lead is
    its step, 181 ms against data-copy's 250), which the note before the lines says."""
    right = hazards.proven_right(cells)
    lines = []
    for u in hazards.ROLLOUTS_PER_UPDATE:
        costed = sorted(((ms, c) for c in right if (ms := c.rl_step_ms(u)) is not None), key=lambda p: p[0])
        if not costed:
            continue
        (ms, best), rest = costed[0], costed[1:]
        near = [(other, c) for other, c in rest if effects.within_margin(other, ms)]
        line = f"U={u} rollouts per update: {best.path} with {best.policy}, {ms:.1f} ms per RL step"
        if near:
            named = ", ".join(f"{c.path} with {c.policy} {other:.1f}" for other, c in near[:NAMED])
            more = f" and {len(near) - NAMED} more" if len(near) > NAMED else ""
            line += f"; within {effects.STEADY_MARGIN:.0%} of it, unranked: {named}{more}"
        lines.append(line)
    return [cheapest_note(right)] + lines if lines else []


def peer_lines(cells: list[hazards.HazardCell]) -> list[str]:
    """Per peer engine, its verdict on every path, with compilations and recordings per sync."""
    engines = list(dict.fromkeys(c.engine for c in cells if c.peer))
    return [f"{engine} after every sync (compiles / CUDA-graph recordings per sync): " + "; ".join(
        f"{c.path} {c.verdict} ({_counts(c.compiles)} / {_counts(c.recordings)})"
        for c in cells if c.engine == engine) for engine in engines]


def real_policies_line(cells: list[hazards.HazardCell]) -> str:
    """The real policies' cells: how many wrong, how many proven right, and every other cell's verdict."""
    real = [c for c in cells if not c.diagnostic and not c.peer]
    bad = hazards.problems(cells)
    proven = hazards.proven_right(cells)
    others = [f"{c.path} x {c.policy}: {c.verdict}" for c in real if c not in proven and c.kind not in hazards.WRONG]
    return (f"recapture and reuse: {len(bad)} of {len(real)} cells wrong (STALE, WRONG or failed); "
            f"{len(proven)} proven right" + (f"; not proven: {'; '.join(others)}" if others else "")
            + (f"; WRONG: {'; '.join(bad)}" if bad else ""))


def diagnostics_line(cells: list[hazards.HazardCell]) -> str:
    stale = hazards.demonstrated_stale(cells)
    if not any(c.diagnostic for c in cells):
        return "no diagnostic policy ran"
    return (f"stale replays shown by the diagnostic policies: {len(stale)} cell(s)"
            + (": " + ", ".join(f"{c.path} x {c.policy}" for c in stale) if stale else ""))


# A sweep whose every point failed (out of memory, a crash) has no cell to judge: said, not drawn as 0 of 0
NO_RESULT = "no point has a result, so the matrix has no cell (each point's failure is listed)"


def answer_lines(cells: list[hazards.HazardCell], results: list[Result]) -> list[str]:
    if not results:
        return [NO_RESULT, provenance_line(results)]
    lines = [real_policies_line(cells), diagnostics_line(cells)]
    lines.append("generate() after every sync (determinism): "
                 + ", ".join(f"{r.metadata['training'].get('update_path')} {hazards.eager_parity(r)}" for r in results))
    return lines + peer_lines(cells) + cheapest(cells) + [provenance_line(results)]


def _by_path(values: list[str], paths: list[str]) -> str:
    """A fact that differs among the points, per update path (a row of the matrix): the commonest value last, as
    the other rows'."""
    groups: dict[str, list[str]] = {}
    for value, path in zip(values, paths):
        groups.setdefault(value, []).append(path)
    *rest, (common, many) = sorted(groups.items(), key=lambda g: len(g[1]))  # stable: ties keep the run's order
    last = f"{common} for " + (many[0] if len(many) == 1 else f"the other {len(many)}")
    return "; ".join([f"{value} for {', '.join(named)}" for value, named in rest] + [last])


def run_lines(cells: list[hazards.HazardCell], results: list[Result]) -> list[str]:
    """The sweep's Run block: each setting once where every point shares it, one that differs per update path,
    and the matrix's axes (update paths down, one point each; policies and peer engines across)."""
    paths = [r.metadata.get("training", {}).get("update_path", "in-place") for r in results]
    # the update path is the matrix's rows, named in its axes below
    lines = run_facts.lines(results, lambda name, values: "" if name == "update path" else
                            f"{name} by update path: {_by_path(values, paths)}")
    policies = list(dict.fromkeys(c.policy + (" (diagnostic)" if c.diagnostic else "") for c in cells if not c.peer))
    peers = list(dict.fromkeys(c.engine for c in cells if c.peer))
    return lines + [f"the matrix's axes: update path down, one point (its own process) each: {', '.join(paths)}; "
                    f"graph policy across, every one in each point's run: {', '.join(policies)}"
                    + (f"; peer engines beside them: {', '.join(peers)}" if peers else "")]


def title(results: list[Result]) -> str:
    if not results:
        return "No point has a result"
    first = results[0]
    return f"{LABEL_TITLES[first.label]}: {first.model_name} on {first.machine}"


def _failed(record: dict) -> list[str]:
    return [f"{e['slug']}: {excerpt(e.get('error', ''), 150)}" for e in record.get("points", [])
            if e.get("status") == "failed"]


def blocks(record: dict, results: list[Result]) -> list[Block]:
    cells = hazards.matrix(results)
    failed = _failed(record)
    out = [Block("heading", title(results), 2), Block("answer", "Answer", answer_lines(cells, results))]
    if results:
        out.append(Block("answer", "Run", run_lines(cells, results)))
    if failed:
        out.append(Block("warning", "points that did not run: " + "; ".join(failed)))
    if not results:
        return _keyed(out)
    if not results[0].cuda_graph:
        out.append(Block("warning", "no CUDA graph (CPU run): the graph engine ran its steps eagerly, so nothing "
                                    "could go stale; the verdicts show the engine's decisions only"))
    out += [Block("note", DIAGNOSTIC_NOTE)] + ([Block("note", PEER_NOTE)] if any(c.peer for c in cells) else []) + [
            Block("table", "Verdicts: update path x policy", matrix_table(cells)),
            Block("table", "The matrix in full", cells_table(cells)),
            Block("table", "Stale replays, refusals and unproven cells", stale_table(cells)),
            Block("table", cost_caption(cells), cost_table(cells))]
    return _keyed(out)


def _keyed(out: list[Block]) -> list[Block]:
    for index, block in enumerate(out):
        block.key = f"hazards-{index}"
    return out


def summary(record: dict, results: list[Result]) -> str:
    return blocks_markdown(blocks(record, results), f"Hazard matrix: {record['spec'].get('name')}")


def readme_block(record: dict, results: list[Result]) -> str:
    """The README's block for a published hazard sweep: the verdict matrix and the one-line answer."""
    name = record["spec"].get("name")
    if not results:
        return f"Sweep `{name}`: {NO_RESULT} (see `reports/{name}/summary.md`)."
    cells = hazards.matrix(results)
    frame = matrix_table(cells)
    lines = table(list(frame.columns), frame.values.tolist())
    first = results[0]
    lines += ["", f"Sweep `{record['spec'].get('name')}` ({first.label}, {first.model_name}, "
                  f"{first.metadata.get('dtype')}, {first.machine}; "
                  f"{commit_text(first.metadata.get('git'))}): "
                  f"{real_policies_line(cells)}; {diagnostics_line(cells)} "
                  f"(see `reports/{record['spec'].get('name')}/summary.md`)."]
    return "\n".join(lines)


def fill_readme(text: str, reports_root) -> str:
    """README text with every `<!-- readme-hazards NAME -->` block rebuilt from reports/NAME/."""
    from pathlib import Path

    from .. import sweep

    return fill_blocks(text, "hazards",
                       lambda name: readme_block(*sweep.load_results(Path(reports_root) / name)))
