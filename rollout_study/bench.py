"""Command line compatible with the original benchmark.

    python -m rollout_study.bench --requests 8 --batch-size 4 --prompt-len 32 \\
        --max-new-tokens 32 --iterations 10 --output rollout-first-call.json

Exit status: 0 for a valid run, 1 when the run finished but a parity check or a phase failed
(the result is still written, with `valid: false`), 2 for bad parameters (nothing is written).
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys

from .params import DEVICES, DTYPES, OPTIMIZERS, POLICY_CHOICES, ParameterError, StudyParams

# flag -> parameter name; only flags given on the command line override the defaults.
FLAGS = {
    "requests": int, "batch_size": int, "prompt_len": int, "max_new_tokens": int, "iterations": int,
    "cycles": int, "seed": int, "lr": float, "cold_starts": int, "device": str, "dtype": str,
    "optimizer": str, "policy": str, "model": str, "attn": str, "prompts": str, "name": str,
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m rollout_study.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    for key, kind in FLAGS.items():
        p.add_argument("--" + key.replace("_", "-"), dest=key, type=kind, default=None, help=_help(key))
    p.add_argument("--engines", default=None, help="comma-separated engines (default: eager,graph)")
    p.add_argument("--params", default=None, help="YAML parameter file; flags given here override it")
    p.add_argument("--params-json", default=None, help=argparse.SUPPRESS)
    p.add_argument("--first-only", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--no-profile", action="store_true", help="skip the profiled call per engine")
    p.add_argument("--output", default="rollout-first-call.json", help="result JSON path")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no summary table")
    return p


def _help(key: str) -> str:
    choices = {"device": DEVICES, "dtype": DTYPES, "optimizer": OPTIMIZERS, "policy": POLICY_CHOICES,
               "attn": ("sdpa", "eager")}
    default = getattr(StudyParams(), key)
    text = f"default: {default}"
    if key in choices:
        text += f"; one of {', '.join(choices[key])}"
    if key == "model":
        text += "; or smollm2-135m-instruct, or a local Hugging Face checkpoint folder"
    return text


def params_from_args(args) -> StudyParams:
    if args.params_json:
        return StudyParams.from_dict(json.loads(args.params_json), source="--params-json")
    values = {}
    if args.params:
        base = StudyParams.from_yaml(args.params)
        values = base.to_dict()
    for key in FLAGS:
        value = getattr(args, key)
        if value is not None:
            values[key] = value
    if args.engines is not None:
        values["engines"] = [e.strip() for e in args.engines.split(",") if e.strip()]
    if args.no_profile:
        values["profile"] = False
    return StudyParams.from_dict(values, source="command line")


def summary_table(result: dict) -> str:
    from .results import summary_rows

    rows = summary_rows(result)
    profile = result.get("profile") or {}
    head = f"{'target':<18}{'cycle':>5} {'phase':<20}{'median ms':>10}{'IQR':>8}{'capture':>9}{'tok/s':>10}{'kernel ms':>10}  parity"
    lines = [f"{result['metadata']['label']} | {result['metadata']['model']['name']} | "
             f"{result['metadata']['device']} {result['metadata']['dtype']}"
             + ("" if result["metadata"]["cuda_graph"] else " | no CUDA graph"), head, "-" * len(head)]
    for r in rows:
        kernel = profile.get(r["target"], {}).get("kernel_ms") if r["phase"] == "steady" else None
        lines.append(f"{r['target']:<18}{r['cycle']:>5} {r['phase']:<20}{r['median_ms']:>10.3f}{r['iqr_ms']:>8.3f}"
                     f"{r['capture_ms']:>9.3f}{r['tokens_per_s']:>10.0f}"
                     f"{(f'{kernel:.3f}' if kernel is not None else '-'):>10}  {'ok' if r['parity_ok'] else 'FAIL'}")
    for update in result["updates"]:
        if update["loss"] is None:
            lines.append(f"update cycle {update['cycle']}: {update['optimizer']} lr={update['lr']} FAILED (non-finite)")
        else:
            lines.append(f"update cycle {update['cycle']}: {update['optimizer']} lr={update['lr']} "
                         f"loss={update['loss']:.4f} {update['ms']:.3f} ms")
    lines.append(f"valid: {result['valid']}" + (f"; failures: {len(result['failures'])}" if result["failures"] else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    try:
        params = params_from_args(args)
        from .study import run_study

        result = run_study(params, progress=not args.quiet, first_only=args.first_only,
                           command="python -m rollout_study.bench " + shlex.join(argv))
    except ParameterError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from .results import write_atomic

    write_atomic(result, args.output)
    if not args.quiet:
        print(summary_table(result))
        print(f"wrote {args.output}")
    if not result["valid"]:
        for failure in result["failures"]:
            print(f"failed: {failure['engine']} {failure['phase']}: {failure['error']}", file=sys.stderr)
        bad = [c for c in result["calls"] if not (c["parity"] or {}).get("ok")]
        if bad:
            print(f"parity failed on {len(bad)} call(s); first: {bad[0]['engine']} {bad[0]['phase']} "
                  f"{bad[0]['parity']['mismatch'] if bad[0]['parity'] else 'no reference'}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
