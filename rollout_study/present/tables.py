"""The report's tables as pandas DataFrames, built from `analysis` rows.

Values stay numbers here (the notebook formats them when it shows a table). Synthetic and
pretrained results never share a table: a table of several results refuses mixed labels
(`MixedLabelsError`); split them with `notebook.group_by_label` first.
"""
from __future__ import annotations

import json

import pandas as pd

from .. import analysis
from ..engines import variant_rank
from ..record import PARTS, run_order
from ..result import Result
from .provenance import code_text
from .text import MIB, NO_GRAPH_NOTE, goal_detail, goal_measured, number

KEY = ["run", "variant", "cycle", "phase"]


class MixedLabelsError(ValueError):
    """Results with different labels (synthetic, pretrained) were passed where one label is required."""


def require_single_label(results: list[Result]) -> str:
    labels = sorted({result.label for result in results})
    if len(labels) > 1:
        raise MixedLabelsError(f"results mix labels {', '.join(labels)}; a table or figure shows one label: "
                               f"split them with group_by_label first")
    if not labels:
        raise ValueError("no results given")
    return labels[0]


def _frame(results: list[Result], rows_of, columns: list[str], by_phase: bool = False) -> pd.DataFrame:
    """Rows of every result, each with its run name first; refuses mixed labels."""
    require_single_label(results)
    rows = [{"run": result.run_name, **row} for result in results for row in rows_of(result)]
    if by_phase:
        rows.sort(key=lambda r: (r["run"], run_order(r["cycle"], r["phase"]), variant_rank(r["variant"])))
    return pd.DataFrame(rows, columns=columns)


def typed_frame(results: list[Result], rows_of, columns: list[str], counts: tuple[str, ...],
                measures: tuple[str, ...]) -> pd.DataFrame:
    """Rows (lists in `columns` order) of every result after its run name; refuses mixed labels. Counts stay
    whole numbers and measures floats, both keeping gaps (NA, NaN) where a run measured nothing."""
    require_single_label(results)
    frame = pd.DataFrame([[result.run_name, *row] for result in results for row in rows_of(result)],
                         columns=["run"] + columns)
    for column in counts:
        frame[column] = frame[column].astype("Int64")
    for column in measures:
        frame[column] = frame[column].astype("float64")
    return frame


def _phase_calls(result: Result):
    """(variant, cycle, phase, calls) of every measured phase."""
    for variant in result.variants():
        for cycle, phase in result.phase_groups():
            calls = result.calls_of(variant, cycle, phase)
            if calls:
                yield variant, cycle, phase, calls


def summary_table(results: list[Result]) -> pd.DataFrame:
    """Median latency per variant, cycle and phase, with IQR, the wide-spread flag, captures, tokens/s, parity;
    `control`: the phase follows a control update (no optimizer step); `timing flagged`: calls whose parts
    exceed their measured total by over 1% (None where the result has no timing check)."""
    def rows_of(result):
        controls, checked = analysis.control_cycles(result), bool(analysis.timing_checked(result))
        for r in analysis.summary_rows(result):
            calls = result.calls_of(r.variant, r.cycle, r.phase)
            yield {"variant": r.variant, "cycle": r.cycle, "phase": r.phase, "samples": r.samples.n,
                   "median ms": r.samples.median, "IQR ms": r.samples.iqr,
                   "spread": "wide IQR" if r.samples.wide else "", "captures": r.captures,
                   "tokens/s": r.tokens_per_s, "parity": "ok" if r.parity_ok else "MISMATCH",
                   "control": r.cycle in controls and r.phase.endswith("after_update"),
                   "timing flagged": len(analysis.timing_flagged(calls)) if checked else None}
    frame = _frame(results, rows_of, KEY + ["samples", "median ms", "IQR ms", "spread", "captures", "tokens/s",
                                            "parity", "control", "timing flagged"], by_phase=True)
    frame["timing flagged"] = frame["timing flagged"].astype("Int64")
    return frame


def breakdown_table(results: list[Result]) -> pd.DataFrame:
    """Disjoint breakdown of each phase's lower-median call (a real call, so the parts sum to its total)."""
    def rows_of(result):
        for variant, cycle, phase, calls in _phase_calls(result):
            call = analysis.median_call(calls)
            yield {"variant": variant, "cycle": cycle, "phase": phase, "total ms": call.total_ms,
                   **{f"{part} ms": call.breakdown_ms[part] for part in PARTS}}
    return _frame(results, rows_of, KEY + ["total ms"] + [f"{part} ms" for part in PARTS], by_phase=True)


MEMORY_COLUMNS = {"allocated": "allocated MiB", "reserved": "reserved MiB", "peak_allocated": "peak allocated MiB"}


def memory_rows(result: Result) -> list[dict]:
    """Allocator statistics per phase in MiB (largest over its calls; peak reset before each call) and captures."""
    rows = []
    for variant, cycle, phase, calls in _phase_calls(result):
        sizes = {column: analysis.largest_memory(calls, kind) for kind, column in MEMORY_COLUMNS.items()}
        rows.append({"variant": variant, "cycle": cycle, "phase": phase,
                     **{column: None if size is None else size / MIB for column, size in sizes.items()},
                     "captures": sum(c.captures for c in calls)})
    return rows


def memory_table(results: list[Result]) -> pd.DataFrame:
    return _frame(results, memory_rows, KEY + list(MEMORY_COLUMNS.values()) + ["captures"], by_phase=True)


def updates_table(results: list[Result]) -> pd.DataFrame:
    """Each update: its path, the trainer step and the sync timed apart, and what the sync did to the
    rollout tensors (addresses moved, versions bumped) and to the tokens (requests whose tokens changed)."""
    def rows_of(result):
        for u in result.updates:
            change = u.extra.get("change") or {}
            yield {"cycle": u.cycle, "control": bool(u.extra.get("control")),
                   "update path": u.extra.get("update_path", "in-place"), "optimizer": u.optimizer, "lr": u.lr,
                   "loss": u.loss, "ms": u.ms, "step ms": u.extra.get("step_ms"), "sync ms": u.extra.get("sync_ms"),
                   "tensors moved": change.get("moved"), "versions bumped": change.get("version_bumped"),
                   "new model object": None if not change else not change.get("same_object"),
                   "requests changed": u.extra.get("requests_changed")}
    return _frame(results, rows_of, ["run", "cycle", "control", "update path", "optimizer", "lr", "loss", "ms",
                                     "step ms", "sync ms", "tensors moved", "versions bumped", "new model object",
                                     "requests changed"])


def parity_table(results: list[Result]) -> pd.DataFrame:
    """Parity per variant and phase: how many calls matched generate() on tokens, masks and offsets."""
    def rows_of(result):
        for variant, cycle, phase, calls in _phase_calls(result):
            yield {"variant": variant, "cycle": cycle, "phase": phase, "calls": len(calls),
                   "matched": sum(c.parity_ok for c in calls), "unchecked": sum(c.parity is None for c in calls)}
    return _frame(results, rows_of, KEY + ["calls", "matched", "unchecked"], by_phase=True)


def mismatch_table(results: list[Result]) -> pd.DataFrame:
    """Every call whose parity check failed (or never ran), with the mismatch details."""
    def rows_of(result):
        for c in result.unmatched_calls():
            check = c.parity
            yield {"variant": c.variant, "cycle": c.cycle, "phase": c.phase, "index": c.index,
                   "tokens": check and check.tokens, "attention mask": check and check.attention_mask,
                   "response offsets": check and check.response_offsets,
                   "details": "no reference computed" if check is None else json.dumps(check.mismatch)}
    return _frame(results, rows_of, KEY + ["index", "tokens", "attention mask", "response offsets", "details"])


def failure_rows(result: Result) -> list[dict]:
    rows = [{"where": "study", "variant": f.variant, "cycle": f.cycle, "phase": f.phase, "error": f.error}
            for f in result.failures]
    for run in result.cold_starts:
        if not run.valid:
            error = run.error or "; ".join(f.error for f in run.failures) or "parity mismatch"
            rows.append({"where": f"cold start {run.process}", "variant": run.variant, "cycle": 0, "phase": "first",
                         "error": error})
    return rows


def failures_table(results: list[Result]) -> pd.DataFrame:
    return _frame(results, failure_rows, ["run", "where", "variant", "cycle", "phase", "error"])


def cold_start_table(results: list[Result]) -> pd.DataFrame:
    """Min/median/max of each variant's first call over fresh processes, beside the in-process first call."""
    def rows_of(result):
        initialized = result.cold_start_samples(with_initialization=True)
        for variant, s in sorted(result.cold_start_samples().items(), key=lambda item: variant_rank(item[0])):
            in_process = result.samples(variant, 0, "first")
            with_init = initialized.get(variant)
            yield {"variant": variant, "processes": s.n, "min ms": s.min, "median ms": s.median, "max ms": s.max,
                   "median with initialization ms": with_init.median if with_init else None,
                   "in-process first ms": in_process.median if in_process else None}
    return _frame(results, rows_of, ["run", "variant", "processes", "min ms", "median ms", "max ms",
                                     "median with initialization ms", "in-process first ms"])


def profile_table(results: list[Result]) -> pd.DataFrame:
    """Profiled call per variant: wall vs summed kernel time, and how far the steady median is above the kernels."""
    def rows_of(result):
        for variant, p in sorted(result.profile.items(), key=lambda item: variant_rank(item[0])):
            steady = result.samples(variant, p.cycle, p.phase)
            median = steady.median if steady else None
            yield {"variant": variant, "wall ms": p.wall_ms, "kernel ms": p.kernel_ms, "kernels": p.kernels,
                   "steady median ms": median,
                   "steady / kernel": median / p.kernel_ms if median is not None and p.kernel_ms else None}
    return _frame(results, rows_of, ["run", "variant", "wall ms", "kernel ms", "kernels", "steady median ms",
                                     "steady / kernel"])


def profiles_table(results: list[Result]) -> pd.DataFrame:
    """Every profile of the profiling process, before and after each update (old files: the cycle-0 ones),
    beside the measured steady median of the same phase."""
    def rows_of(result):
        controls = analysis.control_cycles(result)
        for p in analysis.all_profiles(result):
            steady = result.samples(p.variant, p.cycle, p.phase)
            median = steady.median if steady else None
            yield {"variant": p.variant, "cycle": p.cycle, "phase": p.phase,
                   "control": p.cycle in controls and p.phase.endswith("after_update"), "wall ms": p.wall_ms,
                   "kernel ms": p.kernel_ms, "kernels": p.kernels, "copy ms": p.copy_ms, "steady median ms": median,
                   "steady / kernel": median / p.kernel_ms if median is not None and p.kernel_ms else None}
    return _frame(results, rows_of, KEY + ["control", "wall ms", "kernel ms", "kernels", "copy ms",
                                           "steady median ms", "steady / kernel"])


GENERATE_COLUMN = "generate() after / before"  # the same cycle's: the host's drift then (context, not a verdict)


def effects_table(results: list[Result]) -> pd.DataFrame:
    """Per variant and cycle: steady after the update over the steady state before it (cycle 0's, or with
    interleaved controls the phase just before the update), its 95% bootstrap interval, generate()'s in the same
    cycle, and whether a real update's effect clears the control cycles' drift."""
    def rows_of(result):
        for e in analysis.effects(result):
            yield {"variant": e.variant, "cycle": e.cycle, "control": e.control, "before ms": e.before.median,
                   "after ms": e.after.median, "after / before": e.ratio.point, "95% low": e.ratio.low,
                   "95% high": e.ratio.high,
                   GENERATE_COLUMN: None if e.generate_ratio is None else e.generate_ratio.point,
                   "verdict": e.verdict}
    return _frame(results, rows_of, ["run", "variant", "cycle", "control", "before ms", "after ms", "after / before",
                                     "95% low", "95% high", GENERATE_COLUMN, "verdict"])


PARTS_SPLIT = ("prefill", "decode", "other")  # what an instrumented call splits an untouched one into


def instrumented_table(results: list[Result]) -> pd.DataFrame:
    """Instrumented calls (prefill/decode split of the median one) beside untouched calls taken in turns."""
    def rows_of(result):
        for row in analysis.instrumented_calls(result):
            yield {"variant": row.variant, **{f"{part} ms": row.parts_ms.get(part) for part in PARTS_SPLIT},
                   "untouched median ms": row.untouched.median, "instrumented median ms": row.instrumented.median,
                   "instrument cost ms": row.cost_ms, "instrument cost %": 100 * row.cost_share,
                   "calls": row.instrumented.n}
    return _frame(results, rows_of, ["run", "variant", "prefill ms", "decode ms", "other ms", "untouched median ms",
                                     "instrumented median ms", "instrument cost ms", "instrument cost %", "calls"])


def break_even_table(results: list[Result]) -> pd.DataFrame:
    """Per pair: the costs after an update and the interval of rollouts per update where the candidate pays off."""
    def rows_of(result):
        for r in analysis.break_even_rows(result):
            yield {"candidate": r.candidate, "baseline": r.baseline, "candidate first ms": r.candidate_first_ms,
                   "candidate steady ms": r.candidate_steady_ms, "baseline first ms": r.baseline_first_ms,
                   "baseline steady ms": r.baseline_steady_ms, "pays off from U": r.break_even.first_u,
                   "pays off up to U": r.break_even.last_u, "verdict": r.break_even.verdict}
    frame = _frame(results, rows_of, ["run", "candidate", "baseline", "candidate first ms", "candidate steady ms",
                                      "baseline first ms", "baseline steady ms", "pays off from U",
                                      "pays off up to U", "verdict"])
    for column in ("pays off from U", "pays off up to U"):
        frame[column] = frame[column].astype("Int64")  # whole rollouts, with gaps where there is no bound
    return frame


def goals_table(result: Result) -> pd.DataFrame:
    rows = [{"goal": g.name, "measured": goal_measured(g), "threshold": g.threshold, "met": g.verdict,
             "GPU only": "yes" if g.gpu_only else "no", "detail": goal_detail(g)} for g in analysis.goals(result)]
    return pd.DataFrame(rows, columns=["goal", "measured", "threshold", "met", "GPU only", "detail"])


WORKLOAD_KEYS = ("requests", "batch_size", "prompt_len", "max_new_tokens", "iterations", "cycles", "seed")


def metadata_rows(result: Result) -> list[tuple[str, object]]:
    meta = result.metadata
    model, hardware, software, workload, training, git = (meta.get(key) or {} for key in (
        "model", "hardware", "software", "workload", "training", "git"))
    gpu_memory = hardware.get("gpu_memory_bytes")
    rows = [
        ("label", result.label), ("run", result.run_name), ("model", model.get("name")),
        ("model source", model.get("source")), ("quantization", model.get("quantization")),
        ("architecture", model.get("architecture")),
        ("layers / hidden / heads / KV heads", f"{model.get('layers')} / {model.get('hidden_size')} / "
                                               f"{model.get('heads')} / {model.get('kv_heads')}"),
        ("vocab", model.get("vocab")), ("parameters", model.get("parameters")), ("dtype", meta.get("dtype")),
        ("attention", meta.get("attention_implementation")), ("device", meta.get("device")),
        ("CUDA graph", "yes" if result.cuda_graph else NO_GRAPH_NOTE),
        ("machine", result.machine), ("GPU capability", hardware.get("gpu_capability")),
        ("GPU memory GiB", round(gpu_memory / 1024 ** 3, 1) if gpu_memory else None),
        ("driver / CUDA", f"{hardware.get('driver')} / {hardware.get('cuda')}"),
        ("CPU / cores", f"{hardware.get('cpu')} / {hardware.get('cores')}"),
        *([("NUMA", numa_text(hardware["numa"]))] if hardware.get("numa") else []),  # recorded since 2026-12-05
        ("software", ", ".join(f"{k} {v}" for k, v in software.items() if v is not None and k != "platform")),
        ("platform", software.get("platform")),
        ("workload", ", ".join(f"{k} {workload.get(k)}" for k in WORKLOAD_KEYS)),
        ("batch sizes", workload.get("batch_sizes")), ("true prompt lengths", workload.get("true_prompt_lengths")),
        ("optimizer / lr", f"{training.get('optimizer')} / {training.get('lr')}"),
        ("update path / master weights", f"{training.get('update_path', 'in-place')} / "
                                         f"{training.get('master_dtype', 'none (the rollout weights)')}"),
        ("optimizer flags", training.get("optimizer_flags")),
        ("start-up ms", _startup(meta.get("startup"))),
        ("git commit", git.get("commit")),  # in full; its tree's state and the fingerprint are the next row's
        ("code", code_text(git)),
        ("command", meta.get("command")), ("time", f"{meta.get('time_start')} to {meta.get('time_end')}"),
    ]
    # Nested values (lists, dicts) become JSON text: a table cell holds one plain value.
    return [(name, value if isinstance(value, (str, int, float)) or value is None else json.dumps(value))
            for name, value in rows]


def numa_text(numa: dict | None) -> str | None:
    """"2 node(s); GPU on node 0; the run's cores: node 0 8, node 1 8" (None where not recorded: older runs, no
    /sys); the nodes in the order recorded (numa.where writes them by number)."""
    if not numa:
        return None
    gpu = f"; GPU on node {numa['gpu_node']}" if numa.get("gpu_node") is not None else ""
    cores = ", ".join(f"node {node} {count}" for node, count in (numa.get("cores_by_node") or {}).items())
    return f"{numa.get('nodes')} node(s){gpu}; the run's cores: {cores or 'none recorded'}"


def _startup(parts):
    """{"process_startup_ms": 4319.999999999709, ...} as 'process start-up 4,320, ...': not JSON with float noise."""
    if not isinstance(parts, dict):
        return parts
    return ", ".join(f"{key.removesuffix('_ms').replace('startup', 'start-up').replace('_', ' ')} {number(ms, 0)}"
                     for key, ms in parts.items())


def metadata_table(result: Result) -> pd.DataFrame:
    return pd.DataFrame([{"field": name, "value": value} for name, value in metadata_rows(result)],
                        columns=["field", "value"])


def speedup_table(results: list[Result]) -> pd.DataFrame:
    """generate()'s steady median over each graph variant's, per steady phase, with its 95% bootstrap interval."""
    def rows_of(result):
        controls = analysis.control_cycles(result)
        for variant, cycle, phase, ratio in analysis.speedup_ratios(result):
            yield {"variant": variant, "cycle": cycle, "phase": phase,
                   "control": cycle in controls and phase.endswith("after_update"), "speed-up": ratio.point,
                   "95% low": ratio.low, "95% high": ratio.high}
    return _frame(results, rows_of, KEY + ["control", "speed-up", "95% low", "95% high"])
