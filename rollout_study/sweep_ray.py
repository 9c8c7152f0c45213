"""The Ray executor of a sweep (sweep.py): each point a Ray task with one GPU (`num_gpus=1`; one CPU each on a
machine without CUDA), on a local Ray instance started for the sweep or on an existing cluster by address.
Points that share a host are pinned to disjoint cores; each runs in a fresh process of the sweep's launcher.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from .params import StudyParams
from .result import Result
from .sweep import SweepSpec, _Record


_worker_cores: list[int] | None = None  # the cores this worker may use, before any task pinned it


def _ray_point(params_dict: dict, cores_per_gpu: int, launcher: str) -> tuple[dict, float]:
    """One point as a Ray task: pinned to its GPU's share of the host's cores, run in a fresh process."""
    import ray

    from .launch import point_launcher

    global _worker_cores
    gpus = ray.get_gpu_ids()
    if gpus and cores_per_gpu and hasattr(os, "sched_setaffinity"):
        # Points that share a host get disjoint cores (of those this worker may use), so their host-bound
        # work does not contend; where the share is empty or refused, the point runs unpinned. A worker runs
        # task after task (max_calls=0), each maybe for another GPU: the share is cut from the worker's cores
        # as they were before its first task pinned it.
        if _worker_cores is None:
            _worker_cores = sorted(os.sched_getaffinity(0))
        share = _worker_cores[int(gpus[0]) * cores_per_gpu:(int(gpus[0]) + 1) * cores_per_gpu]
        try:
            os.sched_setaffinity(0, share or _worker_cores)
        except OSError:
            pass
    start = time.perf_counter()
    result = point_launcher(launcher)(StudyParams.from_dict(params_dict, source="ray task"))
    return result.to_dict(), time.perf_counter() - start


def run_ray(spec: SweepSpec, folder: Path, address: str | None = None, progress: bool = True) -> dict:
    """Every point as a Ray task, one GPU each (`num_gpus=1`; one CPU each without CUDA), on a local
    Ray instance started for the sweep, or on an existing cluster at `address`."""
    import ray
    import torch

    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 **({} if address else {"num_cpus": os.cpu_count()}))
    try:
        gpus = int(ray.cluster_resources().get("GPU", 0))
        cuda = torch.cuda.is_available() or gpus > 0
        workers = gpus if cuda else int(ray.cluster_resources().get("CPU", 1))
        record = _Record(spec, folder, "ray" + (f" at {address}" if address else " (local instance)"), progress,
                         gpus=gpus, workers=workers)
        cores = (os.cpu_count() or 1) // max(gpus, 1) if cuda else 0
        # max_calls=0: a worker runs task after task. Ray's default for GPU tasks is a new worker each, which
        # would start a new fork server each; the worker itself never touches the GPU (its point's process does).
        task = ray.remote(num_gpus=1 if cuda else 0, num_cpus=0 if cuda else 1, max_calls=0)(_ray_point)
        running = {task.remote(params.to_dict(), cores, spec.launcher): entry for entry, params in record.pending(spec)}
        while running:
            (ready,), _ = ray.wait(list(running), num_returns=1)
            entry = running.pop(ready)
            try:
                data, wall_s = ray.get(ready)
                record.done(entry, Result.from_dict(data, "ray task"), wall_s=wall_s, launcher=spec.launcher)
            except Exception as err:  # the task's own error, unwrapped where Ray wrapped it
                record.done(entry, error=getattr(err, "cause", None) or err, wall_s=None, launcher=spec.launcher)
        return record.data
    finally:
        if started_here:
            ray.shutdown()
