"""Probe: does the profiler's tracing lengthen the kernels it records, in a replay and out of one?

The study's profiling process runs `rollout_study.tracing.measure` (a graph of small kernels, replayed
without and with the profiler). This probe adds what that does not time: the same steps launched
from the host, queued back to back behind a spin kernel (`eager-queued`), recorded by the profiler:
whether kernels back to back but outside a graph are recorded as long as in a replay (the study's own
check has them one at a time, as a host-bound generate() runs them, in `alone_us_per_kernel`).
On the H200 at 2f35927 queued and one at a time gave the same durations (0.889/0.888 us an add,
4.458/4.447 a GEMV, 1.850/1.849 a softmax), both below the replay's (1.005, 4.654, 1.971).
On the device: TEARDOWN_CUPTI=1 python3 tools/probe_profiler.py OUT.json
"""
from __future__ import annotations

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from rollout_study import tracing  # noqa: E402
from rollout_study.timing import profile_call  # noqa: E402

SPIN_CYCLES = 200_000_000  # about 0.1 s at 2 GHz: longer than the host takes to queue every step behind it
QUEUED = 800  # kernels: below the device's queue of pending launches (about 1,024), past which the host would wait


def queued(kind: str, device: torch.device, kernels_per_step: int) -> dict:
    step = tracing.step_function(kind, device)
    for _ in range(50):
        step()
    torch.cuda.synchronize(device)

    def launches():
        torch.cuda._sleep(SPIN_CYCLES)  # the steps queue up behind it, then run back to back
        for _ in range(QUEUED // kernels_per_step):
            step()

    seen = profile_call(launches, device)
    kernels = [k for k in seen["top_kernels"] if "spin" not in k["name"]]  # the spin kernel is not the probe's
    count, ms = sum(k["count"] for k in kernels), sum(k["ms"] for k in kernels)
    return {"kernels": count, "names": [k["name"] for k in kernels], "wall_ms": seen["wall_ms"],
            "us_per_kernel": 1e3 * ms / count if count else None}


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("probe_profiler needs a CUDA device (it probes the GPU); none is available here")
    os.environ.setdefault("TEARDOWN_CUPTI", "1")
    device = torch.device("cuda")
    probes = tracing.measure(device)  # the replays first: no profiler session precedes them
    for probe in probes:
        if "error" not in probe:
            probe["eager-queued"] = queued(probe["kind"], device, probe["kernels_per_step"])
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "probes": probes}
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=1)

    def us(value):
        return "-" if value is None else f"{value:.3f}"

    for p in probes:
        if "error" in p:
            print(p["kind"], "failed:", p["error"])
            continue
        print(f"{p['kind']:8s} per kernel ({p['kernels_per_step']} per step): unprofiled replay "
              f"{us(p['replay_us_per_kernel'])} us (max {us(max(p['replay_us_per_kernel_samples']))}), profiled "
              f"{us(p['profiled_wall_us_per_kernel'])}; recorded: "
              f"in the replay {us(p['recorded_us_per_kernel'])}, "
              f"eager queued {us(p['eager-queued']['us_per_kernel'])}, "
              f"alone {us(p['alone_us_per_kernel'])}")


if __name__ == "__main__":
    main()
