"""Probe: where the tiny model's `other` goes, the part of a steady graph call outside its replays (issue 11).

On the reference workload (reports/reference-tiny-all: two batches of 4, 32 new tokens, FP16, all decode steps
in one graph) a steady call of `graph-compiled` takes 5.64 ms: 0.26 ms of prefill replays, 4.64 ms of decode
replays and 0.74 ms of `other` (graph: 0.71 ms), for 4.33 ms of kernels. At 1.31x its kernel time it misses
issue 11's 1.2x; without `other` it would be 1.13x. The replays are timed by CUDA events, so `other` is the
time the GPU is not inside a replay: host work that the GPU waits for (the parameter check before the first
replay, loading each batch's prompt, the copies out) or a synchronization that makes it wait.

Each variant changes one thing, in its own process, with the `graph` engine (`reuse`; no compile: the replays
are what differs between the engines, not `other`):
- as-is: the study's call;
- unchecked: the `unchecked` policy, which skips the parameter walk before the call;
- pinned: the prompts in page-locked host memory, so their copies to the device need not wait for the stream;
- on-device: the prompts already on the device (a device-to-device copy into the graph's buffers);
- one-batch: one batch a call, for what is per call and what per batch.
Per variant, the medians over 50 steady calls of the total and its parts, `other`'s split on the device's clock
(timing.py: before the first replay, between replays, after the last), the host's speed, and the host time (not
synchronized) of the parameter check and of each batch's prompt loading, measured by wrapping them. A copy from
pageable host memory may wait for the stream (CUDA: "may synchronize"): the second batch's load would then hold the
host until the first batch's replays end, which its host time shows (milliseconds, not microseconds), and the pinned
and on-device variants would not.
Nothing here is part of the study's measuring code.
On the device: TEARDOWN_CUPTI=1 python3 tools/probe_rest.py OUT.json
On a CPU host (plumbing only: no events, no graphs): python3 tools/probe_rest.py OUT.json --device cpu
--variants as-is,unchecked,on-device,one-batch (`pinned` needs --device cuda, and is refused with cpu); --device cuda
(the default) or cpu: no index, no auto
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

VARIANTS = ("as-is", "unchecked", "pinned", "on-device", "one-batch")
WARM, CALLS = 3, 50


def one(variant: str, device: str) -> dict:
    import dataclasses

    import torch

    from rollout_study import host_speed, models
    from rollout_study.engines.graph import GraphEngine
    from rollout_study.params import StudyParams
    from rollout_study.timing import CallClock
    from rollout_study.workload import random_workload

    params = StudyParams.from_yaml(os.path.join(ROOT, "params", "reference-tiny-all.yaml"))
    params = StudyParams.from_dict({**params.to_dict(), "device": device})
    loaded = models.load(params, device, params.resolved_dtype(device))
    workload = random_workload(params.requests, params.batch_size, params.prompt_len, loaded.model.config.vocab_size,
                               seed=params.seed, pad_token_id=loaded.pad_token_id)
    batches = workload.batches[:1] if variant == "one-batch" else workload.batches
    if variant in ("pinned", "on-device"):
        if variant == "pinned" and not torch.cuda.is_available():
            raise SystemExit("pinned: page-locked memory needs CUDA")
        move = (lambda t: t.pin_memory()) if variant == "pinned" else (lambda t: t.to(device))
        batches = [dataclasses.replace(b, input_ids=move(b.input_ids), attention_mask=move(b.attention_mask))
                   for b in batches]
    engine = GraphEngine(loaded.model, device, "unchecked" if variant == "unchecked" else "reuse",
                         params.prompt_len, params.max_new_tokens, attn=params.attn,
                         steps_per_graph=params.steps_per_graph)
    host: dict[str, list[float]] = {"check_ms": [], "load_ms": []}  # this call's, in the order they ran

    def timed(name, fn):
        def wrapper(*args, **kwargs):
            begin = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                host[name].append((time.perf_counter() - begin) * 1e3)
        return wrapper

    engine.decide = timed("check_ms", engine.decide)
    rows = []
    for index in range(WARM + CALLS):
        if index == WARM:  # the runners exist now (one per batch size: the workload has one)
            for runner in engine.runners.values():
                runner.load = timed("load_ms", runner.load)
        for times in host.values():
            times.clear()
        clock = CallClock(device).start()
        engine(batches, clock)
        clock.stop()
        if index >= WARM:
            assert len(host["check_ms"]) == 1 and len(host["load_ms"]) == len(batches), host
            rows.append({"total_ms": clock.total_ms, **clock.breakdown, **(clock.other_split or {}),
                         "host_check_ms": host["check_ms"][0],
                         **{f"host_load_batch{i + 1}_ms": ms for i, ms in enumerate(host["load_ms"])}})
    median = {key: statistics.median(row[key] for row in rows) for key in rows[0]}
    return {"variant": variant, "device": device, "batches": len(batches), "calls": CALLS, "median_ms": median,
            "engine": engine.describe(), "torch": torch.__version__,
            "host_us_per_op": host_speed.measure()["dispatch_us"]}


def main() -> int:
    from rollout_study.present import other_split  # the clock's split of other, by the keys the report reads

    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))  # a child's study takes no index
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--one", help=argparse.SUPPRESS)  # a child: this variant only, JSON on stdout's last line
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.device)))
        return 0
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"--variants: unknown {unknown}; allowed: {', '.join(VARIANTS)}")
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():  # every child would fail the same way
        raise SystemExit("--device: cuda, but no CUDA device is here; allowed here: cpu")
    if "pinned" in variants and args.device != "cuda":
        raise SystemExit(f"--variants: pinned needs CUDA (page-locked memory), not --device {args.device}; "
                         f"allowed without it: {', '.join(v for v in VARIANTS if v != 'pinned')}")
    results = []
    for variant in variants:
        done = subprocess.run([sys.executable, __file__, args.out, "--one", variant, "--device", args.device],
                              capture_output=True, text=True, env={**os.environ, "TEARDOWN_CUPTI": "1"})
        if done.returncode == 0:
            row = json.loads(done.stdout.strip().splitlines()[-1])
            m = row["median_ms"]
            loads = ", ".join(f"{m[key]:.3f}" for key in m if key.startswith("host_load_batch"))
            split = ", ".join(f"{key[:-3]} {m[key]:.3f}" for key in other_split.KEYS if key in m)
            print(f"{variant}: total {m['total_ms']:.3f} ms, prefill {m['prefill']:.3f}, decode {m['decode']:.3f}, "
                  f"other {m['other']:.3f} ({split}); host: check {m['host_check_ms']:.3f}, load per batch {loads}; "
                  f"host {row['host_us_per_op']:.2f} us per tiny op", flush=True)
        else:
            row = {"variant": variant, "error": done.returncode, "stderr": done.stderr[-4000:]}
            print(f"{variant}: FAILED ({done.returncode}) {done.stderr[-600:]}", flush=True)
        results.append(row)
        with open(args.out, "w") as handle:
            json.dump(results, handle, indent=1)
    return 1 if any("error" in row for row in results) else 0


if __name__ == "__main__":
    sys.exit(main())
