"""A short markdown summary of one result file: what the README and a reviewer read first.

    python -m rollout_study.markdown reports/NAME/result.json > reports/NAME/summary.md
"""
from __future__ import annotations

import statistics
import sys

from . import results, targets

MIB = 1024 * 1024


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def _table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(v) if not isinstance(v, str) else v for v in row) + " |" for row in rows]
    return lines


def phase_table(result: dict) -> list[str]:
    profile = result.get("profile") or {}
    rows = []
    for r in results.summary_rows(result):
        kernel = profile.get(r["target"], {}).get("kernel_ms") if (r["phase"], r["cycle"]) == ("steady", 0) else None
        peak = r["peak_allocated"] / MIB if r["peak_allocated"] else None
        reserved = r["reserved"] / MIB if r["reserved"] else None
        rows.append([r["target"], str(r["cycle"]), r["phase"], str(r["samples"]),
                     _fmt(r["median_ms"]) + (" (wide IQR)" if r["wide_iqr"] else ""), _fmt(r["iqr_ms"]),
                     _fmt(r["allocation_ms"]), _fmt(r["warmup_ms"]), _fmt(r["capture_ms"]), _fmt(r["prefill_ms"]),
                     _fmt(r["decode_ms"]), _fmt(r["other_ms"]), str(r["captures"]), _fmt(peak, 1), _fmt(reserved, 1),
                     _fmt(r["tokens_per_s"], 0), _fmt(kernel), "ok" if r["parity_ok"] else "FAIL"])
    return _table(["target", "cycle", "phase", "n", "median ms", "IQR ms", "alloc", "warmup", "capture", "prefill",
                   "decode", "other", "captures", "peak MiB", "reserved MiB", "tok/s", "kernel ms", "parity"], rows)


def cold_start_table(result: dict) -> list[str]:
    rows = [[t, str(len(v)), _fmt(min(v)), _fmt(statistics.median(v)), _fmt(max(v))]
            for t, v in results.cold_start_firsts(result).items()]
    return _table(["target", "processes", "min ms", "median ms", "max ms"], rows) if rows else []


def summary(result: dict) -> str:
    meta = result["metadata"]
    model, hw, sw, wl = meta["model"], meta["hardware"], meta["software"], meta["workload"]
    graph_note = "" if meta["cuda_graph"] else " **no CUDA graph** (the graph engine ran its static-cache step eagerly)"
    lines = [
        f"# {meta['run_name']}: {meta['label']} model {model.get('display_name', model['name'])}",
        "",
        f"- valid: **{result['valid']}**{graph_note}",
        f"- model: {model['name']} ({meta['label']}), {model['layers']} layers, hidden {model['hidden_size']}, "
        f"heads {model['heads']}/{model['kv_heads']} KV, vocab {model['vocab']}, {model['parameters']:,} parameters, "
        f"{meta['dtype']}, attention {meta['attention_implementation']}"
        + (f", {model['quantization']}" if model.get("quantization") else ""),
        f"- machine: {hw['gpu'] or 'CPU only'}" + (f" (capability {hw['gpu_capability']}, driver {hw['driver']}, "
                                                  f"CUDA {hw['cuda']})" if hw["gpu"] else "")
        + f"; {hw['cpu']}, {hw['cores']} cores",
        f"- software: Python {sw['python']}, torch {sw['torch_build']}, transformers {sw['transformers']}",
        f"- workload: {wl['requests']} requests, batch {wl['batch_size']}, prompt length {wl['prompt_len']} "
        f"(true lengths {wl['true_prompt_lengths']}), {wl['max_new_tokens']} new tokens, {wl['iterations']} "
        f"iterations, {wl['cycles']} cycles, seed {wl['seed']}, prompts {wl['prompt_source']}",
        f"- update: {meta['training']['optimizer']} lr {meta['training']['lr']}; commit {meta['git']['commit']}; "
        f"{meta['time_start']}",
        f"- command: `{meta['command']}`",
        "",
        "## Per target and phase (medians; breakdown parts in ms)",
        "",
        *phase_table(result),
        "",
    ]
    cold = cold_start_table(result)
    if cold:
        lines += ["## First call alone in a fresh process (cold starts)", "", *cold, ""]
    if result.get("profile"):
        lines += ["## Profiled steady call (one per target, outside the samples)", "",
                  *_table(["target", "wall ms (profiled)", "kernel ms", "kernels", "copy ms"],
                          [[t, _fmt(p["wall_ms"]), _fmt(p["kernel_ms"]), str(p["kernels"]), _fmt(p.get("copy_ms"))]
                           for t, p in result["profile"].items()]), ""]
    lines += ["## Updates", "", *_table(["cycle", "optimizer", "lr", "loss", "ms"],
                                         [[str(u["cycle"]), u["optimizer"], str(u["lr"]), _fmt(u["loss"], 4),
                                           _fmt(u["ms"])] for u in result["updates"]]), ""]
    lines += ["## Targets", "", *_table(["target", "measured", "threshold", "met", "detail"],
                                         [[t["target"], _fmt(t["measured"]), t["threshold"],
                                           {True: "yes", False: "**no**", None: "not measured"}[t["met"]], t["detail"]]
                                          for t in targets.check(result)]), ""]
    if result["failures"]:
        lines += ["## Failures", ""] + [f"- {f['engine']} {f['phase']} (cycle {f['cycle']}): {f['error']}"
                                        for f in result["failures"]] + [""]
    mismatches = [c for c in result["calls"] if c["parity"] and not c["parity"]["ok"]]
    if mismatches:
        lines += ["## Parity mismatches", ""] + [
            f"- {c['engine']}[{c['policy']}] {c['phase']} #{c['index']}: {c['parity']['mismatch']}" for c in mismatches[:20]]
    return "\n".join(lines) + "\n"


# The original benchmark's figures (RTX A4500, STUDY.md): quoted, not measured here.
ORIGINAL_A4500 = {"first": (240.182, 61.933), "steady": (228.014, 45.424),
                  "first_after_update": (226.304, 58.800), "steady_after_update": (234.919, 45.281)}
README_PHASES = ("first", "steady", "first_after_update", "steady_after_update")


def _cold_median(result: dict, target: str) -> float | None:
    values = results.cold_start_firsts(result).get(target)
    return statistics.median(values) if values else None


def readme_results(result: dict, with_original: bool) -> str:
    """The README's table for one committed run: cycle-0 medians per phase and target, from its result file."""
    meta = result["metadata"]
    graphs = sorted({f"graph[{c['policy']}]" for c in result["calls"] if c["engine"] == "graph"})
    rows = {(r["target"], r["phase"]): r for r in results.summary_rows(result) if r["cycle"] == 0}
    header = ["phase"] + (["original eager, A4500", "original graph, A4500"] if with_original else []) + \
             [f"eager, {meta['hardware']['gpu'] or 'CPU'}"] + [f"{g}, {meta['hardware']['gpu'] or 'CPU'}" for g in graphs]
    body = []
    for phase in README_PHASES:
        row = [phase.replace("_", " ")] + ([_fmt(v) for v in ORIGINAL_A4500[phase]] if with_original else [])
        for target in ["eager"] + graphs:
            r = rows.get((target, phase))
            row.append(_fmt(r["median_ms"]) if r else "-")
        body.append(row)
    cold = ["first call alone, fresh process (median)"] + (["-", "-"] if with_original else []) + \
           [_fmt(_cold_median(result, t)) for t in ["eager"] + graphs]
    profile = result.get("profile") or {}
    kernels = ["summed GPU kernel time, one steady call"] + (["-", "-"] if with_original else []) + \
              [_fmt(profile.get(t, {}).get("kernel_ms")) for t in ["eager"] + graphs]
    update = result["updates"][0] if result["updates"] else None
    lines = _table(header, body + [cold, kernels])
    checks = targets.check(result)
    met = sum(1 for t in checks if t["met"])
    lines += ["", f"Run `{meta['run_name']}` ({meta['label']}, {meta['model'].get('display_name', meta['model']['name'])}, "
                  f"{meta['dtype']}, {meta['software']['torch_build']}, transformers {meta['software']['transformers']}; "
                  f"commit {str(meta['git']['commit'])[:10]}): valid **{result['valid']}**; first update "
                  f"({update['optimizer'] if update else '-'}) {_fmt(update['ms'] if update else None)} ms; "
                  f"targets met {met}/{len(checks)} (see `reports/{meta['run_name']}/summary.md`)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m rollout_study.markdown RESULT.json", file=sys.stderr)
        return 2
    sys.stdout.write(summary(results.read(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
