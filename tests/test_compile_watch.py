"""compile_watch on the CPU: torch's counters as the engines read them, and the watch's intervals from dynamo's
compile callbacks (called here by hand where the timing has to be exact, and by a real eager-backend compile)."""
import types

import torch
from torch._dynamo.utils import counters

from rollout_study.engines import compile_watch
from rollout_study.engines.compile_watch import CompileWatch
from rollout_study.timing import CallClock


def test_counters_read_torchs_groups_and_every_spelling_of_a_recompile_limit_hit(monkeypatch):
    before = compile_watch.counters_now()
    unimplemented = counters["unimplemented"]
    # one count of its own per spelling (1, 2, 4, 8): a spelling not read leaves its count out of the sum
    monkeypatch.setitem(unimplemented, "Dynamo Recompile limit exceeded (torch 2.11 and later)", 1)
    monkeypatch.setitem(unimplemented, "hit config.recompile_limit (8)", 2)
    monkeypatch.setitem(unimplemented, "cache_size_limit reached (older torch)", 4)
    monkeypatch.setitem(unimplemented, "Cache size limit reached", 8)
    monkeypatch.setitem(unimplemented, "graph break: an unsupported call", 16)  # not a limit hit
    monkeypatch.setitem(counters["frames"], "ok", counters["frames"]["ok"] + 3)
    moved = compile_watch.difference(compile_watch.counters_now(), before)
    assert moved["recompile_limit_hits"] == 15 and moved["frames_ok"] == 3
    assert moved["frames_compiled"] == 0 and moved["unique_graphs"] == 0


class _Time:
    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now


def _trigger(name):
    return types.SimpleNamespace(callback_trigger=types.SimpleNamespace(name=name))


def test_only_the_outermost_of_nested_callbacks_is_an_interval_and_each_kind_is_charged_to_its_part(monkeypatch):
    clock = _Time()
    monkeypatch.setattr(compile_watch, "time", clock)
    watch = CompileWatch("cpu")
    watch._start()  # torch before 2.7: no argument, a compilation
    clock.now = 1.0
    watch._start(_trigger("DYNAMO"))  # a nested compile: inside the outer interval, not one of its own
    clock.now = 3.0
    watch._end()
    clock.now = 7.0
    watch._end()
    assert watch.count == {"compile": 1, "capture": 0} and watch.seconds["compile"] == 7.0
    watch._start(_trigger("CUDAGRAPH_RECORDING"))
    clock.now = 9.0
    watch._end(_trigger("CUDAGRAPH_RECORDING"))
    assert watch.count == {"compile": 1, "capture": 1} and watch.seconds["capture"] == 2.0
    call = CallClock("cpu")
    watch.charge(call)
    assert call.parts["compile"] == 7.0 and call.parts["capture"] == 2.0


def test_only_compiles_inside_watching_are_counted():
    watch = CompileWatch("cpu")
    with watch.watching():
        torch.compile(lambda x: x + 1, backend="eager")(torch.ones(2))
    assert watch.count["compile"] == 1
    torch.compile(lambda x: x * 3, backend="eager")(torch.ones(2))  # someone else's, after the call
    with watch.watching():
        torch.compile(lambda x: x - 1, backend="eager")(torch.ones(2))
    assert watch.count == {"compile": 2, "capture": 0}


def test_recording_callbacks_are_there_from_torch_2_7():
    assert compile_watch.recording_callbacks() == (torch.__version__ >= "2.7")  # a TorchVersion: compared as one
