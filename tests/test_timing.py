import time

import pytest

from rollout_study import timing
from rollout_study.timing import CallClock


def test_parts_are_disjoint_and_other_is_the_rest():
    clock = CallClock("cpu").start()
    with clock.part("capture"):
        time.sleep(0.02)
    time.sleep(0.01)
    with clock.device_part("decode"):  # without CUDA a device part is a synchronized part
        time.sleep(0.02)
    total, parts = clock.stop()
    assert total >= 50  # measured from start to stop, not as the sum of the parts
    assert parts["capture"] >= 20 and parts["decode"] >= 20 and parts["other"] >= 9  # the sleep between parts
    assert parts["warmup"] == 0 and parts["allocation"] == 0


def test_a_clock_without_cuda_splits_no_other():
    clock = CallClock("cpu").start()
    with clock.device_part("decode"):  # a synchronized part here: nothing on a device clock to split by
        time.sleep(0.001)
    clock.stop()
    assert clock.other_split is None


class _HostEvent:
    """A CUDA event's stand-in: stamped with the host clock at record(), so a CPU test can read the split."""

    device = type("Device", (), {"index": 0})()

    def record(self):
        self.at = time.perf_counter()

    def elapsed_time(self, end):
        return (end.at - self.at) * 1e3


@pytest.fixture
def host_events(monkeypatch):
    monkeypatch.setattr(timing, "synchronize", lambda device: None)
    monkeypatch.setattr(timing, "_timing_event", _HostEvent)
    monkeypatch.setattr(timing, "_SPARE_EVENTS", {})


def test_other_is_split_before_between_and_after_the_device_parts(host_events):
    clock = CallClock("cuda").start()
    time.sleep(0.03)
    with clock.device_part("prefill"):
        time.sleep(0.005)
    time.sleep(0.02)
    with clock.device_part("decode"):
        time.sleep(0.005)
    time.sleep(0.01)
    _, parts = clock.stop()
    split = clock.other_split
    assert sum(split.values()) == pytest.approx(parts["other"], abs=1e-9)
    for key, slept in (("before_first_part_ms", 30), ("between_parts_ms", 20), ("after_last_part_ms", 10)):
        assert slept <= split[key] < slept + 10, split
    assert len(timing._SPARE_EVENTS[0]) == 5  # the parts' four and the start event, for the next call


def test_a_host_part_leaves_other_unsplit(host_events):
    """Checked before the device parts join the host parts: a capture's synchronized host time has no event."""
    clock = CallClock("cuda").start()
    with clock.part("capture"):
        time.sleep(0.002)
    with clock.device_part("decode"):
        time.sleep(0.002)
    clock.stop()
    assert clock.other_split is None and clock.breakdown["decode"] >= 2
    charged = CallClock("cuda").start()
    with charged.device_part("decode"):
        pass
    charged.add("compile", 0.0)  # a part charged nothing is no host time
    charged.stop()
    assert charged.other_split is not None


def test_a_part_opened_again_in_one_call_adds_up(host_events):
    # an eager call opens decode once per step and a graph call replays once per step: each part is their sum
    clock = CallClock("cpu").start()
    for _ in range(2):
        with clock.part("decode"):
            time.sleep(0.01)
    assert clock.stop()[1]["decode"] >= 20
    replays = CallClock("cuda").start()
    for _ in range(2):
        with replays.device_part("decode"):
            time.sleep(0.01)
    assert replays.stop()[1]["decode"] >= 20


def test_nested_parts_are_refused():
    clock = CallClock("cpu").start()
    with pytest.raises(RuntimeError, match="disjoint"):
        with clock.part("prefill"):
            with clock.part("decode"):
                pass


def test_unknown_part_is_refused():
    clock = CallClock("cpu").start()
    with pytest.raises(ValueError, match="unknown part"):
        with clock.part("other"):
            pass


def test_parts_beyond_the_total_are_flagged_not_clamped():
    clock = CallClock("cpu").start()
    time.sleep(0.01)
    clock.add("decode", 1.0)  # a part charged twice or from elsewhere: a second more than the call took
    total, parts = clock.stop()
    assert parts["other"] < -900 and total < 100  # kept negative, the total still the measured one
    check = clock.overlap_check(parts)
    assert check["flagged"] and check["overlap_ms"] == pytest.approx(-parts["other"])
    honest = CallClock("cpu").start()
    with honest.part("prefill"):
        time.sleep(0.005)
    assert not honest.overlap_check(honest.stop()[1])["flagged"]


def test_an_overlap_of_a_few_percent_is_flagged_and_none_is_no_negative_overlap():
    clock = CallClock("cpu")
    clock.total_ms = 100.0
    check = clock.overlap_check({"prefill": 10.0, "decode": 95.0, "other": -5.0})
    assert check == {"parts_ms": 105.0, "overlap_ms": 5.0, "flagged": True}
    # parts inside the total leave no overlap to record (not a negative one)
    assert clock.overlap_check({"decode": 90.0, "other": 10.0}) == {"parts_ms": 90.0, "overlap_ms": 0.0,
                                                                    "flagged": False}


class _Event:
    """The part of torch's raw profiler event (`_KinetoEvent`) that `device_totals` reads; `activity`
    (kineto's name of the activity) only where given, as older torch has no `activity_type`."""

    def __init__(self, name, device, start_ns, end_ns, annotation=False, activity=None, hidden=None):
        from torch.autograd import DeviceType

        self._name, self._annotation = name, annotation
        if hidden is not None:
            self.is_hidden_event = lambda: hidden
        self._device = DeviceType.CUDA if device == "cuda" else DeviceType.CPU
        self._start, self._end = start_ns, end_ns
        if activity is not None:
            self.activity_type = lambda: activity

    def name(self):
        return self._name

    def device_type(self):
        return self._device

    def is_user_annotation(self):
        return self._annotation

    def start_ns(self):
        return self._start

    def end_ns(self):
        return self._end


def _events(with_activity: bool) -> list[_Event]:
    def kind(name):
        return name if with_activity else None

    return [
        _Event("aten::mm", "cpu", 0, 90_000, activity=kind("cpu_op")),  # a CPU op: no device time
        # inductor's range around a compiled call, mirrored on the GPU over the two kernels inside it
        _Event("## Call CompiledFxGraph fxabc ##", "cuda", 10_000, 60_000, annotation=True,
               activity=kind("gpu_user_annotation")),
        _Event("triton_poi_fused_add_0", "cuda", 10_000, 30_000, activity=kind("kernel")),
        _Event("ampere_sgemm_128x64_tn", "cuda", 35_000, 60_000, activity=kind("kernel")),
        _Event("Memcpy HtoD (Pageable -> Device)", "cuda", 70_000, 72_000, activity=kind("gpu_memcpy")),
        _Event("Memset (Device)", "cuda", 73_000, 74_000, activity=kind("gpu_memset")),
    ]


@pytest.mark.parametrize("with_activity", [True, False])
def test_device_totals_count_kernels_apart_from_copies_and_leave_out_annotation_spans(with_activity):
    from rollout_study.timing import device_totals

    totals = device_totals(_events(with_activity))
    assert {k: totals[k] for k in ("kernel_ms", "kernels", "copy_ms")} == {"kernel_ms": 0.045, "kernels": 2,
                                                                           "copy_ms": 0.003}
    # the kernels by name, longest first; neither the annotation span nor the copies among them
    assert totals["top_kernels"] == [{"name": "ampere_sgemm_128x64_tn", "ms": 0.025, "count": 1},
                                     {"name": "triton_poi_fused_add_0", "ms": 0.02, "count": 1}]


def test_device_totals_keep_the_kernels_with_the_most_time_by_name_with_their_launches():
    """Launches of one kernel add up under its name; only the TOP_KERNELS names with the most time are kept."""
    from rollout_study import timing

    events = [_Event(f"k{i}", "cuda", 0, 1_000 * (i + 1), activity="kernel") for i in range(timing.TOP_KERNELS + 3)]
    events += [_Event("k0", "cuda", 0, 50_000, activity="kernel") for _ in range(2)]  # k0: 3 launches, 101 us
    long_name = "void cutlass::Kernel2<" + "x" * 5000 + ">(Params)"
    events.append(_Event(long_name, "cuda", 0, 2_000, activity="kernel"))
    totals = timing.device_totals(events)
    # two names that differ only past the cut are one entry under the name as kept
    twins = timing.device_totals([_Event(long_name + tail, "cuda", 0, 1_000, activity="kernel") for tail in "ab"])
    assert twins["top_kernels"] == [{"name": long_name[: timing.KERNEL_NAME_CHARS], "ms": 0.002, "count": 2}]
    top = totals["top_kernels"]
    assert len(top) == timing.TOP_KERNELS and top[0] == {"name": "k0", "ms": 0.101, "count": 3}
    assert [k["name"] for k in top[1:4]] == ["k14", "k13", "k12"]
    assert [k["ms"] for k in top] == sorted((k["ms"] for k in top), reverse=True)
    assert totals["kernels"] == timing.TOP_KERNELS + 6
    assert sum(k["ms"] for k in top) < totals["kernel_ms"]  # the rest is left out of the list, not of the sum
    assert long_name[: timing.KERNEL_NAME_CHARS] not in [k["name"] for k in top]  # 2 us: not among the longest
    assert timing.device_totals([events[-1]])["top_kernels"][0]["name"] == long_name[: timing.KERNEL_NAME_CHARS]


def test_device_totals_leave_out_device_events_that_are_no_work_of_their_own():
    """Where torch names the activity, a synchronization wait or a profiler range filed under the
    device is neither a kernel nor a copy."""
    from rollout_study.timing import device_totals

    events = _events(True) + [_Event("Stream Sync", "cuda", 80_000, 95_000, activity="cuda_sync"),
                              _Event("range", "cuda", 0, 99_000, activity="cuda_profiler_range")]
    assert {k: v for k, v in device_totals(events).items() if k != "top_kernels"} == {
        "kernel_ms": 0.045, "kernels": 2, "copy_ms": 0.003}


def test_device_totals_leave_out_events_the_profiler_hides():
    from rollout_study.timing import device_totals

    events = _events(True) + [_Event("hidden_kernel", "cuda", 0, 99_000, activity="kernel", hidden=True),
                              _Event("shown_kernel", "cuda", 0, 1_000, activity="kernel", hidden=False)]
    assert {k: v for k, v in device_totals(events).items() if k != "top_kernels"} == {
        "kernel_ms": 0.046, "kernels": 3, "copy_ms": 0.003}


def test_device_totals_keep_a_kernel_whose_activity_has_another_name():
    """A build that names kernels otherwise ("Kernel") still counts them: only known non-work is left out."""
    from rollout_study.timing import device_totals

    events = [_Event("gemv_kernel", "cuda", 0, 5_000, activity="Kernel"),
              _Event("Memcpy DtoD (Device -> Device)", "cuda", 6_000, 7_000, activity="Memcpy")]
    assert device_totals(events) == {"kernel_ms": 0.005, "kernels": 1, "copy_ms": 0.001,
                                     "top_kernels": [{"name": "gemv_kernel", "ms": 0.005, "count": 1}]}


def test_profile_call_reads_the_raw_events_of_this_torch():
    """On the CPU there are no device events; this checks the profiler API the sums read is there."""
    import torch

    from rollout_study.timing import profile_call

    measured = profile_call(lambda: torch.ones(256, 256) @ torch.ones(256, 256), torch.device("cpu"))
    assert measured["wall_ms"] > 0 and (measured["kernels"], measured["kernel_ms"], measured["copy_ms"]) == (0, 0, 0)
    assert measured["top_kernels"] == []
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.ones(4).sum()
    event = prof.profiler.kineto_results.events()[0]
    assert all(callable(getattr(event, name, None))
               for name in ("device_type", "is_user_annotation", "name", "start_ns", "end_ns"))


def test_add_elapsed_adds_the_blocks_host_time_even_when_it_raises():
    totals = {"collect": 1.0}
    with timing.add_elapsed(totals, "collect"):
        time.sleep(0.01)
    assert 10.0 <= totals["collect"] - 1.0 < 1000.0
    before = totals["collect"]
    with pytest.raises(RuntimeError), timing.add_elapsed(totals, "collect"):
        time.sleep(0.002)
        raise RuntimeError("a failed reference")
    assert totals["collect"] - before >= 2.0  # nothing added would pass a bare >=: the block's time is added
