"""The Ray executor's slots by NUMA node (numa.py, sweep_ray._pin): on a host that says where its GPUs sit, a point
takes cores beside its GPU; where it says nothing usable, the even split in core order, as before."""
import sys
import types

import pytest

from rollout_study import numa, repeats, sweep_ray
from rollout_study.environment import core_count, core_ranges, range_cores

from test_repeats import _at, _run

# GPU 0 sits on node 1 and GPU 1 on node 0: a slot follows its GPU's node, not its place in the list
GPUS = [("0", "GPU-aaa", "00000000:19:00.0", "NVIDIA H200"), ("1", "GPU-bbb", "00000000:B1:00.0", "NVIDIA H200")]


def _host(root, cpulists: dict, devices: dict, siblings: dict | None = None):
    for core, text in (siblings or {}).items():
        (root / "devices" / "system" / "cpu" / f"cpu{core}" / "topology").mkdir(parents=True)
        (root / "devices" / "system" / "cpu" / f"cpu{core}" / "topology" / "thread_siblings_list").write_text(text)
    for node, text in cpulists.items():
        (root / "devices" / "system" / "node" / f"node{node}").mkdir(parents=True)
        (root / "devices" / "system" / "node" / f"node{node}" / "cpulist").write_text(text + "\n")
    for bus, node in devices.items():
        (root / "bus" / "pci" / "devices" / bus).mkdir(parents=True)
        (root / "bus" / "pci" / "devices" / bus / "numa_node").write_text(f"{node}\n")
    return root


@pytest.fixture
def two_sockets(tmp_path):
    return _host(tmp_path, {0: "0-7", 1: "8-15"}, {"0000:19:00.0": 1, "0000:b1:00.0": 0})


def test_a_core_list_reads_as_the_kernel_writes_it():
    assert range_cores("0-3,8\n") == [0, 1, 2, 3, 8] and range_cores("") == []
    assert core_count(core_ranges([8, 0, 1, 2, 3])) == 5 and core_count("") is None  # written and read back


def test_each_gpus_slot_is_a_share_of_its_own_nodes_cores(two_sockets):
    for listed in (GPUS, GPUS[::-1]):  # slot i is GPU i's, whatever order nvidia-smi lists them in
        layout = numa.layout(list(range(16)), 2, True, two_sockets, listed)
        assert layout.how == "numa" and layout.shares == [list(range(8, 16)), list(range(8))]
        assert (layout.slot_of("0"), layout.slot_of("GPU-bbb"), layout.slot_of(None), layout.slot_of("7")) == (
            0, 1, None, None)
        assert layout.slot_nodes == [1, 0] and layout.gpu_nodes["GPU-aaa"] == 1


def test_gpus_of_one_node_split_its_cores_and_the_other_node_lends_none(tmp_path):
    root = _host(tmp_path, {0: "0-7", 1: "8-15"}, {"0000:19:00.0": 0, "0000:b1:00.0": 0})
    layout = numa.layout(list(range(16)), 2, True, root, GPUS)
    assert layout.how == "numa" and layout.shares == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_every_slot_is_as_large_as_the_smallest_and_keeps_whole_physical_cores(tmp_path):
    # node 0: cores 0-3 and their hyperthreads 8-11; node 1: 4-7 and 12-15, this worker allowed 4-5 and 12-13 of it
    siblings = {c: f"{c % 8},{c % 8 + 8}" for c in range(16)}
    root = _host(tmp_path, {0: "0-3,8-11", 1: "4-7,12-15"}, {"0000:19:00.0": 1, "0000:b1:00.0": 0}, siblings)
    cores = [0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13]
    layout = numa.layout(cores, 2, True, root, GPUS)
    assert layout.how == "numa" and layout.shares == [[4, 12, 5, 13], [0, 8, 1, 9]]  # 4 each, of node 0's 8
    both_on_zero = _host(tmp_path / "zero", {0: "0-3,8-11", 1: "4-7,12-15"},
                         {"0000:19:00.0": 0, "0000:b1:00.0": 0}, siblings)
    assert numa.layout(cores, 2, True, both_on_zero, GPUS).shares == [[0, 8, 1, 9], [2, 10, 3, 11]]
    # cut in order without a NUMA layout, a physical core's two threads still in one slot (not [0-5], [8-13])
    assert numa.layout(cores, 2, True, both_on_zero, []).shares == [[0, 8, 1, 9, 2, 10], [3, 11, 4, 12, 5, 13]]
    # three threads a share would split a physical core: two, a whole core each, the rest unused
    assert numa.layout(cores, 4, True, both_on_zero, []).shares == [[0, 8], [1, 9], [2, 10], [3, 11]]


def test_a_worker_given_one_thread_of_a_core_still_cuts_whole_physical_cores(tmp_path):
    # cores c and c + 8 are one physical core; of core 3 the worker has one thread. Counted by its fewest threads
    # (1), shares of 3 would put core 1's two threads in two slots; counted by its most, shares are whole cores
    siblings = {c: f"{c % 8},{c % 8 + 8}" for c in range(16)}
    root = _host(tmp_path, {0: "0-15"}, {}, siblings)
    cores = [3, 10, 2, 9, 1, 8, 0]
    assert numa.physical_order(cores, root) == ([0, 8, 1, 9, 2, 10, 3], 2)
    assert numa.layout(cores, 2, True, root, []).shares == [[0, 8], [1, 9]]


@pytest.mark.parametrize("case", ["one node", "node unknown", "gpus not ray's", "no sysfs", "too few near",
                                  "mixed models", "cpu"])
def test_without_a_usable_layout_the_cores_are_cut_evenly_in_order(tmp_path, case, monkeypatch):
    cores, slots, gpus, cuda = list(range(16)), 2, GPUS, True
    root = _host(tmp_path, {0: "0-7", 1: "8-15"}, {"0000:19:00.0": 1, "0000:b1:00.0": 0})
    if case == "one node":
        root = _host(tmp_path / "one", {0: "0-15"}, {"0000:19:00.0": 0, "0000:b1:00.0": 0})
    elif case == "node unknown":  # what the kernel writes for a device whose node it does not know
        (root / "bus" / "pci" / "devices" / "0000:19:00.0" / "numa_node").write_text("-1\n")
    elif case == "gpus not ray's":  # Ray's node was given one GPU of the host's two
        slots = 1
    elif case == "no sysfs":
        root = tmp_path / "nothing"
    elif case == "too few near":  # both GPUs on node 1, of whose cores this worker may use one
        root = _host(tmp_path / "few", {0: "0-7", 1: "8-15"}, {"0000:19:00.0": 1, "0000:b1:00.0": 1})
        cores = list(range(9))
    elif case == "mixed models":  # CUDA's numbering (fastest first) need not be NVML's
        monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
        gpus = [GPUS[0], (*GPUS[1][:3], "NVIDIA H100")]
    else:
        cuda = False
    layout = numa.layout(cores, slots, cuda, root, gpus)
    half = len(cores) // slots
    assert layout.how == "even" and layout.slot_of("0") is None
    assert layout.shares == [cores[s * half:(s + 1) * half] for s in range(slots)]
    if case == "mixed models":  # unless the numbering is the bus order, as NVML's is
        monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        assert numa.layout(cores, slots, cuda, root, gpus).how == "numa"


def test_a_pci_bus_id_reads_in_nvidia_smis_form_and_sysfs_form(two_sockets):
    assert numa.pci_node("00000000:B1:00.0", two_sockets) == 0 and numa.pci_node("0000:19:00.0", two_sockets) == 1
    assert numa.pci_node("00000000:01:00.0", two_sockets) is None
    # a domain past 0xffff (a VMD controller's) is its own device, not domain 0's
    (two_sockets / "bus" / "pci" / "devices" / "10000:19:00.0").mkdir(parents=True)
    (two_sockets / "bus" / "pci" / "devices" / "10000:19:00.0" / "numa_node").write_text("0\n")
    assert numa.pci_node("00010000:19:00.0", two_sockets) == 0


@pytest.fixture
def fake_ray(monkeypatch, tmp_path, two_sockets):
    """_pin on a two-GPU node of the two-socket host, its GPU what `gpu[0]` says, nothing pinned for real."""
    gpu, pinned = ["1"], []
    ray = types.SimpleNamespace(
        get_runtime_context=lambda: types.SimpleNamespace(get_node_id=lambda: "n1"),
        nodes=lambda: [{"NodeID": "n1", "Resources": {"GPU": 2.0, "CPU": 16.0}}],
        get_gpu_ids=lambda: list(gpu), util=types.SimpleNamespace(get_node_ip_address=lambda: "10.0.0.2"))
    monkeypatch.setitem(sys.modules, "ray", ray)
    monkeypatch.setenv("ROLLOUT_STUDY_SLOTS", str(tmp_path / "slots"))
    monkeypatch.setattr(sweep_ray, "_worker_cores", list(range(16)))
    monkeypatch.setattr(sweep_ray, "_layouts", {(2, True): numa.layout(list(range(16)), 2, True, two_sockets, GPUS)})
    monkeypatch.setattr(sweep_ray.os, "sched_setaffinity", lambda pid, cores: pinned.append(list(cores)))
    return gpu, pinned


def test_a_ray_point_takes_the_cores_beside_its_gpu_and_records_where_they_were(fake_ray):
    gpu, pinned = fake_ray
    placement, held = sweep_ray._pin(True, prefer=0)  # a repeat's side-by-side slot yields to its GPU's
    assert (placement["slot"], placement["cores"], placement["layout"]) == (1, "0-7", "numa")
    assert (placement["gpu_numa_node"], placement["cores_numa_node"]) == (0, 0) and pinned == [list(range(8))]
    assert numa.beside_gpu(placement) is True
    # another sweep on the host holds GPU 1's slot: the point runs on the other node's cores and says so
    placement, other = sweep_ray._pin(True)
    assert (placement["slot"], placement["cores"], placement["cores_numa_node"]) == (0, "8-15", 1)
    assert numa.beside_gpu(placement) is False
    # every slot held: unpinned, on all the worker's cores, so neither beside its GPU nor away from it
    placement, none = sweep_ray._pin(True)
    assert (placement["pinned"], placement["cores"], none) == (False, "0-15", None) and pinned[-1] == list(range(16))
    assert numa.beside_gpu(placement) is None
    assert numa.beside_gpu({**placement, "cores_numa_node": 0}) is None  # unpinned: its cores were everywhere
    held.close(), other.close()


def test_a_points_wall_time_starts_after_its_pinning(monkeypatch):
    import time

    from rollout_study import launch

    def slow_pin(cuda, prefer):  # a worker's first task reads the host's layout (nvidia-smi) here
        time.sleep(0.3)
        return {"slot": 0}, None

    def refused(params):
        raise launch.LaunchError("no point here")

    monkeypatch.setattr(sweep_ray, "_pin", slow_pin)
    monkeypatch.setattr(launch, "point_launcher", lambda launcher, timeout_s=None: refused)
    reply = sweep_ray._ray_point({}, "fresh", False)
    assert reply["error"] == "no point here" and reply["placement"] == {"slot": 0} and reply["wall_s"] < 0.3


def test_a_slot_goes_back_at_once_when_its_placement_or_its_point_fails(fake_ray, monkeypatch):
    from rollout_study import launch

    def unanswered():
        raise OSError("no address")

    ray = sys.modules["ray"]
    monkeypatch.setattr(ray.util, "get_node_ip_address", unanswered)
    with pytest.raises(OSError, match="no address") as placing:  # kept, as Ray keeps a task's error
        sweep_ray._pin(True)
    monkeypatch.setattr(ray.util, "get_node_ip_address", lambda: "10.0.0.2")

    def stopped(params):  # the sweep stopped: no failure of the point's, Ray's to see
        raise KeyboardInterrupt

    monkeypatch.setattr(launch, "point_launcher", lambda launcher, timeout_s=None: stopped)
    with pytest.raises(KeyboardInterrupt) as running:
        sweep_ray._ray_point({}, "fresh", True)
    placement, held = sweep_ray._pin(True)  # GPU 1's slot, free again both times, not held by the errors kept
    assert placement["slot"] == 1 and placing.value and running.value
    held.close()


def test_a_points_own_error_comes_back_as_text_naming_its_kind_and_reads_back_as_its_failure(monkeypatch):
    from rollout_study import launch

    def refused(params):
        raise ValueError("no such engine")

    monkeypatch.setattr(sweep_ray, "_pin", lambda cuda, prefer: ({"slot": 0}, None))
    monkeypatch.setattr(launch, "point_launcher", lambda launcher, timeout_s=None: refused)
    reply = sweep_ray._ray_point({}, "fresh", False)
    assert reply["error"] == "ValueError: no such engine" and reply["result"] is None
    result, error, wall_s, placement = sweep_ray._outcome(reply)
    assert (result, str(error), wall_s, placement) == (None, "ValueError: no such engine", reply["wall_s"], {"slot": 0})
    assert isinstance(error, launch.LaunchError)  # recorded as its text, as a fresh process's failure is

    class Wrapped(Exception):  # Ray's RayTaskError: the task's own error is its cause
        cause = launch.LaunchError("the point's own")

    crashed = RuntimeError("the worker died")  # Ray's own, without a cause
    assert str(sweep_ray._unwrapped(Wrapped("ray's text"))) == "the point's own"
    assert sweep_ray._unwrapped(crashed) is crashed


def test_a_run_alone_on_other_cores_than_beside_its_gpu_is_not_compared():
    near = {"layout": "numa", "gpu_numa_node": 0, "cores_numa_node": 0, "pinned": True}
    far = {**near, "cores_numa_node": 1}
    side, alone = _run(_at(1.0)), _run(_at(1.0))
    entry = {"order": 0, "slug": "p0", "placement": near}
    runs = [({**entry, "run": 1}, alone), ({**entry, "run": 2, "placement": far}, alone)]
    (verdict,) = repeats.verdicts([(entry, side)], runs)
    assert verdict.verdict == "not compared"
    assert verdict.why == ("ran with other settings: cores on its GPU's NUMA node side by side, on another NUMA "
                           "node alone")
    (verdict,) = repeats.verdicts([(entry, side)], [({**entry, "run": n}, alone) for n in (1, 2)])
    assert verdict.verdict != "not compared"
    # slots cut another way alone (a sweep resumed across the layout's change): other cores at the same count
    assert repeats.placement_differs({"placement": {"layout": "even"}}, runs[1][0]) == (
        "slots laid out even side by side, numa alone")
    # a slot recorded before layouts were (cut in core order) is a layout of its own; none recorded: not compared
    assert repeats.placement_differs({"placement": {"slot": 0}}, runs[1][0]) == (
        "slots laid out unrecorded side by side, numa alone")
    assert repeats.placement_differs({"placement": {"slot": 0}}, {"placement": {"slot": 1}}) == ""
    assert repeats.placement_differs(None, runs[1][0]) == ""


def test_the_sweep_answer_says_where_its_ray_runs_sat_and_the_wall_table_who_ran_the_repeats(tmp_path):
    from rollout_study.present import sweep as report
    from rollout_study.present.sweep_cost import wall_table

    near = {"layout": "numa", "gpu_numa_node": 0, "cores_numa_node": 0, "pinned": True}
    record = {"spec": {"name": "sw"}, "wall": {"executor": "ray", "seconds": 1.0},
              "points": [{"slug": "a", "placement": near}, {"slug": "b", "placement": {**near, "cores_numa_node": 1}},
                         {"slug": "c", "placement": {**near, "pinned": False, "cores_numa_node": None}}],
              "repeats": {"points": [{"slug": "a", "run": 1, "executor": "ray", "placement": near,
                                     "file": "missing.json", "order": 0}]}}
    (line,) = [x for x in report.answer_lines(record, [], tmp_path) if x.startswith("placement")]
    assert line == ("placement: 3 of 4 Ray run(s) (points and runs alone) pinned to their slot's cores; 2 of them "
                    "with cores on their GPU's NUMA node, 1 on another")
    assert wall_table(record)["executor"].iloc[-1] == "ray, one at a time"
    for entry in record["points"] + record["repeats"]["points"]:
        entry["placement"] = {"layout": "even", "pinned": True}
    (line,) = [x for x in report.answer_lines(record, [], tmp_path) if x.startswith("placement")]
    assert line.startswith("placement: 4 of 4 Ray run(s)") and "no NUMA layout (one node" in line
    del record["repeats"]["points"][0]["executor"]  # an older record: repeated in a local process
    assert wall_table(record)["executor"].iloc[-1] == "local, one at a time"
    record["points"], record["repeats"] = [{"slug": "a"}], None  # the local executor records none
    assert not any(x.startswith("placement") for x in report.answer_lines(record, [], tmp_path))


def test_a_run_records_where_its_cores_sat_beside_its_gpu(two_sockets, monkeypatch):
    from rollout_study import environment
    from rollout_study.present.tables import metadata_rows, numa_text
    from rollout_study.result import Result
    from result_fixture import make_result

    where = numa.where([0, 1, 8, 9, 10], "0000:b1:00.0", two_sockets)
    assert where == {"nodes": 2, "gpu_node": 0, "cores_by_node": {"0": 2, "1": 3}}
    assert numa_text(where) == "2 node(s); GPU on node 0; the run's cores: node 0 2, node 1 3"
    assert numa.where([0], None, two_sockets)["gpu_node"] is None and numa.where([0], None, two_sockets / "x") is None
    # nodes by number (10 after 2), and a core no node lists counted apart
    many = _host(two_sockets.parent / "many", {2: "0-1", 10: "2-3"}, {})
    assert numa.where([3, 0, 7], None, many)["cores_by_node"] == {"2": 1, "10": 1, "unknown": 1}
    # a node file that does not read is left out, and a host that answers oddly loses the field, not the run
    (many / "devices" / "system" / "node" / "node10" / "cpulist").write_text("garbage")
    assert numa.where([3, 0], None, many) == {"nodes": 1, "gpu_node": None, "cores_by_node": {"2": 1, "unknown": 1}}
    monkeypatch.setattr(numa, "where", lambda cores, bus: 1 / 0)
    assert environment.hardware(environment.torch.device("cpu"))["numa"] is None
    assert numa_text(None) is None
    # the GPU's address from torch's properties, as /sys names it
    props = types.SimpleNamespace(pci_domain_id=1, pci_bus_id=0xB1, pci_device_id=3)
    assert environment.gpu_bus_id(props) == "0001:b1:03.0"
    assert environment.gpu_bus_id(types.SimpleNamespace()) is None  # a torch whose properties do not say
    # the metadata table shows it where recorded (runs before it have no row, not a blank one)
    result = Result.from_dict(make_result().to_dict(), "test")
    assert "NUMA" not in dict(metadata_rows(result))
    result.metadata["hardware"]["numa"] = where
    assert dict(metadata_rows(result))["NUMA"] == numa_text(where)


def test_a_host_that_answers_oddly_gets_the_even_cut_not_a_failed_point(monkeypatch):
    def odd(*args, **kwargs):
        raise ValueError("invalid literal for int() with base 10: '[N/A]'")

    monkeypatch.setattr(numa, "layout", odd)
    monkeypatch.setattr(sweep_ray, "_worker_cores", list(range(8)))
    monkeypatch.setattr(sweep_ray, "_layouts", {})
    # cores 0-3 and 4-7 are two threads each of four physical cores: still whole ones per slot
    monkeypatch.setattr(numa, "physical_order", lambda cores: (sorted(cores, key=lambda c: (c % 4, c)), 2))
    layout = sweep_ray._layout(2, True)
    assert (layout.how, layout.shares) == ("even", [[0, 4, 1, 5], [2, 6, 3, 7]])
    assert layout.why == "ValueError: invalid literal for int() with base 10: '[N/A]'"

    def long(*args, **kwargs):  # a tool's whole output: every point's placement in sweep.json carries it, cut
        raise ValueError("x" * 1000)

    monkeypatch.setattr(numa, "layout", long)
    assert sweep_ray._layout(4, True).why == "ValueError: " + "x" * 188
