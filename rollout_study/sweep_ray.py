"""The Ray executor of a sweep (sweep.py): each point a Ray task with one GPU (`num_gpus=1`; one CPU each on a
machine without CUDA), on a local Ray instance started for the sweep or on an existing cluster by address.

Points that share a host are pinned to disjoint shares of its cores: each task claims a free slot (one per GPU
Ray gives the node, or per CPU without CUDA) by a lock file per core of its share, keyed by host, and pins itself
to that slot's share of the cores its worker may use (two sweeps on one host share it out even where they cut the
cores otherwise; a task that finds every slot held runs unpinned and says so). Where the host gives a NUMA layout
(numa.py), slot i is a share of the cores of GPU i's node, and a task asks for its GPU's slot first; else the
shares are cut in core order and a slot's cores need not be its GPU's nearest. Each runs in a fresh process of
the sweep's launcher, which inherits the pinning and Ray's thread settings; each entry records where it ran
(`placement`: node, GPUs, slot, cores, the layout, and under a NUMA one the GPU's node and its cores') and each
result its cores and threads. The sampled points are then repeated alone (repeats.py) as Ray tasks too, one at a
time, on the node that ran them and in the slot they had (so on the same cores; the GPU is the one Ray hands out;
under a NUMA layout the slot of that GPU, so cores as near and as many): the same executor, threads and pinning,
nothing of the sweep beside them.

Ray's own retries are off (`max_retries=0`): a crashed worker's point is recorded as failed, not run again
unseen. A point whose result names other code than the sweep's (a cluster with another copy of the package
installed) is refused (sweep._Record.done), so every node must run this code.
"""
from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from pathlib import Path

from .param_values import ParameterError
from .params import StudyParams
from .result import Result
from .sweep import SweepSpec, _Record

_worker_cores: list[int] | None = None  # the cores this worker may use, before any task pinned it


class _Locks:
    """The lock files a task holds while its point runs; closing them frees its slot."""

    def __init__(self, handles: list):
        self.handles = handles

    def close(self):
        for handle in self.handles:
            handle.close()


def _free_slot(shares: list[list[int]], first: list[int | None] = ()):
    """(slot, its locks, held while the task runs) of a free slot of `shares` on this host, those in `first`
    first; (None, None) where every one is held or the lock folder cannot be written. A slot holds a lock per
    core of its share (one for the slot itself where its share is empty), keyed by host, not Ray node: two sweeps
    on one host, each with its own local instance, share its cores out even where they cut them otherwise (one
    laid out by NUMA node, one not)."""
    import fcntl
    import socket

    # ROLLOUT_STUDY_SLOTS: another folder for the locks (tests, so that runs beside them do not hold their slots)
    root = os.environ.get("ROLLOUT_STUDY_SLOTS") or Path(tempfile.gettempdir()) / "rollout-study-ray-slots"
    folder = Path(root) / socket.gethostname()
    wanted = [s for s in first if s is not None and 0 <= s < len(shares)]
    order = list(dict.fromkeys(wanted + list(range(len(shares)))))
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:  # a /tmp this user cannot write: run unpinned rather than fail the point
        return None, None
    for slot in order:
        held = []
        # in one order across sweeps (core number): of two that cut the cores otherwise, one always gets its slot
        for name in [f"core-{c}.lock" for c in sorted(shares[slot])] or [f"slot-{slot}.lock"]:
            try:
                handle = open(folder / name, "w")
            except OSError:
                break
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                break
            held.append(handle)
        else:
            return slot, _Locks(held)
        _Locks(held).close()
    return None, None


def _pin(cuda: bool, prefer: int | None = None) -> tuple[dict, object]:
    """Pin this worker (and so the point's process, which inherits it) to a free slot's share of the node's cores
    (one slot per GPU, or per CPU without CUDA), the slot beside its GPU first where the host gives a NUMA layout
    (numa.py); returns where it ran, as recorded, and the slot's locks to hold until the point ends. `prefer` (a
    repeat's: its side-by-side run's slot, so the same cores) comes next, or first without a NUMA layout."""
    import ray

    from .environment import allowed_cores, core_ranges

    global _worker_cores
    context = ray.get_runtime_context()
    node = context.get_node_id()
    if _worker_cores is None:  # a worker runs task after task (max_calls=0): cut shares from its first cores
        _worker_cores = allowed_cores()
    resources = next((n.get("Resources", {}) for n in ray.nodes() if n.get("NodeID") == node), {})
    slots = int(resources.get("GPU" if cuda else "CPU", 0))
    layout = _layout(slots, cuda)
    gpus = [str(g) for g in ray.get_gpu_ids()]
    gpu = gpus[0] if gpus else None
    # under a NUMA layout a repeat takes its GPU's slot first, which Ray may hand out other than its side-by-side
    # run's: the same nearness and as many cores (the shares are cut alike) rather than the same cores
    slot, held = _free_slot(layout.shares, [layout.slot_of(gpu), prefer])
    try:
        cores = list(layout.shares[slot]) if slot is not None else []
        why = "" if cores else ("unpinned: every slot held (another sweep on this host) or the lock folder unwritable"
                                if slot is None and slots else
                                f"unpinned: {len(_worker_cores)} core(s) for {slots} slot(s), slot {slot}")
        if cores:
            try:
                os.sched_setaffinity(0, cores)
            except OSError as err:
                cores, why = [], f"unpinned: {err}"
        if not cores and _worker_cores:
            os.sched_setaffinity(0, _worker_cores)  # undo an earlier task's pinning
        placement = {"node": node, "node_ip": ray.util.get_node_ip_address(), "gpus": gpus, "slot": slot,
                     "slots": slots, "cores": core_ranges(cores or _worker_cores), "pinned": bool(cores),
                     "layout": layout.how, **({"layout_why": layout.why} if layout.why else {})}
        if layout.how == "numa":
            placement.update(gpu_numa_node=layout.gpu_nodes.get(gpu),
                             cores_numa_node=layout.slot_nodes[slot] if cores else None)
    except BaseException:  # the slot goes back now, not when its handle is collected
        if held is not None:
            held.close()
        raise
    return ({**placement, "why": why} if why else placement), held


_layouts: dict = {}  # (slots, cuda) -> numa.SlotLayout: read once per worker (nvidia-smi and /sys)


def _layout(slots: int, cuda: bool):
    from . import numa

    if (slots, cuda) not in _layouts:
        try:
            _layouts[slots, cuda] = numa.layout(_worker_cores or [], slots, cuda)
        except Exception as err:  # a host that answers oddly (nvidia-smi, /sys) gets the even cut, not a failed
            cores, threads = numa.physical_order(_worker_cores or [])  # point; whole physical cores all the same
            _layouts[slots, cuda] = dataclasses.replace(numa.even(cores, slots, threads),
                                                        why=f"{type(err).__name__}: {err}"[:200])
    return _layouts[slots, cuda]


def _ray_point(params_dict: dict, launcher: str, cuda: bool, timeout_s: float | None = None,
               prefer: int | None = None) -> dict:
    """One point as a Ray task, pinned to a slot's share of the node's cores (`prefer`: a repeat's point's slot,
    free when nothing else runs; under a NUMA layout its GPU's comes first), run in a fresh process. Its own
    errors come back as text beside its wall time (from after the pinning: a worker's first task reads the host's
    layout, nvidia-smi among it) and placement (a crash of the worker itself reaches the driver)."""
    from .launch import LaunchError, point_launcher
    from .record import excerpt

    placement, held, start = {}, None, time.perf_counter()
    try:
        placement, held = _pin(cuda, prefer)
        start = time.perf_counter()
        run = point_launcher(launcher, timeout_s=timeout_s)
        result = run(StudyParams.from_dict(params_dict, source="ray task"))
        return {"result": result.to_dict(), "error": None, "wall_s": time.perf_counter() - start,
                "placement": placement}
    except Exception as err:  # recorded as the point's failure by the driver
        text = str(err) if isinstance(err, LaunchError) else excerpt(f"{type(err).__name__}: {err}")
        return {"result": None, "error": text, "wall_s": time.perf_counter() - start, "placement": placement}
    finally:
        if held is not None:
            held.close()


def _outcome(data: dict) -> tuple[Result | None, BaseException | None, float, dict]:
    """(result, error, wall seconds, placement) of a task's reply, as settle and the repeats take them."""
    from .launch import LaunchError

    error = LaunchError(data["error"]) if data.get("error") else None
    result = Result.from_dict(data["result"], "ray task") if data.get("result") is not None else None
    return result, error, data.get("wall_s"), data.get("placement") or {}


def run_ray(spec: SweepSpec, folder: Path, address: str | None = None, progress: bool = True) -> dict:
    """Every point as a Ray task, one GPU each (`num_gpus=1`; one CPU each without CUDA), on a local Ray instance
    started for the sweep (never one RAY_ADDRESS or `ray start` left running: address "local"), or on an
    existing cluster at `address`; then the sampled points alone (repeats.py), as Ray tasks on their nodes."""
    from .sweep_lock import locked

    with locked(folder):  # one sweep per folder (the command holds it already: the same process's lock)
        return _run_ray(spec, folder, address, progress)


def _run_ray(spec: SweepSpec, folder: Path, address: str | None, progress: bool) -> dict:
    import ray
    import torch

    from .environment import allowed_cores

    if ray.is_initialized():
        raise ParameterError("--executor ray: Ray is already initialized in this process, so the sweep cannot "
                             "start its own instance or connect to --address; allowed: a process without Ray "
                             "initialized")
    ray.init(address=address or "local", include_dashboard=False, log_to_driver=False,
             **({} if address else {"num_cpus": len(allowed_cores()) or os.cpu_count()}))
    try:
        gpus = int(ray.cluster_resources().get("GPU", 0))
        cuda = torch.cuda.is_available() or gpus > 0
        workers = gpus if cuda else int(ray.cluster_resources().get("CPU", 1))
        record = _Record(spec, folder, "ray" + (f" at {address}" if address else " (local instance)"), progress,
                         gpus=gpus, workers=workers)
        # max_calls=0: a worker runs task after task. Ray's default for GPU tasks is a new worker each, which
        # would start a new fork server each; the worker itself never touches the GPU (its point's process does).
        task = ray.remote(num_gpus=1 if cuda else 0, num_cpus=0 if cuda else 1, max_calls=0, max_retries=0)(
            _ray_point)
        timeout = spec.point_timeout_s
        running = {task.remote(params.to_dict(), spec.launcher, cuda, timeout): entry
                   for entry, params in record.pending(spec)}
        while running:
            (ready,), _ = ray.wait(list(running), num_returns=1)
            entry = running.pop(ready)
            try:
                result, error, wall_s, placement = _outcome(ray.get(ready))
            except Exception as err:  # the worker died (its point's process with it): Ray's error, unwrapped
                result, error, wall_s, placement = None, _unwrapped(err), None, {}
            record.done(entry, result, error, wall_s=wall_s, launcher=spec.launcher, executor="ray",
                        placement=placement)
        if spec.repeat_alone:
            from . import repeats

            repeats.run(spec, folder, progress, runner=_alone_runner(task, spec.launcher, cuda, timeout),
                        executor="ray")
        return record.data
    finally:
        ray.shutdown()


def _unwrapped(err: BaseException) -> BaseException:
    """The task's own error where Ray wrapped it (RayTaskError.cause); Ray's own (a dead worker) as it is."""
    return getattr(err, "cause", None) or err


def _alone_runner(task, launcher: str, cuda: bool, timeout: float | None):
    """A repeat's runner: the point's task again, alone, on the node its side-by-side run had (where recorded),
    asking for its slot (_pin: after its GPU's under a NUMA layout)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    def run(params: StudyParams, side: dict | None):
        placement = (side or {}).get("placement") or {}
        node, slot = placement.get("node"), placement.get("slot")
        options = {"scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=False)} if node else {}
        try:
            return _outcome(ray.get(task.options(**options).remote(params.to_dict(), launcher, cuda, timeout, slot)))
        except Exception as err:
            return None, _unwrapped(err), None, {}

    return run

