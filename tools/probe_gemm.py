"""Probe: can graph-compiled's kernel time halve graph's on the SmolLM2 shape in FP32 (issue 11's 2x target)?

The published FP32 SmolLM2 runs give graph-compiled 1.50x less summed kernel time than graph, where 2x
was asked. The graph engine's kernels on SmolLM2 in FP32 (reports/smollm2-buckets, batch 4, 256 new
tokens, profiled steady call): GEMMs about 40% (cuBLAS's gemv and SIMT sgemm kernels with their
split-K reductions), the memory-efficient attention over the static cache 20%, elementwise and copies
most of the rest. Fusion removes only the elementwise share, so 2x needs cheaper GEMMs. This times the
graph engine and graph-compiled with inductor's default options (the engine's) and with inductor
choosing each GEMM among its Triton templates and cuBLAS by measuring them (`max_autotune_gemm`, still
without torch.compile's own CUDA graphs), with and without coordinate-descent tuning of the fused
kernels; each variant in its own process with its own, empty inductor cache folder (a shared one would
hand a later variant an earlier one's compiled kernels and GEMM choices). Per variant: compile and capture of
the first call, steady wall time (median of 5), one profiled steady call (summed kernel time, kernel
count, the kernels with the most time), and parity with generate() (first mismatch and its top-2 margin).
It showed (reports/probes-h200/, "probe-gemm") that autotuned Triton templates make FP32 slower in the rollout,
and that cuBLAS's matrix products take 98 of graph-compiled's 154 ms, about 12x the time to stream the weights.
The later variants test what a decode step's products are: a few rows (one per sequence) against a weight,
a matrix-vector product more than a GEMM. `compiled-rows-mm` has inductor write them as a fused reduction
(use_rows_mm), as it does for one row with coordinate-descent tuning (`compiled-cdt`), the way gpt-fast
reaches the bandwidth floor at batch 1; `compiled-rows-mm-cdt` tunes those reductions too.
Since commit 7326f56 graph-compiled writes those products as reductions itself (row_reductions), so `compiled`
there is what `compiled-rows-mm` was here; the rows-mm variants, whose limits are the engine's, find nothing more to
decompose on CUDA (`rows_mm_traced` counts what they did), only on a CPU host, where the engine leaves products alone.
`--batches` runs each variant at each batch size (each its own process): the sweep's graph engines dip at batch 8
and 16 on SmolLM2's shape, where cuBLAS's FP32 kernel for k_proj and v_proj is ten times slower (probe-cliff), and
those products are reductions in `compiled` now; `--prompt 41` is SmolLM2's chat prompts' padded length there.
Nothing here is part of the study's measuring code: the sweep's points keep their fingerprint.
On the device: TEARDOWN_CUPTI=1 python3 tools/probe_gemm.py OUT.json [--model NAME] [--variants a,b]
[--batches 4,8] [--prompt N]
On a CPU host (plumbing only, no graphs): python3 tools/probe_gemm.py OUT.json --device cpu --model synthetic
(--device: cuda, the default, or cpu: no index, no auto; --model: a name the study's `model` takes)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# Inductor options added to the engine's own (graph_compiled.INDUCTOR_OPTIONS) per variant; `graph` is
# the uncompiled engine. TF32 stays off in every variant: generate() runs in full FP32. ROWS_MM (not an
# inductor option, taken out before the rest are passed on): the matrix products of at most that many rows
# become a multiply and a sum over the shared dimension, which inductor writes as one fused reduction kernel
# (below), instead of cuBLAS's.
ROWS_MM = "rows_mm"
VARIANTS = {
    "graph": None,
    "compiled": {},
    "compiled-autotune-gemm": {"max_autotune_gemm": True, "max_autotune_gemm_backends": "TRITON,ATEN"},
    "compiled-autotune-gemm-cdt": {"max_autotune_gemm": True, "max_autotune_gemm_backends": "TRITON,ATEN",
                                   "coordinate_descent_tuning": True},
    "compiled-cdt": {"coordinate_descent_tuning": True},
    "compiled-rows-mm": {ROWS_MM: 16},
    "compiled-rows-mm-cdt": {ROWS_MM: 16, "coordinate_descent_tuning": True},
}
BATCH, PROMPT, NEW, STEADY = 4, 32, 64, 5  # the batch and prompt length unless --batches and --prompt say
MAX_BATCH, MAX_PROMPT = 64, 512
# A weight the rows' reduction reads once per row: kept to those that stay in L2 between the rows (H200: 50 MB;
# 2**22 FP32 values are 16 MiB), so the vocabulary projection (49,152 x 576 on SmolLM2) stays cuBLAS's.
ROWS_MM_MAX_WEIGHT = 2 ** 22
ROWS_MM_SEEN = {"decomposed": 0, "left_to_inductor": 0}  # aten.mm calls traced, per way (compiles trace once)


def use_rows_mm(rows: int) -> None:
    """Inductor's decomposition of aten.mm, for this process: a product of at most `rows` rows (the decode
    steps: one row per sequence) and a weight of at most ROWS_MM_MAX_WEIGHT values becomes
    (mat1[:, :, None] * mat2[None]).sum(1), which inductor fuses into one reduction; the rest goes on to
    inductor's own decomposition (which, with coordinate-descent tuning, does this for one row only: gpt-fast's
    batch-1 decode). Computed in FP32 (inductor's pw_cast_for_opmath) and rounded once, as cuBLAS accumulates;
    the order of the sum is another, so parity is checked, not assumed."""
    import torch
    from torch._inductor import decomposition

    aten, table = torch.ops.aten, decomposition.decompositions
    inductors = table[aten.mm.default]

    @decomposition.pw_cast_for_opmath
    def rows_mm(mat1, mat2, *args, **kwargs):
        if not args and not kwargs and mat1.dim() == 2 and mat1.shape[0] <= rows and mat2.numel() <= ROWS_MM_MAX_WEIGHT:
            return (mat1.unsqueeze(2) * mat2.unsqueeze(0)).sum(dim=1)
        return NotImplemented

    def mm(mat1, mat2, *args, **kwargs):
        done = rows_mm(mat1, mat2, *args, **kwargs)
        ROWS_MM_SEEN["left_to_inductor" if done is NotImplemented else "decomposed"] += 1
        return inductors(mat1, mat2, *args, **kwargs) if done is NotImplemented else done

    table[aten.mm.default] = mm
    decomposition.fast_random_decomps.cache_clear()  # the table inductor reads is built once, from this one


def study_params(model_name: str, device: str, batch: int | None = None, prompt: int | None = None):
    """The parameters each child's study is given: the parent checks them with this before any child starts, the
    model first, then with the batch and lengths (a local checkpoint's position table must hold the prompt and the
    new tokens, as the study's own run checks)."""
    from rollout_study.params import StudyParams

    shape = {} if prompt is None else {"batch_size": batch, "prompt_len": prompt, "max_new_tokens": NEW}
    return StudyParams.from_dict({"device": device, "model": model_name, "dtype": "float32", **shape})


def one(variant: str, model_name: str, device: str, batch: int = BATCH, prompt: int = PROMPT) -> dict:
    import torch
    import transformers

    from rollout_study import models, parity
    from rollout_study.engines import graph_compiled
    from rollout_study.engines.graph import GraphEngine
    from rollout_study.reference import reference
    from rollout_study.timing import CallClock, profile_call
    from rollout_study.workload import random_workload

    params = study_params(model_name, device, batch, prompt)
    loaded = models.load(params, device, "float32")
    model = loaded.model
    workload = random_workload(batch, batch, prompt, model.config.vocab_size, seed=0, pad_token_id=loaded.pad_token_id)
    extra = VARIANTS[variant]
    if extra is None:
        engine = GraphEngine(model, device, "reuse", prompt, NEW)
    else:
        options = dict(extra)
        if ROWS_MM in options:
            use_rows_mm(options.pop(ROWS_MM))
        graph_compiled.INDUCTOR_OPTIONS = {**graph_compiled.INDUCTOR_OPTIONS, **options}
        engine = graph_compiled.GraphCompiledEngine(model, device, "reuse", prompt, NEW, backend="inductor")

    def call():
        clock = CallClock(device).start()
        out = engine(workload.batches, clock)
        clock.stop()
        return out, clock

    begin = time.perf_counter()
    out, clock = call()
    first = {"wall_s": time.perf_counter() - begin, "breakdown_ms": dict(clock.breakdown)}
    walls = []
    for _ in range(STEADY):
        begin = time.perf_counter()
        out, _ = call()
        walls.append((time.perf_counter() - begin) * 1e3)
    seen = profile_call(call, torch.device(device))
    ref = reference(model, workload.batches, NEW, loaded.pad_token_id, device)
    check = parity.compare(out.to_cpu(), ref, [b.request_ids for b in workload.batches])
    steps = len(workload.batches) * NEW
    return {"variant": variant, "model": model_name, "device": device, "options": extra,
            "batch": batch, "prompt_len": prompt, "new_tokens": NEW, "steps_per_call": steps,
            "first_call": first, "steady_ms": walls, "steady_median_ms": statistics.median(walls),
            "kernel_ms": seen.get("kernel_ms"), "kernels": seen.get("kernels"),
            "kernel_ms_per_step": (seen.get("kernel_ms") or 0) / steps,
            "kernels_per_step": (seen.get("kernels") or 0) / steps,
            "top_kernels": seen.get("top_kernels"), "engine": engine.describe(), "parity_ok": check["ok"],
            "rows_mm_traced": dict(ROWS_MM_SEEN) if extra and ROWS_MM in extra else None,
            "first_mismatch": None if check["ok"] else str(check.get("mismatch"))[:2000],
            # what the README of a probe's output names: recorded, not copied from a call's output
            "torch": torch.__version__, "transformers": transformers.__version__,
            "device_name": torch.cuda.get_device_name() if device == "cuda" else device,
            "commit": os.environ.get("ROLLOUT_STUDY_COMMIT"), "pid": os.getpid()}


def whole_numbers(text: str, name: str, most: int, single: bool = False) -> list[int]:
    """Comma-separated whole numbers from 1 to `most` (just one where `single`), or the error naming the option."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        values = []
    if not values or any(not 1 <= v <= most for v in values) or (single and len(values) > 1):
        wanted = "a whole number" if single else "comma-separated whole numbers"
        raise SystemExit(f"{name}: {wanted} from 1 to {most}, not {text!r}")
    return values


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--model", default="synthetic-smollm2-135m")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))  # a child's study takes no index
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--batches", default=str(BATCH), help=f"comma-separated batch sizes, 1 to {MAX_BATCH}")
    ap.add_argument("--prompt", default=str(PROMPT), help=f"padded prompt length, 1 to {MAX_PROMPT}")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # a child: this variant only, JSON on stdout's last line
    args = ap.parse_args()
    # Said before any child starts (a compile takes a minute or more)
    batches = whole_numbers(args.batches, "--batches", MAX_BATCH)
    (prompt,) = whole_numbers(args.prompt, "--prompt", MAX_PROMPT, single=True)
    if args.one:
        print(json.dumps(one(args.one, args.model, args.device, batches[0], prompt)))
        return 0
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"--variants: unknown {unknown}; allowed: {', '.join(VARIANTS)}")
    import torch

    from rollout_study.param_values import ParameterError

    if args.device == "cuda" and not torch.cuda.is_available():  # every child would fail the same way
        raise SystemExit("--device: cuda, but no CUDA device is here; allowed here: cpu")
    try:
        study_params(args.model, args.device)
    except ParameterError as err:
        raise SystemExit(f"--model: {err}") from None
    try:
        study_params(args.model, args.device, max(batches), prompt)
    except ParameterError as err:
        raise SystemExit(f"--prompt: {prompt} with the probe's {NEW} new tokens: {err}") from None
    results = []
    for batch in batches:
        for variant in variants:
            begin = time.perf_counter()
            with tempfile.TemporaryDirectory(prefix=f"probe-gemm-{variant}-") as cache:
                done = subprocess.run([sys.executable, __file__, args.out, "--one", variant, "--model", args.model,
                                       "--device", args.device, "--batches", str(batch), "--prompt", str(prompt)],
                                      capture_output=True, text=True,
                                      env={**os.environ, "TEARDOWN_CUPTI": "1", "TORCHINDUCTOR_CACHE_DIR": cache})
            took = time.perf_counter() - begin
            if done.returncode == 0:
                row = json.loads(done.stdout.strip().splitlines()[-1])
                row["process_s"] = took
                print(f"{variant} batch {batch}: {took:.0f} s, steady {row['steady_median_ms']:.2f} ms, kernel "
                      f"{row['kernel_ms']:.2f} ms ({row['kernels_per_step']:.0f} kernels/step), parity "
                      f"{row['parity_ok']}", flush=True)
            else:
                row = {"variant": variant, "batch": batch, "prompt_len": prompt, "error": done.returncode,
                       "stderr": done.stderr[-4000:], "process_s": took}
                print(f"{variant} batch {batch}: FAILED ({done.returncode}) {done.stderr[-600:]}", flush=True)
            results.append(row)
            with open(args.out, "w") as handle:  # after each process: a later one's crash keeps the earlier
                json.dump(results, handle, indent=1)
    return 1 if any("error" in row for row in results) else 0


if __name__ == "__main__":
    sys.exit(main())
