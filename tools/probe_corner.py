"""Probe: where a sweep point dies. Both corner points of the smoke sweep (batch 64, 512 new tokens; the 1B
shape and SmolLM2) aborted on the H200 with "an illegal memory access", first seen in a destructor, their
results lost with the process. This runs one point of a sweep file in this process, as the sweep would
(the same parameters; engines may be narrowed), and says on stderr, flushed, as it goes: each measured
call, update and reference before and after it (with a device synchronize after, so an asynchronous
error surfaces at the step that caused it), and each failure the study records, with its traceback.
The first failure names the step; CUDA errors are sticky, so what follows it is fallout.

    python tools/probe_corner.py --match model=synthetic-llama-3.2-1b --match batch_size=64 \
        --match max_new_tokens=512 --match "engines=[eager, graph, hf-continuous]" \
        [--engines eager,hf-continuous] [--out probe.json]

Each --match is KEY=VALUE, the value read as the study's --set reads it (a number as papermill's -p does: lr=1e-4
is 0.0001; else YAML) and compared with the point's parameter (a substring of the slug had picked turn_order
rotate-run beside rotate, and refused); prompt_len=auto (or an integer lr) as a parameter file writes it; a policy
by the policies it names, in order (policy=both is [recapture, reuse]). A key given twice is refused; a value its
parameter cannot take is refused with its check's allowed values (exit 1 either way). --set reads as the study's --set.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

import torch
import yaml

from rollout_study import protocol
from rollout_study.cli_params import parse_override, parse_value
from rollout_study.engines import static_runner
from rollout_study.param_values import CHECKS, ParameterError
from rollout_study.params import StudyParams, held_value, named_policies
from rollout_study.sweep import SweepSpec

BEGAN = time.perf_counter()


def say(text: str) -> None:
    print(f"[{time.perf_counter() - BEGAN:7.1f} s] {text}", file=sys.stderr, flush=True)


def announced(name: str, method):
    def wrapper(self, *args, **kwargs):
        what = f"{name} {' '.join(str(getattr(a, 'variant', a)) for a in args)}"
        say(f"begin {what}")
        out = method(self, *args, **kwargs)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        say(f"end   {what}  (allocated {torch.cuda.memory_allocated() / 2**30:.1f} GiB, "
            f"reserved {torch.cuda.memory_reserved() / 2**30:.1f} GiB)" if torch.cuda.is_available() else f"end {what}")
        return out
    return wrapper


class Loud(list):
    def append(self, failure) -> None:
        say(f"FAILURE engine={failure.engine} policy={failure.policy} cycle={failure.cycle} phase={failure.phase}: "
            f"{failure.error}\n{(failure.extra or {}).get('traceback', '')}")
        super().append(failure)


def _yaml(value) -> str:
    """A value as a --match would write it (YAML flow style)."""
    return yaml.safe_dump(value, default_flow_style=True, width=1 << 20).removesuffix("...\n").strip()


def _values(dicts: list[dict], key: str) -> str:
    """The values the points have for `key`, each once, in the sweep's order (prompt_len's None as a file says it)."""
    return ", ".join(dict.fromkeys("auto" if key == "prompt_len" and d[key] is None else _yaml(d[key]) for d in dicts))


def _read(key: str, value):
    """A value as the study reads it: a policy as the policies it names, in their order (`both` is
    [recapture, reuse]); any other value as it is."""
    return list(named_policies(value)) if key == "policy" else value


def _same(key: str, held, wanted) -> bool:
    """Whether a point's value is the one a --match asks for, both read as the study reads them."""
    return _read(key, held) == _read(key, wanted)


def pick(points, matches: list[str]):
    """The one (slug, params) whose parameters equal every KEY=VALUE in matches; an error naming what went wrong:
    the parameter, and the values it may take (its check's, or those the sweep's points have)."""
    wanted, written = {}, {}
    for item in matches:
        key, sep, text = item.partition("=")
        key = key.strip()  # as --set takes "lr = 1e-4"
        if not sep or not key:
            sys.exit(f"--match takes KEY=VALUE (a parameter and its value, as --set reads it), got {item!r}")
        if key in wanted:
            sys.exit(f"--match names {key} twice; a point has one value of it")
        try:
            wanted[key], written[key] = parse_value(key, text), text
        except ParameterError as err:
            sys.exit(f"--match {err}")
    known = [f.name for f in dataclasses.fields(StudyParams)]
    unknown = sorted(set(wanted) - set(known))
    if unknown:
        sys.exit(f"--match names no parameter {unknown}; the parameters are {sorted(known)}")
    for key in wanted:
        wanted[key] = held_value(key, wanted[key])  # as StudyParams.from_dict reads a file's: auto, an integer lr
        try:
            CHECKS[key](key, wanted[key])
        except ParameterError as err:
            sys.exit(f"--match {err}")
    dicts = [p.to_dict() for _, p in points]
    picked = [(slug, p) for (slug, p), d in zip(points, dicts) if all(_same(k, d[k], v) for k, v in wanted.items())]
    if len(picked) == 1:
        return picked[0]
    if not picked:
        absent = [k for k, v in wanted.items() if not any(_same(k, d[k], v) for d in dicts)]
        why = ("no point has " + " or ".join(f"{k}={written[k]}" for k in absent) if absent
               else "each value is some point's, but no point has them all")
        sys.exit(f"--match picked no point: {why}; the sweep's " +
                 "; ".join(f"{k}: {_values(dicts, k)}" for k in (absent or wanted)))
    chosen = [p.to_dict() for _, p in picked]
    # name differs by construction; `both` and [recapture, reuse] are one policy, not a difference
    differ = [k for k in known if k != "name" and len({_yaml(_read(k, d[k])) for d in chosen}) > 1]
    sys.exit(f"--match must pick exactly one point; picked {len(picked)}, {[s for s, _ in picked]}, which differ in " +
             "; ".join(f"{k}: {_values(chosen, k)}" for k in differ) + " (a --match of one of these picks among them)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweep", default="params/sweep-h200.yaml")
    parser.add_argument("--match", action="append", required=True,
                        help="KEY=VALUE: the point's parameter KEY equals VALUE, read as --set reads it "
                        "(all must match)")
    parser.add_argument("--engines", default=None, help="comma-separated: only these engines")
    parser.add_argument("--set", action="append", default=[],
                        help="KEY=VALUE, as the study's --set: a parameter changed")
    parser.add_argument("--unprotected", action="store_true", help="capture as before the graphs owned their "
                        "cuBLAS workspace (static_runner.own_cublas_workspace a no-op), to show the hazard")
    parser.add_argument("--out", default=None, help="the result JSON, if the process lives to write it")
    args = parser.parse_args()
    try:
        slug, params = pick(SweepSpec.from_yaml(args.sweep).points(), args.match)
        changes = dict(parse_override(item) for item in args.set)
        if args.engines:
            changes["engines"] = args.engines.split(",")
        if changes:  # the checks across parameters too (a model shape, a policy with its update path)
            params = StudyParams.from_dict({**params.to_dict(), **changes}, source="--set/--engines")
    except ParameterError as err:
        sys.exit(str(err))
    if args.unprotected:
        static_runner.own_cublas_workspace = lambda: None
    say(f"point {slug}, engines {params.engines}, changed {changes or 'nothing'}"
        + (", UNPROTECTED captures" if args.unprotected else ""))
    protocol.Study._measure = announced("call", protocol.Study._measure)
    protocol.Study._update = announced("update", protocol.Study._update)
    protocol.Study._settle_reference = announced("reference", protocol.Study._settle_reference)
    study = protocol.Study(params)
    study.failures = Loud()
    try:
        result = study.run()
        say(f"done: {len(result.calls)} calls, {len(result.failures)} failures, valid {result.is_valid}")
        if args.out:
            result.write(args.out)
    except BaseException as err:  # noqa: BLE001 - a probe says what killed it
        say(f"RAISED {type(err).__name__}: {err}")
    sys.stderr.flush()
    os._exit(0)  # not the interpreter's teardown: a stale CUDA context aborts in destructors there


if __name__ == "__main__":
    main()
