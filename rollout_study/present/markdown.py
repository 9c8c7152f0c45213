"""Markdown from one result: summary.md (what a reviewer reads first) and the README's results tables.

    python -m rollout_study.present.markdown reports/NAME/result.json > reports/NAME/summary.md
"""
from __future__ import annotations

import json
import sys

from .. import analysis
from ..record import PARTS, PHASES
from ..result import Result
from . import host, run_facts
from .captures import captures_markdown
from .floors import floors_markdown
from .other_split import split_markdown
from .policy_gaps import gaps_markdown
from .provenance import commit_text, fingerprint_text
from .kernels import kernels_markdown
from ..effects import before_text
from ..stats import whole_range_note
from .text import (MIB, counted, effects_rule, goal_detail, goal_measured, headline_lines, number, phase_name,
                   table, timing_line)

# The original benchmark's figures (RTX A4500, STUDY.md): quoted, not measured here.
ORIGINAL_A4500 = {"first": (240.182, 61.933), "steady": (228.014, 45.424),
                  "first_after_update": (226.304, 58.800), "steady_after_update": (234.919, 45.281)}


def phase_table(result: Result) -> list[str]:
    rows, controls = [], analysis.control_cycles(result)
    for r in analysis.summary_rows(result):
        profile = result.profile.get(r.variant)
        kernel = profile.kernel_ms if profile and (r.cycle, r.phase) == (profile.cycle, profile.phase) else None
        peak, reserved = r.memory_bytes["peak_allocated"], r.memory_bytes["reserved"]
        rows.append([r.variant, str(r.cycle), phase_name(controls, r.cycle, r.phase), str(r.samples.n),
                     number(r.samples.median) + (" (wide IQR)" if r.samples.wide else ""), r.samples.iqr,
                     *(r.parts_ms[part] for part in PARTS),
                     str(r.captures), number(peak / MIB if peak else None, 1),
                     number(reserved / MIB if reserved else None, 1), number(r.tokens_per_s, 0), kernel,
                     "ok" if r.parity_ok else "FAIL"])
    return table(["variant", "cycle", "phase", "n", "median ms", "IQR ms", "alloc", "warmup", "compile", "capture",
                  "prefill", "decode", "other", "captures", "peak MiB", "reserved MiB", "tok/s", "kernel ms", "parity"],
                 rows)


def _interval_cells(ratio) -> list:
    return [ratio.point, ratio.low, ratio.high]


def measurement_sections(result: Result) -> list[str]:
    """Speed-ups and after-update effects with their intervals; the instrumented calls and every profile."""
    lines = []
    controls = analysis.control_cycles(result)
    speedups = analysis.speedup_ratios(result)
    if speedups:
        note = whole_range_note([r for *_, r in speedups], why=True)
        lines += ["## Speed-up over generate() per steady phase (95% bootstrap intervals)", "",
                  *([note[0].upper() + note[1:] + ".", ""] if note else []),
                  *table(["variant", "cycle", "phase", "speed-up", "95% low", "95% high"],
                         [[v, str(c), phase_name(controls, c, p), *_interval_cells(r)] for v, c, p, r in speedups]), ""]
    effects = analysis.effects(result)
    if effects:
        lines += [f"## Steady state after an update over before ({before_text(result)}), against control cycles", "",
                  effects_rule(), "",
                  *table(["variant", "cycle", "update", "before ms", "after ms", "after / before", "95% low",
                          "95% high", "generate() after / before", "verdict"],
                         [[e.variant, str(e.cycle), "control" if e.control else "real", e.before.median, e.after.median,
                           *_interval_cells(e.ratio), None if e.generate_ratio is None else e.generate_ratio.point,
                           e.verdict]
                          for e in effects]), ""]
    instrumented = analysis.instrumented_calls(result)
    if instrumented:
        lines += ["## Instrumented calls (prefill/decode split)", "",
                  "Measured calls of these variants are untouched: their whole time is in `other`. The split comes "
                  "from instrumented calls after all measured phases, in turns with untouched ones.", "",
                  *table(["variant", "prefill ms", "decode ms", "other ms", "untouched median ms",
                          "instrumented median ms", "instrument cost ms", "instrument cost %"],
                         [[row.variant, row.parts_ms.get("prefill"), row.parts_ms.get("decode"),
                           row.parts_ms.get("other"), row.untouched.median, row.instrumented.median, row.cost_ms,
                           100 * row.cost_share] for row in instrumented]), ""]
    if result.extra.get("profiles"):
        rows = []
        for p in analysis.all_profiles(result):
            steady = result.samples(p.variant, p.cycle, p.phase)
            rows.append([p.variant, str(p.cycle), phase_name(controls, p.cycle, p.phase), p.wall_ms, p.kernel_ms,
                         p.kernels, steady.median if steady else None,
                         steady.median / p.kernel_ms if steady and p.kernel_ms else None])
        lines += ["## Profiles before and after each update (profiling process)", "",
                  *table(["variant", "cycle", "phase", "wall ms", "kernel ms", "kernels", "steady median ms",
                          "steady / kernel"], rows), ""]
    return lines


def cold_start_table(result: Result) -> list[str]:
    initialized = result.cold_start_samples(with_initialization=True)
    rows = [[variant, str(s.n), s.min, s.median, s.max,
             initialized[variant].median if variant in initialized else None]
            for variant, s in result.cold_start_samples().items()]
    return table(["variant", "processes", "min ms", "median ms", "max ms", "median with initialization ms"],
                 rows) if rows else []


def _said(facts: list[tuple[str, str, str]], true_lengths: list | None = None) -> str:
    """A run_facts group as its text reads, leaving out what the run did not record; the prompt length with the
    prompts' true lengths where recorded (padded to it: a chat prompt's own length differs)."""
    return ", ".join(text + (f" (true lengths {true_lengths})" if name == "prompt length" and true_lengths else "")
                     for name, value, text in facts if run_facts.recorded(value))


def _facts(result: Result) -> list[str]:
    meta = result.metadata
    model, hw, sw, wl = (meta.get(key) or {} for key in ("model", "hardware", "software", "workload"))
    training, git = meta.get("training") or {}, meta.get("git") or {}
    parameters, facts = model.get("parameters"), run_facts.facts(result)
    graph_note = "" if result.cuda_graph else " **no CUDA graph** (the graph engine ran its static-cache step eagerly)"
    command = str(meta.get("command")).replace("`", "'")  # a backtick would end the code span early
    gpu = (f"{hw['gpu']} (capability {hw.get('gpu_capability')}, driver {hw.get('driver')}, CUDA {hw.get('cuda')})"
           if hw.get("gpu") else "CPU only")
    return [
        f"- valid: **{result.is_valid}**{graph_note}",
        f"- model: {model.get('name')} ({result.label}), {counted(model.get('layers'), 'layer')}, "
        f"hidden {model.get('hidden_size')}, "
        f"heads {model.get('heads')}/{model.get('kv_heads')} KV, vocab {model.get('vocab')}, "
        f"{counted(parameters, 'parameter')}, {meta.get('dtype')}, attention {meta.get('attention_implementation')}"
        + (f", {model['quantization']}" if model.get("quantization") else ""),
        f"- machine: {gpu}; {hw.get('cpu')}, {counted(hw.get('cores'), 'core')}",
        f"- software: Python {sw.get('python')}, torch {sw.get('torch_build') or sw.get('torch')}, "
        f"transformers {sw.get('transformers')}",
        # in the words of a report of several runs (run_facts), so one run reads alike in both
        f"- workload: {_said(facts['workload'], wl.get('true_prompt_lengths'))}",
        f"- update: {_said(facts['update'])}; {commit_text(git)} (code fingerprint {fingerprint_text(git)}); "
        f"{meta.get('time_start')}",
        f"- command: `{command}`",
    ] + _order_line(training) + _untimed_line(meta.get("untimed_ms")) + _host_line(result) + _garbage_line(meta)


def _order_line(training: dict) -> list[str]:
    """Said only where a run left the protocol's default order (controls first, turns as built), which every
    earlier run kept: the verdicts and gaps read differently there."""
    placement, turns = training.get("control_placement", "first"), training.get("turn_order", "fixed")
    if (placement, turns) == ("first", "fixed"):
        return []
    parts = [] if placement == "first" else ["control cycles interleaved with the real updates, each update read "
                                             "against the steady phase just before it"]
    parts += [] if turns == "fixed" else [f"turns {turns} ({TURNS_SAID.get(turns, 'not as built')})"]
    return ["- order: " + "; ".join(parts)]


TURNS_SAID = {  # param_values.TURN_ORDERS, as a run's order line says them
    "reverse": "in each round the engines call in the reverse of the order they were built in",
    "rotate": "each round starts one engine later; each phase's first round as built",
    "rotate-run": "each round starts one engine later, counted over the whole run: the phases start with different "
                  "engines"}


def _garbage_line(meta: dict) -> list[str]:
    found = meta.get("old_garbage")
    if not found:  # none found, or results written before it was looked for
        return []
    return ["- device memory only a full garbage collection freed, after the calls of: " + "; ".join(
        f"{'c' + str(g['cycle']) + ' ' if g.get('cycle') is not None else ''}{g['phase']} "
        f"{number(g['freed_bytes'] / MIB, 2)} MiB" for g in found)
        + " (garbage that outlived the young collections before each of that phase's calls: the memory figures "
          "of its later calls may include it)"]


def _host_line(result: Result) -> list[str]:
    start, end = host.figures(result)
    if end is None:  # results written before it was kept
        return []
    return [f"- host speed: {number(start)} us per tiny CPU tensor operation at the start, "
            f"{number(end)} at the end (eager generate(), hf-compile, hf-continuous and "
            "compilation run at the host's pace; the graph engines' replays do not)"]


def _untimed_line(untimed: dict | None) -> list[str]:
    if not untimed:  # results written before it was kept
        return []
    parts = ", ".join(f"{part} {number(ms)}" for part, ms in untimed.items())
    return ["- host time around the measured calls (ms): " + parts
            + " (collect: garbage collection before each call and around each phase; parity: outputs to the host and "
              "compared; reference: generate() with logits per weight version; update: training step, sync and "
              "engines told)"]


def summary(result: Result) -> str:
    lines = [f"# {result.run_name}: {result.label} model {result.model_name}", "", "## Answer", "",
             *(f"- {line}" for line in headline_lines(result)), "", "## Run", "", *_facts(result), "",
             "## Per variant and phase (medians; breakdown parts in ms)", "", *phase_table(result), ""]
    timing = timing_line(result)
    if timing:
        lines += [timing[0].upper() + timing[1:] + ".", ""]
    if analysis.untouched_variants(result):
        lines += [f"Measured calls of {', '.join(sorted(analysis.untouched_variants(result)))} are untouched "
                  "generate() calls: their whole time is in `other` (the split is under Instrumented calls).", ""]
    lines += measurement_sections(result)
    cold = cold_start_table(result)
    if cold:
        lines += ["## First call alone in a fresh process (cold starts)", "", *cold, ""]
    if result.profile and not result.extra.get("profiles"):  # else every profile is in the section above
        lines += ["## Profiled steady call (one per variant, outside the samples)", "",
                  *table(["variant", "wall ms (profiled)", "kernel ms", "kernels", "copy ms"],
                         [[name, p.wall_ms, p.kernel_ms, p.kernels, p.copy_ms] for name, p in result.profile.items()]),
                  ""]
    lines += floors_markdown(result) + split_markdown(result) + kernels_markdown(result) + captures_markdown(result)
    lines += gaps_markdown(result)
    controls = analysis.control_cycles(result)
    lines += ["## Updates", "", *table(["cycle", "optimizer", "lr", "loss", "ms"] + (["update"] if controls else []),
                                       [[str(u.cycle), u.optimizer, number(u.lr), number(u.loss, 4), u.ms]
                                        + (["control" if u.cycle in controls else "real"] if controls else [])
                                        for u in result.updates]), ""]
    lines += ["## Break-even rollouts per update", "",
              *table(["candidate", "baseline", "first ms", "steady ms", "baseline first ms", "baseline steady ms",
                      "verdict"],
                     [[r.candidate, r.baseline, r.candidate_first_ms, r.candidate_steady_ms, r.baseline_first_ms,
                       r.baseline_steady_ms, r.break_even.verdict] for r in analysis.break_even_rows(result)]), ""]
    lines += ["## Goals", "", *table(["goal", "measured", "threshold", "met", "detail"],
                                     [[g.name, goal_measured(g), g.threshold,
                                       "**no**" if g.met is False else g.verdict, goal_detail(g)]
                                      for g in analysis.goals(result)]), ""]
    if result.failures:
        lines += ["## Failures", ""] + [f"- {f.variant} {f.phase} (cycle {f.cycle}): {f.error}"
                                        for f in result.failures] + [""]
    mismatches = [c for c in result.calls if c.parity and not c.parity.ok]
    if mismatches:
        lines += ["## Parity mismatches", ""] + [f"- {c.variant} {c.phase} #{c.index}: {json.dumps(c.parity.mismatch)}"
                                                 for c in mismatches[:20]]
    return "\n".join(lines) + "\n"


def readme_results(result: Result, with_original: bool) -> str:
    """The README's table for one committed run, from its result file: medians per phase and variant.

    Before-update phases are cycle 0's; after-update phases are the first real (not control) update's.
    """
    meta, machine = result.metadata, result.metadata["hardware"].get("gpu") or "CPU"
    variants = result.variants()
    real = analysis.real_cycles(result)
    after = real[0] if real else 0
    controls_before = sum(cycle < after for cycle in analysis.control_cycles(result))
    wanted = {"first": 0, "steady": 0, "first_after_update": after, "steady_after_update": after}
    medians = {(r.variant, r.phase): r.samples.median for r in analysis.summary_rows(result)
               if r.cycle == wanted[r.phase]}
    quoted = ["-", "-"] if with_original else []
    header = ["phase"] + (["original eager, A4500", "original graph, A4500"] if with_original else []) + \
             [f"{variant}, {machine}" for variant in variants]
    body = [[phase.replace("_", " ")] + ([number(v) for v in ORIGINAL_A4500[phase]] if with_original else [])
            + [number(medians.get((variant, phase))) for variant in variants] for phase in PHASES]
    cold = result.cold_start_samples()
    body.append(["first call alone, fresh process (median)", *quoted]
                + [number(cold[v].median if v in cold else None) for v in variants])
    body.append(["summed GPU kernel time, one steady call", *quoted]
                + [number(result.profile[v].kernel_ms if v in result.profile else None) for v in variants])
    update = next((u for u in result.updates if u.cycle == after), None)
    checks = analysis.goals(result)
    software = meta.get("software") or {}
    lines = table(header, body) + [
        "", f"Run `{result.run_name}` ({result.label}, {result.model_name}, {meta.get('dtype')}, "
            f"{software.get('torch_build') or software.get('torch')}, transformers {software.get('transformers')}; "
            f"{commit_text(meta.get('git'))}): valid **{result.is_valid}**; first update "
            f"({update.optimizer if update else '-'}) {number(update.ms if update else None)} ms; "
            f"goals met {sum(1 for g in checks if g.met)}/{len(checks)} (see `reports/{result.run_name}/summary.md`)."
            + (f" Rows after an update: update {after}, the first real one ({controls_before} control "
               f"cycle(s) before it)." if after else "")]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m rollout_study.present.markdown RESULT.json", file=sys.stderr)
        return 2
    sys.stdout.write(summary(Result.read(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
