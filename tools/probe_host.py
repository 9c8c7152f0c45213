"""Probe: why the H200 host dispatches tiny CPU operations at about 1.0 us in some stretches and 2.0-2.3 us
in others, within one process.

The sweep's 21 tiny points at 1280b96 (2026-12-01) measured `rollout_study.host_speed` at each run's
start and end: every figure was near 1.0 or near 2.0-2.3 us, five loops of each measurement agreeing, and
start and end of one process often on opposite sides. generate() (host-bound) moved with it, so most
points' speed-ups over it are not comparable. This probe asks where the two speeds come from:
  - per CPU: the process pinned to each CPU in turn, three rounds (a slow CPU, or a slow stretch of time?)
  - unpinned: 40 measurements 50 ms apart, each with the CPU the process was on when it ended
  - SMT: the CPU's topology siblings, and CPU 0 measured while a spinning process holds its sibling
  - torch's intra-op threads: after a parallel matrix product (OpenMP threads that spin after a region)
On the device: python3 tools/probe_host.py OUT.json   (with OMP_NUM_THREADS as the study runs it)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from rollout_study import host_speed  # noqa: E402


def read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return None


def current_cpu() -> int | None:
    stat = read("/proc/self/stat")
    return int(stat.rsplit(")", 1)[1].split()[36]) if stat else None  # field 39: the CPU last run on


def mhz() -> list[float]:
    return [float(line.split(":")[1]) for line in (read("/proc/cpuinfo") or "").splitlines()
            if line.startswith("cpu MHz")]


def speed() -> float:
    return host_speed.measure()["dispatch_us"]


def main() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    out = {"cpus": cpus, "omp_threads": torch.get_num_threads(), "model": (read("/proc/cpuinfo") or "").split(
        "model name")[1].split("\n")[0].strip(": ") if "model name" in (read("/proc/cpuinfo") or "") else None,
           "siblings": {c: read(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list") for c in cpus},
           "mhz_start": mhz(), "governor": read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
           "loadavg": read("/proc/loadavg")}
    out["pinned_rounds"] = []
    for _ in range(3):
        row = {}
        for cpu in cpus:
            os.sched_setaffinity(0, {cpu})
            row[cpu] = speed()
        out["pinned_rounds"].append(row)
    os.sched_setaffinity(0, cpus)
    unpinned = []
    for _ in range(40):
        unpinned.append({"us": speed(), "cpu": current_cpu()})
        time.sleep(0.05)
    out["unpinned"] = unpinned
    sibling = (out["siblings"].get(cpus[0]) or "").replace("-", ",").split(",")
    other = [int(c) for c in sibling if c.strip().isdigit() and int(c) != cpus[0]]
    if other:
        spin = subprocess.Popen(["taskset", "-c", str(other[0]), sys.executable, "-c", "while True: pass"])
        try:
            time.sleep(0.5)
            os.sched_setaffinity(0, {cpus[0]})
            out["cpu0_sibling_busy"] = {"sibling": other[0], "us": [speed() for _ in range(5)]}
            out["cpu0_sibling_idle_before"] = [r[cpus[0]] for r in out["pinned_rounds"]]
        finally:
            spin.kill()
            os.sched_setaffinity(0, cpus)
    a = torch.randn(2048, 2048)
    after = []
    for _ in range(10):
        a @ a  # a parallel region: torch's OpenMP threads spin for a while after it
        after.append({"us": speed(), "cpu": current_cpu()})
    out["after_parallel_matmul"] = after
    out["mhz_end"] = mhz()
    text = json.dumps(out, indent=1)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w", encoding="utf-8") as handle:
            handle.write(text)
    for index, row in enumerate(out["pinned_rounds"]):
        print(f"round {index}:", " ".join(f"{cpu}:{us:.2f}" for cpu, us in row.items()))
    print("unpinned:", " ".join(f"{u['us']:.2f}@{u['cpu']}" for u in unpinned))
    print("sibling busy:", out.get("cpu0_sibling_busy"), "after matmul:", " ".join(f"{u['us']:.2f}@{u['cpu']}" for u in after))
    print("siblings:", out["siblings"], "MHz:", out["mhz_start"][:4], out["governor"], out["loadavg"])


if __name__ == "__main__":
    main()
