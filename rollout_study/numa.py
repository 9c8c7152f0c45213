"""The cores nearest each GPU of a host (its NUMA node), so that the Ray executor's slots (sweep_ray.py) give a
point the cores beside its GPU where the host says which those are.

A slot is a share of the cores a Ray worker may use, one slot per GPU of the node, every share as large as the
smallest (so points of one sweep run with as many cores; what is left over goes unused). The cores are taken in
physical-core order, a core's hyperthread siblings beside it, and a share is whole physical cores (unless one
core's threads are more than a share), so two slots do not split one physical core's threads. Where the host
gives a NUMA layout, slot i belongs to the GPU of NVML index i and is a share of that GPU's own node's cores:
each node's cores are cut among the GPUs attached to it (a node with no GPU lends none; so GPUs all on one socket
share that socket's cores). Without one, the shares are cut in that core order, whichever GPU takes them: the
worker's cores all on one node, no /sys, no nvidia-smi, a GPU whose node the kernel does not know (-1), a GPU's
node with fewer of the worker's cores than GPUs, Ray's GPU count not the host's, or GPUs of mixed models numbered
by CUDA (which orders them fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, leaving equal ones unspecified: in
practice bus order, NVML's, which the layout takes for GPUs of one model). Either way each placement records the
layout, and under a NUMA one the GPU's node and its cores', so a point that ran away from its GPU (its slot held
by another sweep on the host) says so.
"""
from __future__ import annotations

import os
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .environment import range_cores

SYS = Path("/sys")


@dataclass(frozen=True)
class SlotLayout:
    shares: list[list[int]]  # slot -> its cores
    how: str = "even"  # "numa" where each slot is its GPU's node's, else "even"
    slot_nodes: list[int | None] = field(default_factory=list)  # slot -> its cores' node ("numa" only)
    gpu_slots: dict[str, int] = field(default_factory=dict)  # a GPU's NVML index and UUID -> its slot
    gpu_nodes: dict[str, int] = field(default_factory=dict)  # a GPU's NVML index and UUID -> its node
    why: str = ""  # why the even cut where the host's answers could not be read (sweep_ray._layout)

    def slot_of(self, gpu: str | None) -> int | None:
        """The slot beside `gpu` (as Ray names it: an index or a UUID); None without a NUMA layout."""
        return self.gpu_slots.get(str(gpu)) if gpu is not None else None


def core_nodes(sys_root: Path = SYS) -> dict[int, int]:
    """Each core's NUMA node, from /sys/devices/system/node/node*/cpulist ({} where the kernel lists none; a file
    that does not read is left out: this runs in every run's metadata, which must not fail it)."""
    out = {}
    for path in sorted((sys_root / "devices" / "system" / "node").glob("node[0-9]*/cpulist")):
        try:
            out.update({core: int(path.parent.name[4:]) for core in range_cores(path.read_text())})
        except (OSError, ValueError):
            continue
    return out


def _first_sibling(core: int, sys_root: Path) -> int:
    """The lowest of a core's hyperthread siblings (itself included): its physical core's name."""
    path = sys_root / "devices" / "system" / "cpu" / f"cpu{core}" / "topology" / "thread_siblings_list"
    try:
        return min(range_cores(path.read_text()), default=core)
    except (OSError, ValueError):
        return core


def physical_order(cores: list[int], sys_root: Path = SYS) -> tuple[list[int], int]:
    """`cores` with each one's hyperthread siblings beside it (from /sys's topology), and how many threads a
    physical core has among them (1 where the kernel does not say): runs of a multiple of that many hand out
    whole physical cores."""
    first = {core: _first_sibling(core, sys_root) for core in cores}
    threads = max(Counter(first.values()).values(), default=1)
    return sorted(cores, key=lambda core: (first[core], core)), threads


def _whole(share: int, threads: int) -> int:
    """`share` rounded down to whole physical cores (as it is where it is smaller than one)."""
    return share - share % threads if share >= threads else share


def host_gpus() -> list[tuple[str, str, str, str]]:
    """(NVML index, UUID, PCI bus id, name) of each GPU of the host, from nvidia-smi ([] without it)."""
    try:
        text = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,pci.bus_id,name", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [tuple(f.strip() for f in line.split(",", 3)) for line in text.splitlines() if line.count(",") >= 3]


def pci_node(bus_id: str, sys_root: Path = SYS) -> int | None:
    """The NUMA node of a PCI device ('00000000:19:00.0', as nvidia-smi writes it); None where unknown."""
    domain, _, rest = bus_id.lower().partition(":")
    try:
        path = sys_root / "bus" / "pci" / "devices" / f"{int(domain, 16):04x}:{rest}" / "numa_node"
        node = int(path.read_text())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def even(cores: list[int], slots: int, threads: int = 1) -> SlotLayout:
    share = _whole(len(cores) // slots, threads) if slots else 0
    return SlotLayout([cores[s * share:(s + 1) * share] for s in range(slots)] if share else [[]] * slots)


def layout(cores: list[int], slots: int, cuda: bool, sys_root: Path = SYS, gpus=None) -> SlotLayout:
    """The slots' shares of `cores` (the worker's), by NUMA node where the host gives one (see the module's
    docstring), else cut in physical-core order; `gpus` as host_gpus() returns them (read here where None)."""
    if not cuda or slots < 1:
        return even(cores, slots)
    cores, threads = physical_order(cores, sys_root)
    gpus = host_gpus() if gpus is None else gpus
    node_of = core_nodes(sys_root)
    gpu_nodes = [pci_node(bus, sys_root) for _, _, bus, _ in gpus]
    mixed = len({name for *_, name in gpus}) > 1 and os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID"
    node_cores = {n: [c for c in cores if node_of.get(c) == n] for n in set(gpu_nodes)}
    if (len(gpus) != slots or None in gpu_nodes or mixed or len({node_of.get(c) for c in cores}) < 2
            or any(len(node_cores[n]) < gpu_nodes.count(n) for n in node_cores)):
        return even(cores, slots, threads)
    share = _whole(min(len(node_cores[n]) // gpu_nodes.count(n) for n in node_cores), threads)  # all as large
    shares, slot_nodes, gpu_slots, by_gpu = [], [], {}, {}
    for slot, ((index, uuid, _, _), node) in enumerate(sorted(zip(gpus, gpu_nodes), key=lambda g: int(g[0][0]))):
        mates = sorted(int(i) for (i, *_), n in zip(gpus, gpu_nodes) if n == node)
        rank = mates.index(int(index))
        shares.append(node_cores[node][rank * share:(rank + 1) * share])
        slot_nodes.append(node)
        gpu_slots.update({index: slot, uuid: slot})
        by_gpu.update({index: node, uuid: node})
    return SlotLayout(shares, "numa", slot_nodes, gpu_slots, by_gpu)


def where(cores: list[int], bus_id: str | None, sys_root: Path = SYS) -> dict | None:
    """Where a run sat (its metadata's hardware.numa): how many NUMA nodes with cores the host has (memory-only
    nodes are not counted), its GPU's node (from its bus id; None without a GPU or where the kernel does not say)
    and its cores per node ("unknown": a core no node lists); None where the kernel lists no nodes."""
    node_of = core_nodes(sys_root)
    if not node_of:
        return None
    counts = Counter(node_of.get(core, "unknown") for core in cores)
    by_node = {str(node): counts[node] for node in sorted(counts, key=lambda n: (isinstance(n, str), n))}
    return {"nodes": len(set(node_of.values())), "gpu_node": pci_node(bus_id, sys_root) if bus_id else None,
            "cores_by_node": by_node}


def beside_gpu(placement: dict | None) -> bool | None:
    """Whether a Ray point's cores were on its GPU's node; None where it ran unpinned or no NUMA layout was
    recorded (its cores then spanned what the worker had, on any node)."""
    placement = placement or {}
    if (placement.get("layout") != "numa" or not placement.get("pinned")
            or None in (placement.get("gpu_numa_node"), placement.get("cores_numa_node"))):
        return None
    return placement["cores_numa_node"] == placement["gpu_numa_node"]
