"""Probe: why the H200 host dispatches tiny CPU operations at about 1.0 us in some stretches and 2.0-2.3 us
in others, within one process.

The sweep's 21 tiny points at 1280b96 (2026-12-01) measured `rollout_study.host_speed` at each run's
start and end: of the 42 figures, 20 were 0.99-1.15 us and 17 were 1.86-2.36 us (5 between), and the
start and end of 11 of the 21 processes fell on opposite sides of 1.5. generate() (host-bound) moved
with it, so most points' speed-ups over it are not comparable. This probe asks where the two speeds
come from, over a span as long as a sweep point (the speed changed within one):
  - a timeline of SECONDS: each sample pinned to the next allowed CPU in turn, or unpinned (every other
    sample, with the CPU it ran on), so a slow CPU and a slow stretch of time read differently
  - SMT: the CPU's topology siblings, and the first CPU measured while a spinning process holds its
    sibling (only a sibling this process may use; whether the spinner ran is recorded)
  - torch's intra-op threads: right after a parallel matrix product (OpenMP threads spin after a region)
On the device: python3 tools/probe_host.py OUT.json   (with OMP_NUM_THREADS as the study runs it)
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from rollout_study import host_speed  # noqa: E402

# A tiny sweep point's length: its host changed speed between start and end
SECONDS = float(os.environ.get("PROBE_SECONDS", 90))
INTERVAL = 0.1


def read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return None


def current_cpu() -> int | None:
    stat = read("/proc/self/stat")
    return int(stat.rsplit(")", 1)[1].split()[36]) if stat else None  # field 39: the CPU last run on


def cpu_model() -> str | None:
    for line in (read("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return None


def mhz() -> list[float]:
    return [float(line.split(":", 1)[1]) for line in (read("/proc/cpuinfo") or "").splitlines()
            if line.startswith("cpu MHz")]


def speed() -> float:
    """us per tiny op, as every result records it (host_speed.py)."""
    return host_speed.measure()["dispatch_us"]


def siblings(cpu: int, allowed: list[int]) -> list[int]:
    text = read(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") or ""
    found = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        if low.strip().isdigit():
            found.update(range(int(low), int(high or low) + 1))
    return [c for c in sorted(found) if c != cpu and c in allowed]


def timeline(cpus: list[int]) -> list[dict]:
    samples, begin, index = [], time.perf_counter(), 0
    while time.perf_counter() - begin < SECONDS:
        pinned = cpus[(index // 2) % len(cpus)] if index % 2 == 0 else None
        os.sched_setaffinity(0, {pinned} if pinned is not None else cpus)
        samples.append({"t": round(time.perf_counter() - begin, 3), "pinned": pinned, "us": speed(),
                        "cpu": current_cpu()})
        index += 1
        time.sleep(INTERVAL)
    os.sched_setaffinity(0, cpus)
    return samples


def sibling_busy(cpus: list[int]) -> dict | None:
    first = cpus[0]
    other = siblings(first, cpus)
    if not other:
        return None
    os.sched_setaffinity(0, {first})
    idle = [speed() for _ in range(5)]
    spin = subprocess.Popen(["taskset", "-c", str(other[0]), sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        busy = [speed() for _ in range(5)]
        spinning = spin.poll() is None  # taskset refusing the CPU would end it at once
    finally:
        spin.kill()
        os.sched_setaffinity(0, cpus)
    return {"cpu": first, "sibling": other[0], "idle_us": idle, "busy_us": busy, "spinner_ran": spinning}


def summary(samples: list[dict]) -> dict:
    by_cpu: dict = {}
    for s in samples:
        if s["pinned"] is not None:
            by_cpu.setdefault(s["pinned"], []).append(s["us"])
    unpinned = [s["us"] for s in samples if s["pinned"] is None]
    return {"pinned_median_min_max": {c: (statistics.median(v), min(v), max(v)) for c, v in sorted(by_cpu.items())},
            "unpinned_median_min_max": ((statistics.median(unpinned), min(unpinned), max(unpinned))
                                        if unpinned else None),
            "slow_share": sum(s["us"] > 1.5 for s in samples) / len(samples)}


def main() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    out = {"cpus": cpus, "omp_threads": torch.get_num_threads(), "model": cpu_model(),
           "siblings": {c: siblings(c, list(range(4096))) for c in cpus}, "mhz_start": mhz(),
           "governor": read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"), "loadavg": read("/proc/loadavg"),
           "host_speed_start": host_speed.measure()}
    out["timeline"] = timeline(cpus)
    out["summary"] = summary(out["timeline"])
    out["sibling_busy"] = sibling_busy(cpus)
    a = torch.randn(2048, 2048)
    after = []
    for _ in range(10):
        a @ a  # a parallel region: torch's OpenMP threads spin for a while after it
        after.append({"us": speed(), "cpu": current_cpu()})
    out["after_parallel_matmul"] = after
    out["host_speed_end"] = host_speed.measure()
    out["mhz_end"], out["loadavg_end"] = mhz(), read("/proc/loadavg")
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w", encoding="utf-8") as handle:
            json.dump(out, handle, indent=1)
    print("summary:", json.dumps(out["summary"]))
    print("timeline:", " ".join(f"{s['t']:.0f}s:{s['us']:.2f}@{s['cpu']}{'p' if s['pinned'] is not None else ''}"
                                for s in out["timeline"][::3]))
    print("sibling busy:", out["sibling_busy"])
    print("after matmul:", " ".join(f"{u['us']:.2f}@{u['cpu']}" for u in after))
    print("model:", out["model"], "siblings:", out["siblings"], "MHz:", out["mhz_start"][:4], out["governor"],
          out["loadavg"], out["loadavg_end"])


if __name__ == "__main__":
    main()
