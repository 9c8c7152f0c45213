"""Tables and figures from result files: everything the report notebook shows.

Pure functions of result dicts (as `results.read` returns them), so a report can be rebuilt anywhere
from committed JSON without a GPU. Synthetic and pretrained results never share a table or a figure:
a function that receives several results refuses mixed labels (`MixedLabelsError`); only
`group_by_label` accepts them, and it splits them.

The notebook composes a section per label from `section_blocks` and shows it with `show`; a block is
a heading, a note, a table (DataFrame) or a figure (PNG saved in the figures folder).
"""
from __future__ import annotations

import json
import math
import os
import re
import statistics
from dataclasses import dataclass
from typing import Any, Iterable

from . import results

LABELS = ("synthetic", "pretrained")
LABEL_TITLES = {"synthetic": "Synthetic model", "pretrained": "Pretrained model"}
TARGET_ORDER = ("eager", "graph[recapture]", "graph[reuse]")
PHASE_ORDER = {phase: rank for rank, phase in enumerate(results.PHASES)}
# Run order inside a cycle: cycle 0 runs first and steady, every cycle runs its update then the
# phases after it (study.py); sorting events by (cycle, stage) reproduces that order.
RUN_STAGE = {"first": 0, "steady": 1, "update": 2, "first_after_update": 3, "steady_after_update": 4}
NO_GRAPH_NOTE = "no CUDA graph (CPU run): the graph engine ran its static-cache step eagerly"
MIB = 1024 ** 2
BREAKDOWN_COLORS = {"allocation": "#8c564b", "warmup": "#ff7f0e", "capture": "#d62728",
                    "prefill": "#2ca02c", "decode": "#1f77b4", "other": "#7f7f7f"}
TARGET_COLORS = {"eager": "#7f7f7f", "graph[recapture]": "#d62728", "graph[reuse]": "#1f77b4"}


class MixedLabelsError(ValueError):
    """Results with different labels (synthetic, pretrained) were passed where one label is required."""


# -- reading and grouping ---------------------------------------------------------------------
def read_results(paths: Iterable[str]) -> list[dict]:
    return [results.read(path) for path in paths]


def label_of(result: dict) -> str:
    return result["metadata"]["label"]


def model_name(result: dict) -> str:
    return result["metadata"]["model"]["name"]


def run_name(result: dict) -> str:
    return result["metadata"].get("run_name") or "run"


def require_single_label(result_list: list[dict]) -> str:
    labels = sorted({label_of(result) for result in result_list})
    if len(labels) > 1:
        raise MixedLabelsError(f"results mix labels {', '.join(labels)}; a table or figure shows one label: "
                               f"split them with group_by_label first")
    if not labels:
        raise ValueError("no results given")
    return labels[0]


def group_by_label(result_list: list[dict]) -> dict[str, list[dict]]:
    """Results split by label, synthetic first; labels without results are left out."""
    groups = {label: [r for r in result_list if label_of(r) == label] for label in LABELS}
    return {label: group for label, group in groups.items() if group}


def section_heading(label: str, result_list: list[dict]) -> str:
    names = list(dict.fromkeys(model_name(r) for r in result_list))
    return f"{LABEL_TITLES[label]}: {', '.join(names)}"


def figure_title(result: dict, what: str) -> str:
    return f"{LABEL_TITLES[label_of(result)]}: {model_name(result)} ({run_name(result)}): {what}"


def machine_name(result: dict) -> str:
    hardware = result["metadata"]["hardware"]
    return hardware["gpu"] if hardware.get("gpu") else f"CPU: {hardware.get('cpu') or 'unknown'}"


def graph_note(result: dict) -> str | None:
    return None if result["metadata"].get("cuda_graph") else NO_GRAPH_NOTE


target_of = results.target_of


def target_rank(target: str) -> tuple:
    return (TARGET_ORDER.index(target), "") if target in TARGET_ORDER else (len(TARGET_ORDER), target)


def targets(result: dict) -> list[str]:
    return sorted({target_of(call) for call in result["calls"]}, key=target_rank)


def phase_key(cycle: int, phase: str) -> tuple[int, int]:
    return cycle, RUN_STAGE[phase]


def phase_groups(result: dict) -> list[tuple[int, str]]:
    """The (cycle, phase) pairs of the run, in run order."""
    return sorted({(call["cycle"], call["phase"]) for call in result["calls"]}, key=lambda cp: phase_key(*cp))


def phase_label(cycle: int, phase: str) -> str:
    return f"c{cycle} {phase.replace('_', ' ')}"


def calls_of(result: dict, target: str, cycle: int, phase: str) -> list[dict]:
    return [c for c in result["calls"] if target_of(c) == target and c["cycle"] == cycle and c["phase"] == phase]


def median_call(calls: list[dict]) -> dict:
    """The sample whose total is the (lower) median: a real call, so its breakdown sums to its total."""
    ordered = sorted(calls, key=lambda call: call["total_ms"])
    return ordered[(len(ordered) - 1) // 2]


def _sorted_rows(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: (r.get("run", ""), phase_key(r["cycle"], r["phase"]), target_rank(r["target"])))


def _frame(rows: list[dict], columns: list[str] | None = None):
    import pandas as pd

    return pd.DataFrame(rows, columns=columns)


def _with_run(result_list: list[dict], rows_of) -> list[dict]:
    """Rows of every result, each with its run name first; refuses mixed labels."""
    require_single_label(result_list)
    rows = []
    for result in result_list:
        rows.extend({"run": run_name(result), **row} for row in rows_of(result))
    return rows


# -- tables -----------------------------------------------------------------------------------
def summary_table(result_list: list[dict]):
    """Median latency per target, cycle and phase, with IQR, the wide-spread flag, captures, tokens/s, parity."""
    def rows_of(result):
        for row in results.summary_rows(result):
            yield {"target": row["target"], "cycle": row["cycle"], "phase": row["phase"], "samples": row["samples"],
                   "median ms": row["median_ms"], "IQR ms": row["iqr_ms"],
                   "spread": "wide IQR" if row["wide_iqr"] else "", "captures": row["captures"],
                   "tokens/s": row["tokens_per_s"], "parity": "ok" if row["parity_ok"] else "MISMATCH"}
    columns = ["run", "target", "cycle", "phase", "samples", "median ms", "IQR ms", "spread", "captures", "tokens/s",
               "parity"]
    return _frame(_sorted_rows(_with_run(result_list, rows_of)), columns)


def breakdown_table(result_list: list[dict]):
    """Disjoint breakdown of each phase's median call (the parts sum to its total)."""
    def rows_of(result):
        for target in targets(result):
            for cycle, phase in phase_groups(result):
                calls = calls_of(result, target, cycle, phase)
                if calls:
                    call = median_call(calls)
                    yield {"target": target, "cycle": cycle, "phase": phase, "total ms": call["total_ms"],
                           **{f"{part} ms": call["breakdown_ms"][part] for part in results.BREAKDOWN}}
    columns = ["run", "target", "cycle", "phase", "total ms"] + [f"{part} ms" for part in results.BREAKDOWN]
    return _frame(_sorted_rows(_with_run(result_list, rows_of)), columns)


def memory_rows(result: dict) -> list[dict]:
    rows = []
    for target in targets(result):
        for cycle, phase in phase_groups(result):
            calls = calls_of(result, target, cycle, phase)
            if not calls:
                continue
            def largest(key):
                values = [c["memory_bytes"].get(key) for c in calls if c["memory_bytes"].get(key) is not None]
                return max(values) / MIB if values else None
            rows.append({"target": target, "cycle": cycle, "phase": phase, "allocated MiB": largest("allocated"),
                         "reserved MiB": largest("reserved"), "peak allocated MiB": largest("peak_allocated"),
                         "captures": sum(c["captures"] for c in calls)})
    return rows


def memory_table(result_list: list[dict]):
    """Allocator statistics per phase (largest over its calls; peak reset per phase) and captures."""
    columns = ["run", "target", "cycle", "phase", "allocated MiB", "reserved MiB", "peak allocated MiB", "captures"]
    return _frame(_sorted_rows(_with_run(result_list, memory_rows)), columns)


def updates_table(result_list: list[dict]):
    def rows_of(result):
        for update in result["updates"]:
            yield {"cycle": update["cycle"], "optimizer": update["optimizer"], "lr": update["lr"],
                   "loss": update["loss"], "ms": update["ms"]}
    return _frame(_with_run(result_list, rows_of), ["run", "cycle", "optimizer", "lr", "loss", "ms"])


def parity_table(result_list: list[dict]):
    """Parity per target and phase: how many calls matched generate() on tokens, masks and offsets."""
    def rows_of(result):
        for target in targets(result):
            for cycle, phase in phase_groups(result):
                calls = calls_of(result, target, cycle, phase)
                checks = [c["parity"] for c in calls]
                if calls:
                    yield {"target": target, "cycle": cycle, "phase": phase, "calls": len(calls),
                           "matched": sum(1 for p in checks if p and p["ok"]),
                           "unchecked": sum(1 for p in checks if p is None)}
    return _frame(_sorted_rows(_with_run(result_list, rows_of)),
                  ["run", "target", "cycle", "phase", "calls", "matched", "unchecked"])


def mismatch_rows(result: dict) -> list[dict]:
    rows = []
    for call in result["calls"]:
        check = call["parity"]
        if check is not None and check["ok"]:
            continue
        rows.append({"target": target_of(call), "cycle": call["cycle"], "phase": call["phase"], "index": call["index"],
                     "tokens": check and check["tokens"], "attention mask": check and check["attention_mask"],
                     "response offsets": check and check["response_offsets"],
                     "details": "no reference computed" if check is None else json.dumps(check["mismatch"])})
    return rows


def mismatch_table(result_list: list[dict]):
    """Every call whose parity check failed (or never ran), with the mismatch details."""
    columns = ["run", "target", "cycle", "phase", "index", "tokens", "attention mask", "response offsets", "details"]
    return _frame(_with_run(result_list, mismatch_rows), columns)


def failure_rows(result: dict) -> list[dict]:
    rows = [{"where": "study", "target": target_of(f) if f.get("engine") else "-", "cycle": f.get("cycle"),
             "phase": f.get("phase"), "error": f.get("error")} for f in result["failures"]]
    for run in result.get("cold_starts") or []:
        if not run.get("valid", True):
            rows.append({"where": f"cold start {run.get('process')}", "target": run.get("target", "-"), "cycle": 0,
                         "phase": "first", "error": run.get("error") or "; ".join(
                             f.get("error", "") for f in run.get("failures") or []) or "parity mismatch"})
    return rows


def failures_table(result_list: list[dict]):
    return _frame(_with_run(result_list, failure_rows), ["run", "where", "target", "cycle", "phase", "error"])


def cold_start_rows(result: dict) -> list[dict]:
    """Min/median/max of each target's first call over fresh processes, beside the in-process first call."""
    firsts = results.cold_start_firsts(result)
    rows = []
    for target in sorted(firsts, key=target_rank):
        samples = firsts[target]
        in_process = calls_of(result, target, 0, "first")
        rows.append({"target": target, "processes": len(samples), "min ms": min(samples),
                     "median ms": statistics.median(samples), "max ms": max(samples),
                     "in-process first ms": in_process[0]["total_ms"] if in_process else None})
    return rows


def cold_start_table(result_list: list[dict]):
    columns = ["run", "target", "processes", "min ms", "median ms", "max ms", "in-process first ms"]
    return _frame(_with_run(result_list, cold_start_rows), columns)


def profile_rows(result: dict) -> list[dict]:
    """Profiled call per target: wall vs summed kernel time, and how far the steady median is above the kernels."""
    medians = {(r["target"], r["cycle"], r["phase"]): r["median_ms"] for r in results.summary_rows(result)}
    rows = []
    for target, record in sorted((result.get("profile") or {}).items(), key=lambda item: target_rank(item[0])):
        steady = medians.get((target, record.get("cycle", 0), record.get("phase", "steady")))
        kernel_ms = record.get("kernel_ms")
        rows.append({"target": target, "wall ms": record.get("wall_ms"), "kernel ms": kernel_ms,
                     "kernels": record.get("kernels"), "steady median ms": steady,
                     "steady / kernel": steady / kernel_ms if steady is not None and kernel_ms else None})
    return rows


def profile_table(result_list: list[dict]):
    columns = ["run", "target", "wall ms", "kernel ms", "kernels", "steady median ms", "steady / kernel"]
    return _frame(_with_run(result_list, profile_rows), columns)


def metadata_rows(result: dict) -> list[tuple[str, Any]]:
    meta = result["metadata"]
    model, hardware, software = meta["model"], meta["hardware"], meta["software"]
    workload, training = meta["workload"], meta.get("training", {})
    git = meta.get("git") or {}
    gpu_memory = hardware.get("gpu_memory_bytes")
    rows = [
        ("label", meta["label"]), ("run", run_name(result)), ("model", model["name"]),
        ("model source", model.get("source")), ("quantization", model.get("quantization")),
        ("architecture", model.get("architecture")),
        ("layers / hidden / heads / KV heads", f"{model.get('layers')} / {model.get('hidden_size')} / "
                                               f"{model.get('heads')} / {model.get('kv_heads')}"),
        ("vocab", model.get("vocab")), ("parameters", model.get("parameters")), ("dtype", meta.get("dtype")),
        ("attention", meta.get("attention_implementation")), ("device", meta.get("device")),
        ("CUDA graph", "yes" if meta.get("cuda_graph") else NO_GRAPH_NOTE),
        ("machine", machine_name(result)), ("GPU capability", hardware.get("gpu_capability")),
        ("GPU memory GiB", round(gpu_memory / 1024 ** 3, 1) if gpu_memory else None),
        ("driver / CUDA", f"{hardware.get('driver')} / {hardware.get('cuda')}"),
        ("CPU / cores", f"{hardware.get('cpu')} / {hardware.get('cores')}"),
        ("software", ", ".join(f"{k} {v}" for k, v in software.items() if v is not None and k != "platform")),
        ("platform", software.get("platform")),
        ("workload", ", ".join(f"{k} {workload.get(k)}" for k in ("requests", "batch_size", "prompt_len",
                                                                    "max_new_tokens", "iterations", "cycles", "seed"))),
        ("batch sizes", workload.get("batch_sizes")), ("true prompt lengths", workload.get("true_prompt_lengths")),
        ("optimizer / lr", f"{training.get('optimizer')} / {training.get('lr')}"),
        ("start-up ms", meta.get("startup")),
        ("git commit", f"{git.get('commit')}{' (dirty)' if git.get('dirty') else ''}"),
        ("command", meta.get("command")), ("time", f"{meta.get('time_start')} to {meta.get('time_end')}"),
    ]
    return [(field, value if isinstance(value, (str, int, float)) or value is None else json.dumps(value))
            for field, value in rows]


def metadata_table(result: dict):
    return _frame([{"field": f, "value": v} for f, v in metadata_rows(result)])


# -- break-even -------------------------------------------------------------------------------
def rollouts_cost(first_ms: float, steady_ms: float, rollouts: int) -> float:
    """Time of `rollouts` calls after one update: the first pays the refresh, the rest are steady."""
    return first_ms + (rollouts - 1) * steady_ms


def break_even_rollouts(base_first_ms: float, base_steady_ms: float, first_ms: float, steady_ms: float,
                        limit: int = 10 ** 9) -> int | None:
    """Smallest rollouts-per-update U at which the candidate costs no more than the baseline; None if never.

    cost(U) = first + (U - 1) * steady for each. The update itself is the same for both and cancels.
    """
    if first_ms <= base_first_ms:
        return 1
    saving_per_rollout = base_steady_ms - steady_ms
    if saving_per_rollout <= 0:
        return None
    rollouts = 1 + math.ceil((first_ms - base_first_ms) / saving_per_rollout)
    # Correct the closed form against the cost itself, so float rounding cannot move it by one.
    while rollouts > 1 and rollouts_cost(first_ms, steady_ms, rollouts - 1) <= rollouts_cost(base_first_ms, base_steady_ms, rollouts - 1):
        rollouts -= 1
    while rollouts_cost(first_ms, steady_ms, rollouts) > rollouts_cost(base_first_ms, base_steady_ms, rollouts):
        rollouts += 1
    return rollouts if rollouts <= limit else None


def costs_after_update(result: dict) -> dict[str, dict[str, float]]:
    """Per target: median first call after an update (over cycles) and median steady sample after updates."""
    costs = {}
    for target in targets(result):
        firsts = [c["total_ms"] for c in result["calls"] if target_of(c) == target and c["phase"] == "first_after_update"]
        steady = [c["total_ms"] for c in result["calls"] if target_of(c) == target and c["phase"] == "steady_after_update"]
        if firsts and steady:
            costs[target] = {"first_ms": statistics.median(firsts), "steady_ms": statistics.median(steady)}
    return costs


def break_even_pairs(available: Iterable[str]) -> list[tuple[str, str]]:
    """(candidate, baseline): each graph policy against eager, and reuse against recapture."""
    present = set(available)
    pairs = [(target, "eager") for target in TARGET_ORDER[1:] if target in present and "eager" in present]
    if {"graph[reuse]", "graph[recapture]"} <= present:
        pairs.append(("graph[reuse]", "graph[recapture]"))
    return pairs


def break_even_rows(result: dict) -> list[dict]:
    costs = costs_after_update(result)
    rows = []
    for candidate, baseline in break_even_pairs(costs):
        own, base = costs[candidate], costs[baseline]
        rollouts = break_even_rollouts(base["first_ms"], base["steady_ms"], own["first_ms"], own["steady_ms"])
        if rollouts is None:
            verdict = "never: its steady state is not faster"
        elif rollouts == 1:
            verdict = "pays off from the first rollout"
        else:
            verdict = f"pays off from {rollouts} rollouts per update"
        rows.append({"candidate": candidate, "baseline": baseline, "candidate first ms": own["first_ms"],
                     "candidate steady ms": own["steady_ms"], "baseline first ms": base["first_ms"],
                     "baseline steady ms": base["steady_ms"], "break-even rollouts": rollouts, "verdict": verdict})
    return rows


def break_even_table(result_list: list[dict]):
    columns = ["run", "candidate", "baseline", "candidate first ms", "candidate steady ms", "baseline first ms",
               "baseline steady ms", "break-even rollouts", "verdict"]
    frame = _frame(_with_run(result_list, break_even_rows), columns)
    frame["break-even rollouts"] = frame["break-even rollouts"].astype("Int64")
    return frame


# -- cumulative timeline ----------------------------------------------------------------------
def timeline(result: dict, target: str):
    """One target's calls and every training update in run order, with the cumulative wall time."""
    events = [{"kind": "rollout", "cycle": c["cycle"], "phase": c["phase"], "index": c["index"], "ms": c["total_ms"]}
              for c in result["calls"] if target_of(c) == target]
    # A failed (non-finite) update has no time; it still marks where the weights changed.
    events += [{"kind": "update", "cycle": u["cycle"], "phase": "update", "index": 0, "ms": u["ms"] or 0.0}
               for u in result["updates"]]
    events.sort(key=lambda e: (phase_key(e["cycle"], e["phase"]), e["index"]))
    frame = _frame(events, ["kind", "cycle", "phase", "index", "ms"])
    frame.insert(0, "step", range(1, len(frame) + 1))
    frame["cumulative ms"] = frame["ms"].cumsum()
    return frame


# -- figures ----------------------------------------------------------------------------------
def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "run"


def figure_stem(result: dict, position: int | None = None) -> str:
    suffix = "" if position is None else f"-{position}"
    return f"{label_of(result)}-{_safe(run_name(result))}{suffix}"


def figure_path(figures_dir: str, stem: str, kind: str) -> str:
    return os.path.join(figures_dir, f"{stem}-{kind}.png")


def _new_figure(width: float, height: float):
    # A bare Figure (no pyplot): nothing global, nothing shown twice by the inline backend.
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _finish(fig, result: dict, what: str, figures_dir: str | None, stem: str | None, kind: str):
    fig.suptitle(figure_title(result, what) + ("" if result["metadata"].get("cuda_graph") else "\n" + NO_GRAPH_NOTE),
                 fontsize=10)
    if figures_dir is not None:
        os.makedirs(figures_dir, exist_ok=True)
        fig.savefig(figure_path(figures_dir, stem or figure_stem(result), kind), dpi=110)
    return fig


quartiles = results.quartiles  # the same quartiles as results.summary_rows


def _wide_range(values: list[float]) -> bool:
    positive = [v for v in values if v and v > 0]
    return bool(positive) and max(positive) / min(positive) > 20


def latency_figure(result: dict, figures_dir: str | None = None, stem: str | None = None):
    """Every sample (dots), the median (bar) and IQR (error bar) per phase and target."""
    fig = _new_figure(11, 4.5)
    ax = fig.add_subplot()
    groups, names = phase_groups(result), targets(result)
    width = 0.8 / max(len(names), 1)
    all_values = []
    for t, target in enumerate(names):
        for g, (cycle, phase) in enumerate(groups):
            samples = [c["total_ms"] for c in calls_of(result, target, cycle, phase)]
            if not samples:
                continue
            all_values += samples
            x = g - 0.4 + width * (t + 0.5)
            median = statistics.median(samples)
            low, high = quartiles(samples)
            ax.errorbar([x], [median], yerr=[[median - low], [high - median]], fmt="_", markersize=14, capsize=4,
                        color=TARGET_COLORS.get(target, "black"), label=target if g == 0 else None)
            spread = [x + width * 0.3 * ((i % 5) - 2) / 2 for i in range(len(samples))]
            ax.scatter(spread, samples, s=8, alpha=0.5, color=TARGET_COLORS.get(target, "black"))
    ax.set_xticks(range(len(groups)), [phase_label(c, p) for c, p in groups], rotation=20, ha="right")
    ax.set_ylabel("wall time per rollout call (ms)")
    if _wide_range(all_values):
        ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _finish(fig, result, "latency per phase (median, IQR, samples)", figures_dir, stem, "latency")


def breakdown_figure(result: dict, figures_dir: str | None = None, stem: str | None = None):
    """Stacked disjoint breakdown of each phase's median call, one panel per target."""
    names, groups = targets(result), phase_groups(result)
    fig = _new_figure(4 * max(len(names), 1), 4.5)
    axes = fig.subplots(1, max(len(names), 1), squeeze=False)[0]
    for ax, target in zip(axes, names):
        bottoms = [0.0] * len(groups)
        medians = [median_call(calls) if (calls := calls_of(result, target, c, p)) else None for c, p in groups]
        for part in results.BREAKDOWN:
            heights = [call["breakdown_ms"][part] if call else 0.0 for call in medians]
            ax.bar(range(len(groups)), heights, bottom=bottoms, color=BREAKDOWN_COLORS[part], label=part)
            bottoms = [b + h for b, h in zip(bottoms, heights)]
        ax.set_title(target, fontsize=9)
        ax.set_xticks(range(len(groups)), [phase_label(c, p) for c, p in groups], rotation=35, ha="right", fontsize=7)
        ax.set_ylabel("ms (median call)")
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=7)
    return _finish(fig, result, "disjoint breakdown of the median call", figures_dir, stem, "breakdown")


def memory_figure(result: dict, figures_dir: str | None = None, stem: str | None = None):
    """Allocated, reserved and peak memory per phase and target (top), captures per phase (bottom)."""
    rows = memory_rows(result)
    names, groups = targets(result), phase_groups(result)
    fig = _new_figure(11, 6)
    top, bottom = fig.subplots(2, 1)
    has_memory = any(r["reserved MiB"] is not None for r in rows)
    kinds = ("allocated MiB", "reserved MiB", "peak allocated MiB")
    width = 0.8 / max(len(names) * len(kinds), 1)
    lookup = {(r["target"], r["cycle"], r["phase"]): r for r in rows}
    for t, target in enumerate(names):
        for k, kind in enumerate(kinds):
            x = [g - 0.4 + width * (t * len(kinds) + k + 0.5) for g in range(len(groups))]
            values = [(lookup.get((target, c, p)) or {}).get(kind) or 0.0 for c, p in groups]
            top.bar(x, values, width=width, color=TARGET_COLORS.get(target), alpha=(1.0, 0.6, 0.3)[k],
                    label=f"{target} {kind.replace(' MiB', '')}")
        counts = [(lookup.get((target, c, p)) or {}).get("captures", 0) for c, p in groups]
        bottom.bar([g - 0.4 + (0.8 / len(names)) * (t + 0.5) for g in range(len(groups))], counts,
                   width=0.8 / len(names), color=TARGET_COLORS.get(target), label=target)
    if not has_memory:
        top.set_yticks([])
        top.text(0.5, 0.5, "no allocator statistics: CPU run", ha="center", va="center", transform=top.transAxes)
    else:
        top.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    top.set_ylabel("MiB")
    top.set_xticks(range(len(groups)), [phase_label(c, p) for c, p in groups], fontsize=7)
    from matplotlib.ticker import MaxNLocator

    bottom.yaxis.set_major_locator(MaxNLocator(integer=True))
    bottom.set_ylim(0, max([1] + [r["captures"] for r in rows]) * 1.15)
    bottom.set_ylabel("captures in phase")
    bottom.set_xticks(range(len(groups)), [phase_label(c, p) for c, p in groups], fontsize=7)
    bottom.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _finish(fig, result, "memory and captures per phase", figures_dir, stem, "memory")


def throughput_figure(result: dict, figures_dir: str | None = None, stem: str | None = None):
    rows = {(r["target"], r["cycle"], r["phase"]): r for r in results.summary_rows(result)}
    names, groups = targets(result), phase_groups(result)
    fig = _new_figure(11, 4)
    ax = fig.add_subplot()
    width = 0.8 / max(len(names), 1)
    for t, target in enumerate(names):
        values = [(rows.get((target, c, p)) or {}).get("tokens_per_s") or 0.0 for c, p in groups]
        ax.bar([g - 0.4 + width * (t + 0.5) for g in range(len(groups))], values, width=width,
               color=TARGET_COLORS.get(target), label=target)
    ax.set_xticks(range(len(groups)), [phase_label(c, p) for c, p in groups], rotation=20, ha="right")
    ax.set_ylabel("generated tokens per second (median)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _finish(fig, result, "tokens per second", figures_dir, stem, "throughput")


def timeline_figure(result: dict, figures_dir: str | None = None, stem: str | None = None):
    """Cumulative wall time of each target's calls plus the updates, in run order; updates marked."""
    fig = _new_figure(11, 4.5)
    ax = fig.add_subplot()
    for target in targets(result):
        frame = timeline(result, target)
        color = TARGET_COLORS.get(target)
        ax.plot(frame["step"], frame["cumulative ms"], drawstyle="steps-post", color=color, label=target)
        updates = frame[frame["kind"] == "update"]
        ax.scatter(updates["step"], updates["cumulative ms"], marker="x", color=color, s=40)
    ax.set_xlabel("event in run order (rollout calls and updates; x = training update)")
    ax.set_ylabel("cumulative wall time (ms)")
    totals = [timeline(result, target)["cumulative ms"].iloc[-1] for target in targets(result)]
    if _wide_range(totals):
        ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _finish(fig, result, "cumulative wall time over the run", figures_dir, stem, "timeline")


def break_even_figure(result: dict, figures_dir: str | None = None, stem: str | None = None):
    """Cost of U rollouts after one update, per target, with each break-even point marked."""
    costs, rows = costs_after_update(result), break_even_rows(result)
    reached = [r["break-even rollouts"] for r in rows if r["break-even rollouts"]]
    horizon = min(max([10] + [2 * u for u in reached]), 1000)
    fig = _new_figure(8, 4.5)
    ax = fig.add_subplot()
    span = range(1, horizon + 1)
    for target, cost in sorted(costs.items(), key=lambda item: target_rank(item[0])):
        ax.plot(list(span), [rollouts_cost(cost["first_ms"], cost["steady_ms"], u) for u in span],
                color=TARGET_COLORS.get(target), label=target)
    for row in rows:
        u = row["break-even rollouts"]
        if u is not None and row["baseline"] == "eager":
            cost = costs[row["candidate"]]
            ax.scatter([u], [rollouts_cost(cost["first_ms"], cost["steady_ms"], u)], color=TARGET_COLORS.get(row["candidate"]),
                       zorder=3)
            ax.annotate(f"U={u}", (u, rollouts_cost(cost["first_ms"], cost["steady_ms"], u)), fontsize=8,
                        textcoords="offset points", xytext=(4, -10))
    ax.set_xlabel("rollouts per update U")
    ax.set_ylabel("first + (U-1) x steady (ms)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _finish(fig, result, "cost per update vs rollouts per update", figures_dir, stem, "break-even")


# (file kind, caption, function): the kind is the PNG name's suffix each function saves under.
FIGURES = (
    ("latency", "Latency per phase and target", latency_figure),
    ("breakdown", "Breakdown of the median call", breakdown_figure),
    ("memory", "Memory and captures", memory_figure),
    ("throughput", "Tokens per second", throughput_figure),
    ("timeline", "Cumulative wall time: calls and updates in run order", timeline_figure),
    ("break-even", "Break-even: rollouts per update", break_even_figure),
)


# -- sections ---------------------------------------------------------------------------------
@dataclass
class Block:
    kind: str  # heading, note, warning, table, figure
    text: str = ""
    body: Any = None  # DataFrame for tables, PNG path for figures, heading level for headings


def targets_table(result: dict):
    import pandas as pd

    from . import targets

    rows = targets.check(result)
    for row in rows:
        row["met"] = {True: "yes", False: "NO", None: "not measured"}[row["met"]]
    return pd.DataFrame(rows, columns=["target", "measured", "threshold", "met", "detail"])


def run_blocks(result: dict, figures_dir: str, position: int | None = None) -> list[Block]:
    """Everything shown for one result, under one label: headings, notes, tables, figures."""
    one = [result]
    meta = result["metadata"]
    stem = figure_stem(result, position)
    blocks = [Block("heading", f"Run {run_name(result)} ({LABEL_TITLES[label_of(result)].lower()} "
                               f"{model_name(result)}) on {machine_name(result)}, {meta.get('time_start')}", 3)]
    if graph_note(result):
        blocks.append(Block("warning", graph_note(result)))
    if result["valid"]:
        blocks.append(Block("note", "Valid run: every parity check passed and no phase failed."))
    else:
        blocks.append(Block("warning", f"INVALID run: {len(mismatch_rows(result))} call(s) without parity, "
                                       f"{len(failure_rows(result))} failure(s). Details below."))
    summary = summary_table(one)
    wide = int((summary["spread"] == "wide IQR").sum())
    blocks.append(Block("table", "Latency per phase (medians; IQR over 10% of the median is flagged: "
                                 f"{wide} phase(s) flagged)", summary))
    for kind, caption, make in FIGURES:
        make(result, figures_dir, stem)
        blocks.append(Block("figure", caption, figure_path(figures_dir, stem, kind)))
    blocks += [
        Block("table", "Targets of the issues, checked against this result", targets_table(result)),
        Block("table", "Break-even rollouts per update (smallest U with candidate cost <= baseline cost)",
              break_even_table(one)),
        Block("table", "Disjoint breakdown of the median call (ms)", breakdown_table(one)),
        Block("table", "Memory and captures per phase", memory_table(one)),
        Block("table", "Cold starts: first call per target in fresh processes", cold_start_table(one)),
        Block("table", "Profile: wall vs summed kernel time (empty on CPU)", profile_table(one)),
        Block("table", "Training updates", updates_table(one)),
        Block("table", "Parity against generate() per phase", parity_table(one)),
        Block("table", "Parity mismatches", mismatch_table(one)),
        Block("table", "Failures", failures_table(one)),
        Block("table", "Metadata", metadata_table(result)),
    ]
    return blocks


def section_blocks(label: str, result_list: list[dict], figures_dir: str) -> list[Block]:
    """The section of one label: its heading, then every run of that label. Empty when there is none."""
    if not result_list:
        return []
    if require_single_label(result_list) != label:
        raise MixedLabelsError(f"section {label!r} was given {label_of(result_list[0])} results")
    blocks = [Block("heading", section_heading(label, result_list), 2)]
    for position, result in enumerate(result_list):
        blocks += run_blocks(result, figures_dir, position if len(result_list) > 1 else None)
    return blocks


def _styled(frame):
    if frame.empty:
        return None
    return frame.style.format(precision=3, na_rep="-", thousands=",").hide(axis="index")


def show(blocks: list[Block]) -> None:
    """Display blocks in a notebook: headings as Markdown, tables as HTML, figures from their PNG files."""
    from IPython.display import HTML, Markdown, display

    for block in blocks:
        if block.kind == "heading":
            display(Markdown(f"{'#' * block.body} {block.text}"))
        elif block.kind == "note":
            display(Markdown(block.text))
        elif block.kind == "warning":
            display(HTML(f'<div style="border:2px solid #c00;padding:6px;font-weight:bold;color:#c00">'
                         f"{_escape(block.text)}</div>"))
        elif block.kind == "table":
            display(Markdown(f"**{block.text}**"))
            styled = _styled(block.body)
            display(styled if styled is not None else Markdown("_none_"))
        elif block.kind == "figure":
            display(Markdown(f"**{block.text}**"))
            display(_image(block.body, block.text))


def _image(path: str, caption: str):
    from IPython.display import Image

    try:
        return Image(filename=path, alt=caption)  # alt text: older IPython has no such argument
    except TypeError:
        return Image(filename=path)


def _escape(text: str) -> str:
    import html

    return html.escape(text)
