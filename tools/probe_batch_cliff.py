"""Probe: why the graph engines' decode step costs 2.5x more at batch 8 and 16 than at 4 or 32 (tiny model, FP32).

The sweep's tiny points on the H200 at 1280b96 (2026-12-01) gave the graph engine 0.18-0.33 ms per decode
step at batch 1-4, 0.63-0.75 ms at batch 8 and 16, and 0.28 ms at batch 32 (graph-compiled: 0.10-0.23,
0.51-0.63, 0.18), at every new-token count. Device-bound replays, so a kernel's choice, not the host. This
builds the graph engine's runner alone per batch (prompt 32, 64 new tokens, as the sweep), times its
replays with CUDA events, and records the kernels of one profiled rollout by summed time, so the kernel
that changes with batch is named. It also times the two candidates alone at each batch: the model's
GEMM shapes (cuBLAS, FP32) and the masked attention (SDPA).
`--model` takes a named synthetic shape instead: the SmolLM2 sweep's graph engines show the same dip at batch 8
and 16 (2026-12-04, 64 new tokens: 7.3 and 7.9 ms per decode step against 4.0 at batch 4 and 5.6 at 32), and a
kernel's choice depends on the shapes and the dtype, not on the weights, so random weights of SmolLM2's shape
(`synthetic-smollm2-135m`, with `--prompt 41`, the chat prompts' padded length there from batch 8 on) stand in
for the pretrained model without its parts.
`--new` and `--batches` take another length and other batch sizes (1 to 64): the 1B shape's graph step at batch 64
doubles from 64 to 512 new tokens (11.3 to 22.7 ms), and the static cache's attention runs over every position each
step, so `sdpa_us` (the cache's whole length) is timed beside `sdpa_half_us` (half the new tokens: the mean length a
growing cache attends over); `--length-bucket` gives the runner the study's length buckets (each decode graph
attends only up to its bucket).
On the device: TEARDOWN_CUPTI=1 python3 tools/probe_batch_cliff.py OUT.json [--model NAME --prompt N]
[--new N --batches 8,64] (or, for every batch and 64 new tokens, `bash tools/h200-reports.sh probe-cliff [NAME
PROMPT]`)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from rollout_study import masks, models, tracing  # noqa: E402
from rollout_study.bandwidth import event_timer  # noqa: E402
from rollout_study.engines.static_runner import StaticRunner  # noqa: E402
from rollout_study.param_values import SYNTHETIC, SYNTHETIC_SHAPES, ParameterError  # noqa: E402
from rollout_study.params import StudyParams  # noqa: E402
from rollout_study.workload import random_workload  # noqa: E402
from rollout_study.timing import profile_call  # noqa: E402

BATCHES = [1, 2, 4, 8, 16, 32, 64]
NEW = 64  # unless --new says


def events_ms(fn, repeats: int = 7) -> float:
    return statistics.median(event_timer(fn) for _ in range(repeats)) * 1e3


def rollout(model, batch: int, prompt: int, new: int, device, length_bucket: int = 0) -> dict:
    runner = StaticRunner(model, batch, prompt, new, device, "sdpa", length_bucket=length_bucket)
    # The sweep point's own prompts (the tiny model's): its seed's random lengths, left-padded, as the study
    # draws them. For a stand-in shape only the padded length matters: the kernels see no token's value.
    runner.load(random_workload(batch, batch, prompt, model.config.vocab_size, seed=0).batches[0])
    with torch.no_grad():
        runner.warmup()
        runner.capture(None)

        def once():
            runner.prefill()
            runner.decode()

        for _ in range(3):
            once()
        torch.cuda.synchronize()
        ms = events_ms(once)
        seen = profile_call(once, device)
    # Per decode step with the prefill spread over the steps, as the sweep report's "ms per decode step".
    return {"rollout_ms": ms, "ms_per_decode_step": ms / new, "kernel_ms": seen.get("kernel_ms"),
            "kernels": seen.get("kernels"), "top_kernels": seen.get("top_kernels")}


def graph_us(fn, device, count: int = 200) -> float:
    """Microseconds per call of `fn`, `count` calls captured in one CUDA graph (as the tracing check captures)
    and replayed: the device's time, not the host's launches (a tiny model's GEMM is shorter than its launch
    from Python)."""
    return events_ms(tracing.captured(fn, device, count).replay) / count * 1e3


def alone(model, batch: int, prompt: int, new: int, device) -> dict:
    """Layer 0's GEMMs, lm_head and the masked attention, each on its own (FP32, as the sweep)."""
    config, dtype = model.config, next(model.parameters()).dtype
    out = {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and ("layers.0." in name or name == "lm_head"):
            w = module.weight
            x = torch.randn(batch, w.shape[1], device=device, dtype=dtype)  # one decode token per row
            out[name.split(".")[-1] + "_us"] = graph_us(lambda: torch.nn.functional.linear(x, w), device)
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads  # as StaticRunner takes it
    q = torch.randn(batch, heads, 1, head_dim, device=device, dtype=dtype)
    # K and V with every query head: with a mask, transformers repeats the KV heads before SDPA (the
    # repeat's copies are the step's, not timed here).
    sdpa = torch.nn.functional.scaled_dot_product_attention
    # The static cache's whole length (what each step of one decode graph attends over), and half the new tokens
    # past the prompt (the mean length a cache that grows with the tokens attends over); with --length-bucket the
    # runner attends over its buckets' lengths, neither of these
    for key, length in (("sdpa_us", prompt + new), ("sdpa_half_us", prompt + new // 2)):
        k = torch.randn(batch, heads, length, head_dim, device=device, dtype=dtype)
        allowed = torch.ones(batch, 1, 1, length, dtype=torch.bool, device=device)
        mask = masks.for_attention(allowed, "sdpa", dtype)
        out[key] = graph_us(lambda: sdpa(q, k, k, attn_mask=mask), device)
    return out


def batch_list(text: str) -> list[int]:
    """--batches: comma-separated batch sizes from 1 to the sweep's largest."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        values = []
    if not values or any(not 1 <= v <= max(BATCHES) for v in values):
        raise argparse.ArgumentTypeError(f"comma-separated whole numbers from 1 to {max(BATCHES)}, not {text!r}")
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", help="JSON written after every batch")
    # Random weights only: a pretrained model would need its parts on the device, and a kernel's choice needs
    # only the shapes
    parser.add_argument("--model", default=SYNTHETIC, choices=(SYNTHETIC, *SYNTHETIC_SHAPES),
                        help="synthetic (the tiny model) or a named synthetic shape")
    parser.add_argument("--prompt", type=int, default=32, help="padded prompt length (the tiny sweep's 32)")
    parser.add_argument("--new", type=int, default=NEW, help=f"new tokens a rollout (default {NEW})")
    parser.add_argument("--length-bucket", type=int, default=0, help="decode graphs per bucket of this many cache "
                        "positions, each attending up to its bucket (the study's length_bucket; default 0, one graph)")
    parser.add_argument("--batches", type=batch_list, default=BATCHES, help="comma-separated (default all of "
                        + ",".join(map(str, BATCHES)) + ")")
    args = parser.parse_args()
    os.environ.setdefault("TEARDOWN_CUPTI", "1")
    device = torch.device("cuda")
    try:  # StudyParams checks the name and the length: said before the GPU is touched
        params = StudyParams.from_dict({"model": args.model, "dtype": "float32", "prompt_len": args.prompt,
                                        "max_new_tokens": args.new, "length_bucket": args.length_bucket},
                                       source="probe")
    except ParameterError as err:
        parser.error(f"--model, --prompt, --new or --length-bucket: {err}")
    if not torch.cuda.is_available():  # not a usage error: no usage
        sys.exit("probe_batch_cliff needs a CUDA device (it probes the GPU); none is available here")
    model = models.load(params, "cuda", "float32").model
    import transformers  # here, not at the top: the arguments are checked without it (models.load imports it)
    config = model.config
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "transformers": transformers.__version__,
               "commit": os.environ.get("ROLLOUT_STUDY_COMMIT"), "model": args.model,
               "prompt": args.prompt, "new_tokens": args.new, "length_bucket": args.length_bucket,
               "kv_heads": config.num_key_value_heads,
               "shape": {"layers": config.num_hidden_layers, "hidden": config.hidden_size,
                         "intermediate": config.intermediate_size, "vocab": config.vocab_size},
               "batches": []}
    for batch in args.batches:
        entry = {"batch": batch}
        try:  # a failing batch is recorded; the others still run
            entry.update(rollout(model, batch, args.prompt, args.new, device, args.length_bucket))
            with torch.no_grad():
                entry["alone_us"] = alone(model, batch, args.prompt, args.new, device)
            top = (entry["top_kernels"] or [{}])[0]
            print(f"batch {batch:3d}: {entry['ms_per_decode_step']:.3f} ms/step, kernel {entry['kernel_ms']} ms, "
                  f"top {top.get('name', '')[:80]} {top.get('ms', 0):.3f} ms x{top.get('count')}; alone us "
                  f"{ {k: round(v, 2) for k, v in entry['alone_us'].items()} }", flush=True)
        except Exception as err:  # noqa: BLE001 -- a probe: say what failed and go on
            entry["error"] = f"{type(err).__name__}: {err}"
            print(f"batch {batch:3d}: {entry['error']}", flush=True)
        results["batches"].append(entry)
        if args.out:  # after every batch: a crash later keeps what was measured
            with open(args.out, "w", encoding="utf-8") as handle:
                json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main()
