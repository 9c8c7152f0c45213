"""graph-compiled on the CPU: torch.compile's aot_eager and eager backends trace the same steps without
generating kernels, so compilation, its accounting and the refresh policies are tested here; inductor
and the capture are CUDA tests."""
import pickle
import time

import pytest
import torch
from torch._dynamo.utils import counters
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from rollout_study import parity, sync
from rollout_study.engines import graph_compiled
from rollout_study.engines.graph_compiled import (REDUCTION_MAX_ROWS, REDUCTION_MAX_WEIGHT, GraphCompiledEngine,
                                                  row_reductions)
from rollout_study.params import StudyParams
from rollout_study.protocol import run_in_process
from rollout_study.reference import reference
from rollout_study.timing import CallClock
from rollout_study.workload import random_workload

PROMPT, NEW = 8, 4


@pytest.mark.parametrize("backend,policy,path", [("aot_eager", "reuse", "assign"), ("eager", "recapture", "in-place")])
def test_in_a_study_compile_is_its_own_part_and_parity_holds(backend, policy, path):
    params = StudyParams.from_dict({"name": "compiled", "device": "cpu", "engines": ["graph-compiled"],
                                    "compile_backend": backend, "policy": policy, "update_path": path,
                                    "requests": 2, "batch_size": 2, "prompt_len": PROMPT, "max_new_tokens": NEW,
                                    "iterations": 2, "cycles": 1, "layers": 1})
    result = run_in_process(params)
    assert result.is_valid and all(call.parity_ok for call in result.calls)
    by_phase = {(call.phase, call.index): call for call in result.calls}
    first = by_phase[("first", 0)]
    # compile is dynamo's own compile intervals (as hf-compile's); running the compiled steps is warmup
    assert first.breakdown_ms["compile"] > 0 and first.breakdown_ms["warmup"] > 0
    assert first.extra["engine_notes"]["compile"]["compiled"] == ["prefill (batch 2)",
                                                                  f"decode[0:{PROMPT + NEW}] (batch 2)"]
    for call in result.calls:
        notes = call.extra["engine_notes"]["compile"]
        assert notes["compiles_in_rollout"] == 0
        if call.phase.startswith("steady"):
            assert call.breakdown_ms["compile"] == 0 and notes["compile_runs"] == 0
    after = by_phase[("first_after_update", 0)]
    assert after.extra["parameter_check"] == "dropped"  # assign moved the storage; recapture drops regardless
    assert after.extra["engine_notes"]["compile"]["compile_runs"] == 2  # run once before the (re)capture
    (engine,) = result.metadata["engines"]
    assert engine["compile"]["backend"] == backend and engine["compile"]["fullgraph"] is True


def _call(engine, workload):
    clock = CallClock("cpu").start()
    out = engine(workload.batches, clock)
    clock.stop()
    return out, clock.breakdown, engine.call_notes()["compile"]


def test_reuse_keeps_after_in_place_and_recompiles_only_where_a_guard_broke(tiny):
    params, loaded = tiny(layers=1)
    model = loaded.model
    w = random_workload(2, 2, PROMPT, params.vocab, seed=6)
    engine = GraphCompiledEngine(model, "cpu", "reuse", PROMPT, NEW, backend="eager")
    _call(engine, w)

    def follows(model):
        out, parts, notes = _call(engine, w)
        assert parity.compare(out, reference(model, w.batches, NEW, 0, "cpu"))["ok"]
        assert notes["compiles_in_rollout"] == 0
        return parts, notes

    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
    engine.weights_updated(model)
    parts, notes = follows(model)
    assert engine.last_check == "kept" and notes["compile_runs"] == 0 and parts["compile"] == 0
    model.load_state_dict({k: v.clone() * 1.5 for k, v in model.state_dict().items()}, assign=True)
    engine.weights_updated(model)
    parts, notes = follows(model)
    assert engine.last_check == "dropped" and notes["compile_runs"] == 2
    # the steps ran again before the recapture, but nothing compiled: all of that run is warmup
    assert notes["graphs_compiled"] == 0 and parts["compile"] == 0 and parts["warmup"] > 0
    fresh = sync.rebuild(model, {k: v.clone() for k, v in model.state_dict().items()})
    assert next(fresh.parameters()).requires_grad != next(model.parameters()).requires_grad  # a guard reads it
    engine.weights_updated(fresh)
    parts, notes = follows(fresh)
    assert engine.last_check == "dropped" and parts["compile"] > 0
    assert notes["recompiled"] == ["prefill (batch 2)", f"decode[0:{PROMPT + NEW}] (batch 2)"]


def test_a_reached_recompile_limit_raises_instead_of_running_eager_code(tiny, monkeypatch):
    params, loaded = tiny(layers=1)
    w = random_workload(2, 2, PROMPT, params.vocab, seed=6)
    engine = GraphCompiledEngine(loaded.model, "cpu", "recapture", PROMPT, NEW, backend="eager")
    _call(engine, w)
    monkeypatch.setattr(graph_compiled, "RECOMPILE_LIMIT", 1)
    engine.weights_updated(sync.rebuild(loaded.model, dict(loaded.model.state_dict())))  # requires_grad flips
    with pytest.raises(Exception, match="recompile_limit|Hard failure"):
        _call(engine, w)


def test_steps_dynamo_does_not_compile_are_refused(tiny, monkeypatch):
    params, loaded = tiny(layers=1)
    monkeypatch.setattr(torch._dynamo.config, "disable", True)
    engine = GraphCompiledEngine(loaded.model, "cpu", "recapture", PROMPT, NEW, backend="eager")
    # Recent torch refuses this itself under fullgraph; the engine refuses where it does not.
    with pytest.raises(RuntimeError, match="compiled nothing for prefill|found no compiled frames"):
        _call(engine, random_workload(2, 2, PROMPT, params.vocab, seed=6))


def test_graphs_of_one_bucket_share_one_compiled_step_and_warm_up_once(tiny):
    params, loaded = tiny(layers=1)
    w = random_workload(2, 2, PROMPT, params.vocab, seed=6)
    new = 12  # 11 decode steps: replays of 5, 5 and 1 steps, two graphs (x5 and x1), one decode step function
    engine = GraphCompiledEngine(loaded.model, "cpu", "recapture", PROMPT, new, backend="eager", steps_per_graph=5)
    clock = CallClock("cpu").start()
    out = engine(w.batches, clock)
    clock.stop()
    notes = engine.call_notes()["compile"]
    (runner,) = engine.runners.values()
    assert [name for name, *_ in runner.steps] == ["prefill", f"decode[0:{PROMPT + new}]x5",
                                                   f"decode[0:{PROMPT + new}]"]
    assert runner.distinct_steps() == [0, 1] and runner.step_graphs == [1, 1, 2]
    assert notes["graphs_compiled"] == 2 and notes["compile_runs"] == 2
    assert notes["compiled"] == ["prefill (batch 2)", f"decode[0:{PROMPT + new}]x5 (batch 2)"]
    assert parity.compare(out, reference(loaded.model, w.batches, new, 0, "cpu"))["ok"]


def test_row_reductions_take_a_decode_steps_products_on_cuda_and_leave_the_rest():
    seen = {"as_reductions": 0, "left_to_inductor": 0}
    table = row_reductions(seen)

    def products(rows, weight, big, many, rows_cpu, weight_cpu):
        return rows @ weight, rows @ big, many @ weight, rows_cpu @ weight_cpu

    with FakeTensorMode():  # CUDA tensors without a GPU: only their metadata is traced
        def cuda(*shape):
            return torch.empty(*shape, device="cuda", dtype=torch.float16)
        graph = make_fx(products, decomposition_table=table)(
            cuda(4, 64), cuda(64, 32), cuda(64, REDUCTION_MAX_WEIGHT // 64 + 1), cuda(REDUCTION_MAX_ROWS + 1, 64),
            torch.empty(4, 64), torch.empty(64, 32)).graph
    ops = [str(node.target) for node in graph.nodes if node.op == "call_function"]
    # the first product only: a multiply and a sum over the shared dimension, in FP32, rounded once to FP16
    assert ops.count("aten.mm.default") == 3 and ops.count("aten.sum.dim_IntList") == 1
    total = next(node for node in graph.nodes if str(node.target) == "aten.sum.dim_IntList")
    rounded = list(total.users)
    assert [(str(n.target), n.args[1]) for n in rounded] == [("prims.convert_element_type.default", torch.float16)]
    product = total.args[0]
    upcast = [n.args[0] for n in product.args]  # through the unsqueezes, to the converts
    assert [(str(n.target), n.args[1]) for n in upcast] == [("prims.convert_element_type.default", torch.float32)] * 2
    assert seen == {"as_reductions": 1, "left_to_inductor": 3}


def _product(x, w):
    return torch.relu(x @ w)


def test_the_reduction_backend_traces_each_compile_and_keeps_inductors_own_cache(tmp_path, monkeypatch):
    # inductor on the CPU (a C++ compile, a few seconds): products there are left to inductor, but counted
    # when traced, which is what shows whether a compile was traced or taken from AOTAutograd's cache
    import types

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    x, w = torch.randn(4, 16), torch.randn(16, 8)

    def fresh():  # a code object of its own, as each of the engine's steps has
        return types.FunctionType(_product.__code__.replace(), globals(), "_product")

    with torch.no_grad():
        # a plain inductor compile of the same graph first: it leaves an entry in AOTAutograd's cache
        plain = torch.compile(fresh(), backend="inductor", options=dict(graph_compiled.INDUCTOR_OPTIONS),
                              fullgraph=True, dynamic=False)
        torch.testing.assert_close(plain(x, w), _product(x, w))
        for round in range(2):
            seen = {"as_reductions": 0, "left_to_inductor": 0}
            hits = counters["inductor"]["fxgraph_cache_hit"]
            step = torch.compile(fresh(), backend=graph_compiled.inductor_with_row_reductions(seen), fullgraph=True,
                                 dynamic=False)
            torch.testing.assert_close(step(x, w), _product(x, w))
            assert seen == {"as_reductions": 0, "left_to_inductor": 1}, (round, seen)
            if round:  # the second: inductor's cache keyed it (the table pickles), not bypassed
                assert counters["inductor"]["fxgraph_cache_hit"] == hits + 1, dict(counters["inductor"])


class _FakeCompile:
    """torch.compile without dynamo, to reach the engine's compile accounting in milliseconds: a compiled step runs
    the step as it is; it 'compiles' (one graph, one product traced through the row-reduction backend) on its first
    call and on its first call after `recompile()`. The torch.compile call itself takes `setup_s`."""

    def __init__(self, monkeypatch, setup_s=0.0, graphs=1):
        self.setup_s, self.graphs = setup_s, graphs
        self.backends, self.generation = [], 0
        monkeypatch.setitem(counters["stats"], "unique_graphs", counters["stats"]["unique_graphs"])
        monkeypatch.setattr(graph_compiled, "inductor_with_row_reductions", lambda seen: ("row reductions", seen))
        monkeypatch.setattr(torch, "compile", self)

    def recompile(self):
        self.generation += 1

    def __call__(self, fn, backend, **options):
        self.backends.append(backend if isinstance(backend, str) else backend[0])
        time.sleep(self.setup_s)
        compiled_for = []

        def step(*args):
            if compiled_for[-1:] != [self.generation]:
                compiled_for.append(self.generation)
                counters["stats"]["unique_graphs"] += self.graphs
                if not isinstance(backend, str):
                    backend[1]["left_to_inductor"] += 1
            return fn(*args)

        return step


def test_compile_parts_and_notes_count_the_torch_compile_call_and_only_this_calls_compiles(tiny, monkeypatch):
    params, loaded = tiny(layers=1)
    w = random_workload(2, 2, PROMPT, params.vocab, seed=6)
    fake = _FakeCompile(monkeypatch, setup_s=0.05)
    engine = GraphCompiledEngine(loaded.model, "cpu", "recapture", PROMPT, NEW, backend="inductor")
    out, parts, notes = _call(engine, w)
    assert fake.backends == ["row reductions"] * 2  # prefill and the decode step, through the reductions
    assert parity.compare(out, reference(loaded.model, w.batches, NEW, 0, "cpu"))["ok"]
    # no dynamo callback fires here: the compile part is the two torch.compile calls
    assert parts["compile"] >= 2 * 50
    assert notes["matmuls"] == {"as_reductions": 0, "left_to_inductor": 2} and notes["compiles_in_rollout"] == 0
    fake.recompile()
    engine.weights_updated(loaded.model)
    _, parts, notes = _call(engine, w)
    assert parts["compile"] == 0  # the steps stay compiled: no torch.compile call again, no dynamo compile
    assert notes["recompiled"] == ["prefill (batch 2)", f"decode[0:{PROMPT + NEW}] (batch 2)"]
    assert notes["matmuls"] == {"as_reductions": 0, "left_to_inductor": 2}  # this call's traces, not the total
    other = GraphCompiledEngine(loaded.model, "cpu", "recapture", PROMPT, NEW, backend="aot_eager")
    _, _, notes = _call(other, w)
    assert fake.backends[2:] == ["aot_eager"] * 2 and notes["matmuls"] is None


def test_steps_that_compile_nothing_are_refused_by_the_engine_itself(tiny, monkeypatch):
    # where torch lets a fullgraph compile run without a graph, the engine's own count must catch it
    params, loaded = tiny(layers=1)
    _FakeCompile(monkeypatch, graphs=0)
    engine = GraphCompiledEngine(loaded.model, "cpu", "recapture", PROMPT, NEW, backend="eager")
    with pytest.raises(RuntimeError, match="compiled nothing for prefill"):
        _call(engine, random_workload(2, 2, PROMPT, params.vocab, seed=6))


def test_the_backend_is_checked_and_described():
    with pytest.raises(ValueError, match="backend must be one of inductor, aot_eager, eager, got 'tvm'"):
        GraphCompiledEngine(None, "cpu", "recapture", PROMPT, NEW, backend="tvm")
    inductor = GraphCompiledEngine(None, "cpu", "recapture", PROMPT, NEW).describe()["compile"]
    assert inductor["backend"] == "inductor" and inductor["inductor_options"] == graph_compiled.INDUCTOR_OPTIONS
    assert f"at most {graph_compiled.REDUCTION_MAX_ROWS} rows" in inductor["row_reductions"]
    plain = GraphCompiledEngine(None, "cpu", "recapture", PROMPT, NEW, backend="aot_eager").describe()["compile"]
    assert plain["backend"] == "aot_eager" and plain["inductor_options"] is None and plain["row_reductions"] is None


def test_row_reductions_take_products_at_their_limits_and_compute_the_product():
    seen = {"as_reductions": 0, "left_to_inductor": 0}
    table = row_reductions(seen)
    with FakeTensorMode():  # a batch-16 decode step's rows, and the largest weight that stays in L2
        def cuda(*shape):
            return torch.empty(*shape, device="cuda")
        most_rows = make_fx(torch.mm, decomposition_table=table)(cuda(REDUCTION_MAX_ROWS, 64), cuda(64, 32))
        largest = make_fx(torch.mm, decomposition_table=table)(cuda(2, 64), cuda(64, REDUCTION_MAX_WEIGHT // 64))
    assert seen == {"as_reductions": 2, "left_to_inductor": 0}
    assert "aten.mm.default" not in {str(node.target) for node in largest.graph.nodes}
    # the traced reduction, run on the CPU: the product itself, not another contraction
    rows, weight = torch.randn(REDUCTION_MAX_ROWS, 64), torch.randn(64, 32)
    torch.testing.assert_close(most_rows(rows, weight), rows @ weight)


def test_the_reduction_tables_cache_key_changes_with_its_limits_and_version(monkeypatch):
    seen = {"as_reductions": 0, "left_to_inductor": 0}
    key = pickle.dumps(graph_compiled.row_reductions(seen))
    assert pickle.dumps(graph_compiled.row_reductions(seen)) == key  # inductor's cache can hit
    table = pickle.loads(key)
    assert isinstance(table, graph_compiled.RowReductionTable) and torch.ops.aten.mm.default in table
    for name, value in (("REDUCTION_MAX_ROWS", 8), ("REDUCTION_MAX_WEIGHT", 2 ** 20), ("REDUCTIONS_VERSION", 2)):
        with monkeypatch.context() as patched:
            patched.setattr(graph_compiled, name, value)
            # a kernel traced under other limits must not be taken from the cache
            assert pickle.dumps(graph_compiled.row_reductions(seen)) != key, name
