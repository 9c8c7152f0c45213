"""floors.py, bandwidth.py, present/floors.py and models.weight_bytes: the weight-streaming floor."""
from __future__ import annotations

import copy
import json
import os

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from result_fixture import make_result, make_result_dict, retime
from rollout_study import bandwidth, floors, launch, models, protocol, tracing
from rollout_study.present import floors as present_floors
from rollout_study.present import kernels, markdown, notebook
from rollout_study.params import StudyParams
from rollout_study.record import ResultError
from rollout_study.result import Result

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OLD_FILES = [os.path.join(REPO, "reports", name, "result.json")
             for name in ("reference-tiny", "pretrained-smollm2", "reference-adamw-fp16", "reference-adamw-bf16")]
OLD_FILES.append(os.path.join(REPO, "tests", "data", "old-reference-tiny.json"))

# A tiny Llama with GQA: head size 16, 2 KV heads.
SHAPE = {"vocab": 300, "hidden": 64, "intermediate": 96, "layers": 2, "heads": 4, "kv_heads": 2}


def llama_parameters(vocab, hidden, intermediate, layers, heads, kv_heads, tied) -> int:
    """Parameters of a Llama counted from its shape, on paper: what the model's storage must come to."""
    kv = hidden // heads * kv_heads
    attention = hidden * hidden + 2 * hidden * kv + hidden * hidden  # q, k and v, o
    mlp = 3 * hidden * intermediate  # gate, up, down
    per_layer = attention + mlp + 2 * hidden  # two RMSNorm weights
    embeddings = vocab * hidden * (1 if tied else 2)
    return embeddings + layers * per_layer + hidden  # the final norm


def tiny_llama(tied: bool, dtype=torch.float16):
    config = LlamaConfig(vocab_size=SHAPE["vocab"], hidden_size=SHAPE["hidden"],
                         intermediate_size=SHAPE["intermediate"], num_hidden_layers=SHAPE["layers"],
                         num_attention_heads=SHAPE["heads"], num_key_value_heads=SHAPE["kv_heads"],
                         tie_word_embeddings=tied)
    return LlamaForCausalLM(config).to(dtype)


@pytest.mark.parametrize("tied", [True, False])
def test_weight_bytes_count_tied_embeddings_once_and_set_an_untied_lookup_apart(tied):
    weights = models.weight_bytes(tiny_llama(tied))
    assert weights["parameter_bytes"] == 2 * llama_parameters(**SHAPE, tied=tied)  # float16
    assert weights["embedding_lookup_bytes"] == (0 if tied else 2 * SHAPE["vocab"] * SHAPE["hidden"])
    head_size = SHAPE["hidden"] // SHAPE["heads"]
    assert weights["buffer_bytes"] == 4 * head_size // 2  # the rotary inv_freq, float32, excluded from the floor


def test_storage_reached_twice_counts_once():
    # a head tied to the embedding as its own Parameter object over the same storage (as some checkpoints load)
    table = torch.nn.Parameter(torch.zeros(16, 4))
    head = torch.nn.Parameter(table.data)
    assert models.storage_bytes([table, head]) == models.storage_bytes([table]) == 16 * 4 * 4
    assert models.storage_bytes([table, torch.zeros(16, 4)]) == 2 * 16 * 4 * 4  # equal, but not the same storage


def test_the_tiny_synthetic_models_parameter_bytes_are_its_unique_parameters(tiny):
    _, loaded = tiny()
    unique = {p.data_ptr(): p.numel() * p.element_size() for p in loaded.model.parameters()}
    assert loaded.info["parameter_bytes"] == sum(unique.values())
    assert loaded.info["embedding_lookup_bytes"] == loaded.model.get_input_embeddings().weight.nbytes  # untied


def gpu_dict(parameter_bytes=4_000_000, lookup_bytes=0, rate=2000.0, bandwidth_record=True) -> dict:
    """The fixture on a GPU (2 batches x 8 new tokens = 16 steps; steady wall 50 and 10 ms, kernels 5 ms and
    1,000 per call) with hand-made weight bytes and bandwidth."""
    data = make_result_dict(cuda_graph=True)
    data["metadata"]["model"].update(parameter_bytes=parameter_bytes, embedding_lookup_bytes=lookup_bytes)
    if bandwidth_record:
        data["bandwidth"] = {"method": "fixture", "samples_ms": [1.0, 1.1], "gb_per_s": rate,
                             "best_gb_per_s": rate, "median_gb_per_s": rate * 0.9}
    return data


def gpu_result(*args, **kwargs) -> Result:
    return Result.from_dict(gpu_dict(*args, **kwargs))


def test_floor_arithmetic_per_step_and_per_call():
    # 4 MB at 2,000 GB/s: 0.002 ms per step; 16 steps: 0.032 ms per call.
    rows = {row.variant: row for row in floors.floor_rows(gpu_result())}
    assert list(rows) == ["eager", "graph[recapture]", "graph[reuse]"]
    graph = rows["graph[reuse]"]
    assert graph.steps == 16 and graph.kernels_per_step == 62.5  # 1,000 kernels over 16 steps
    assert graph.floor_ms_per_step == pytest.approx(0.002) and graph.floor_ms == pytest.approx(0.032)
    assert graph.wall_ms == 10.0 and graph.wall_over_floor == pytest.approx(312.5)
    assert graph.kernel_ms == 5.0 and graph.kernel_over_floor == pytest.approx(156.25)
    assert rows["eager"].wall_over_floor == pytest.approx(50 / 0.032)


def test_a_floor_row_reads_cycle_0s_steady_phase_and_its_profile_only():
    data = retime(gpu_dict(), "graph[reuse]", "steady_after_update", 20.0)
    data["profile"]["graph[recapture]"].update(cycle=1, phase="steady_after_update")  # another phase's profile
    data["profile"]["graph[reuse]"]["kernels"] = 0  # a profile that saw no kernel says 0 per step, not nothing
    # a diagnostic policy's calls are the hazard report's, never a floor row
    data["calls"] += [{**copy.deepcopy(c), "policy": "unchecked"} for c in data["calls"] if c["policy"] == "reuse"]
    rows = {row.variant: row for row in floors.floor_rows(Result.from_dict(data))}
    assert list(rows) == ["eager", "graph[recapture]", "graph[reuse]"]
    assert rows["graph[reuse]"].wall_ms == 10.0 and rows["graph[reuse]"].kernels_per_step == 0
    recapture = rows["graph[recapture]"]
    assert (recapture.kernel_ms, recapture.kernels, recapture.kernels_per_step, recapture.kernel_over_floor) == (
        None, None, None, None)


def test_a_bandwidth_record_without_a_rate_or_a_workload_without_new_tokens_is_no_floor():
    data = gpu_dict()
    data["bandwidth"]["gb_per_s"] = None
    assert floors.floor_of(Result.from_dict(data)).absent == "bandwidth measurement failed: no rate recorded"
    data = gpu_dict()
    del data["metadata"]["workload"]["max_new_tokens"]
    floor = floors.floor_of(Result.from_dict(data))
    assert floor.absent == floors.NO_STEPS and floor.ms_per_call is None


def test_the_floor_of_a_loaded_tied_model_from_its_recorded_bytes():
    weights = models.weight_bytes(tiny_llama(tied=True))
    row = floors.floor_rows(gpu_result(weights["parameter_bytes"], weights["embedding_lookup_bytes"], rate=1000.0))[1]
    expected_step_ms = 2 * llama_parameters(**SHAPE, tied=True) / 1e12 * 1e3  # float16 bytes at 1,000 GB/s
    assert row.floor_ms_per_step == pytest.approx(expected_step_ms)
    assert row.floor_ms == pytest.approx(16 * expected_step_ms)


def test_an_untied_lookup_table_is_left_out_of_the_floor():
    row = floors.floor_rows(gpu_result(4_000_000, lookup_bytes=1_000_000))[0]
    assert row.floor_ms_per_step == pytest.approx(3e6 / 2e12 * 1e3)


def test_steps_come_from_the_batches_or_from_requests_and_batch_size():
    data = make_result_dict()
    assert floors.steps_per_call(Result.from_dict(data)) == (16, 2, 8)
    del data["metadata"]["workload"]["batch_sizes"]  # 6 requests in batches of 4: 2 batches
    assert floors.steps_per_call(Result.from_dict(data)) == (16, 2, 8)


@pytest.mark.parametrize("make, reason", [
    (lambda: make_result(), floors.NO_GPU),
    (lambda: gpu_result(bandwidth_record=False), floors.NO_BANDWIDTH),
    (lambda: gpu_result(parameter_bytes=None), floors.NO_WEIGHT_BYTES),
])
def test_an_absent_floor_says_why(make, reason):
    result = make()
    table = present_floors.floors_table([result])
    assert table[["floor ms per call", "wall / floor", "kernel / floor"]].isna().all().all()
    assert list(table["steps per call"]) == [16, 16, 16] and table["wall ms"].notna().all()
    assert present_floors.floor_note(result).startswith(f"Floor: {reason}; 2 batch(es) x 8 new tokens = 16 steps")
    assert floors.floor_of(result).absent == reason


def test_a_failed_bandwidth_measurement_is_named():
    data = make_result_dict(cuda_graph=True)
    data["metadata"]["model"]["parameter_bytes"] = 1000
    data["bandwidth"] = {"error": "OutOfMemoryError: CUDA out of memory"}
    note = present_floors.floor_note(Result.from_dict(data))
    assert note.startswith("Floor: bandwidth measurement failed: OutOfMemoryError: CUDA out of memory;")


@pytest.mark.parametrize("path", OLD_FILES)
def test_old_gpu_reports_render_without_a_floor_but_with_kernels_per_step(path):
    result = Result.read(path)
    with open(path, encoding="utf-8") as handle:
        raw = json.load(handle)
    section = "\n".join(present_floors.floors_markdown(result))
    assert f"Floor: {floors.NO_BANDWIDTH};" in section
    steps = floors.steps_per_call(result)[0]
    for variant, profile in raw["profile"].items():
        assert f"{profile['kernels'] / steps:,.3f}" in section, variant  # kernels per step, worked out here
    assert "## " + present_floors.TITLE in markdown.summary(result)


def test_a_measured_floor_in_the_summary():
    summary = markdown.summary(gpu_result())
    assert "| graph[reuse] | 16 | 10.000 | 5.000 | 1,000 | 62.500 | 0.002 | 0.032 | 312.500 | 156.250 |" in summary
    assert "Floor: 4.000 MB of weights per step at 2,000.0 GB/s (10^9 B/s; median of the samples 1,800.0 GB/s" \
        in summary


# -- the bandwidth measurement ------------------------------------------------------------------
def test_bandwidth_arithmetic_with_a_fake_timer():
    seconds = iter([9.0, 9.0, 0.002, 0.001, 0.004])  # two warmups (never recorded), then three samples
    calls = []

    def timer(fn):
        fn()
        calls.append(1)
        return next(seconds)

    record = bandwidth.copy_bandwidth("cpu", buffer_bytes=2 ** 20, warmup=2, repeats=3, timer=timer)
    moved = 2 * 2 ** 20  # read once, written once
    assert len(calls) == 5 and record["bytes_per_copy"] == moved
    assert record["samples_ms"] == pytest.approx([2.0, 1.0, 4.0])
    assert record["best_gb_per_s"] == pytest.approx(moved / 0.001 / 1e9) == record["gb_per_s"]
    assert record["median_gb_per_s"] == pytest.approx(moved / 0.002 / 1e9)
    assert "fastest of 3" in record["method"] and "2 warmup" in record["method"]


def test_bandwidth_really_copies_on_the_host_clock():
    record = bandwidth.copy_bandwidth("cpu", buffer_bytes=2 ** 22, warmup=1, repeats=3)
    assert len(record["samples_ms"]) == 3 and all(ms > 0 for ms in record["samples_ms"])
    assert record["best_gb_per_s"] >= record["median_gb_per_s"] > 0
    assert "synchronized host clock" in record["method"]
    assert bandwidth.measure(torch.device("cpu")) is None  # the study measures it on CUDA only


# -- where it is measured and how it reaches the result ------------------------------------------
def test_the_profiling_process_measures_bandwidth_before_the_model_loads(monkeypatch):
    order = []
    monkeypatch.setattr(bandwidth, "measure", lambda device: order.append("bandwidth") or {"gb_per_s": 1.0})
    monkeypatch.setattr(tracing, "measure", lambda device: order.append("tracing") or [{"kind": "add"}])
    load = models.load
    monkeypatch.setattr(models, "load", lambda *a, **k: order.append("model") or load(*a, **k))
    for step in ("_phase", "_settle_reference", "_profile", "_update"):  # no rollouts: only where it is measured
        monkeypatch.setattr(protocol.Study, step, lambda *a, **k: None)
    params = StudyParams.from_dict({"device": "cpu", "engines": ["graph"], "requests": 2, "batch_size": 2,
                                    "prompt_len": 4, "max_new_tokens": 2, "cycles": 1, "iterations": 1})
    plain = protocol.Study(params, mode="first_only").run().extra
    assert "bandwidth" not in plain and "tracing" not in plain
    assert order == ["model"]
    order.clear()
    result = protocol.Study(params, mode="profile").run()
    assert order == ["bandwidth", "tracing", "model"] and result.extra["bandwidth"] == {"gb_per_s": 1.0}
    assert result.extra["tracing"] == [{"kind": "add"}]


def test_run_study_carries_the_profiling_processs_bandwidth_into_the_result(monkeypatch):
    measured = Result.from_dict(make_result_dict(cuda_graph=True))
    profiled = copy.deepcopy(measured)
    profiled.extra["bandwidth"] = {"gb_per_s": 3.0}
    profiled.extra["tracing"] = [{"kind": "add", "excess_us_per_kernel": 0.1}]
    measured.profile = {}
    monkeypatch.setattr(protocol, "run_in_process", lambda *a, **k: measured)
    monkeypatch.setattr(launch, "fresh_process", lambda params, mode: profiled)
    result = launch.run_study(StudyParams.from_dict({"device": "cpu", "profile": True}))
    assert result.extra["bandwidth"] == {"gb_per_s": 3.0} and set(result.profile) == set(profiled.profile)
    assert result.extra["tracing"] == profiled.extra["tracing"]


# -- where the kernel time goes (present/kernels.py) ----------------------------------------------
def test_the_kernels_with_the_most_time_per_variant_with_launches_per_step_share_and_the_rest(tmp_path):
    data = make_result_dict(cuda_graph=True)
    data["profile"]["graph[reuse]"]["top_kernels"] = [
        {"name": "void at::native::vectorized_elementwise_kernel<4, at::native::CUFunctor_add>(int, float)",
         "ms": 3.0, "count": 600}, {"name": "sm90_xmma_gemm_f16f16", "ms": 1.0, "count": 160}]
    data["profile"]["eager"]["top_kernels"] = [{"name": "gemv", "ms": 5.0, "count": 1000}]  # all of its kernels
    result = Result.from_dict(copy.deepcopy(data))
    assert Result.from_dict(result.to_dict()).to_dict() == result.to_dict() == data
    summary = markdown.summary(result)
    # 600 launches over 16 steps; 3 ms of the call's 5 ms of kernels; the name without `void ` and arguments
    assert ("| graph[reuse] | `at::native::vectorized_elementwise_kernel<4, at::native::CUFunctor_add>` "
            "| 600 | 37.5 | 3.000 | 5.00 | 60.0 |") in summary
    assert "| graph[reuse] | `sm90_xmma_gemm_f16f16` | 160 | 10.0 | 1.000 | 6.25 | 20.0 |" in summary
    # the rest of the call: 1,000 - 760 launches, 5 - 4 ms
    assert "| graph[reuse] | other kernels | 240 | 15.0 | 1.000 | 4.17 | 20.0 |" in summary
    frame = kernels.kernels_table([result])
    assert list(frame["variant"]) == ["eager"] + ["graph[reuse]"] * 3  # registry order; eager has no rest
    assert list(frame["launches"]) == [1000, 600, 160, 240]
    assert kernels.TITLE in [b.text for b in notebook.run_blocks(result, str(tmp_path))]
    # no profile kept its kernels: no section, no notebook table
    plain = Result.from_dict(make_result_dict(cuda_graph=True))
    assert "## " + kernels.TITLE not in markdown.summary(plain) and kernels.kernels_table([plain]).empty
    assert kernels.TITLE not in [b.text for b in notebook.run_blocks(plain, str(tmp_path))]


@pytest.mark.parametrize("bad", [None, "gemv", [{"name": "gemv", "ms": 1.0}]])
def test_top_kernels_that_are_not_a_list_of_kernels_are_refused(bad):
    data = make_result_dict(cuda_graph=True)
    data["profile"]["eager"]["top_kernels"] = bad
    with pytest.raises(ResultError, match="top_kernels"):
        Result.from_dict(data)


@pytest.mark.parametrize("name, shown", [
    # torch's own kernels carry brackets in their names, not only in their argument lists
    ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>"
     "(float*, float const*, int)",
     "(anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<4u>, "
     "unsigned int, 4, 64, 64>(at::native::(anonymous namespace)::OpaqueType<4u>*, int)",
     "at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<4u>, "
     "unsigned int, 4, 64, 64>"),
    ("triton_poi_fused_add_0", "triton_poi_fused_add_0"),
    ("Memcpy (x)", "Memcpy"),
    ("(memset)", "(memset)"),  # a name that is all brackets has no argument list to lose
])
def test_a_kernel_name_loses_its_argument_list_only(name, shown):
    assert kernels._without_arguments(name.removeprefix("void ")) == shown


def test_a_long_kernel_name_keeps_its_head_and_its_tail():
    """Two elementwise kernels that share a long head stay apart by their functors at the end."""
    head = "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<" + "x" * 150
    add, mul = (kernels.short_name(head + f"<{op}>>(int, {op})") for op in ("AddFunctor", "MulFunctor"))
    assert len(add) == len(mul) == kernels.NAME_CHARS and add != mul
    assert add.startswith("at::native::elementwise_kernel<128") and add.endswith("<AddFunctor>>") and "..." in add


def test_a_name_of_exactly_the_limit_is_shown_whole():
    name = "k" * kernels.NAME_CHARS
    assert kernels.short_name(name) == name and "..." in kernels.short_name(name + "k")


def test_the_other_kernels_row_never_has_negative_time():
    # the top kernels' rounded sums can exceed the call's kernel time by a hair; the rest then took none of it
    data = make_result_dict(cuda_graph=True)
    data["profile"]["eager"]["top_kernels"] = [{"name": "gemv", "ms": 5.001, "count": 900}]
    (other,) = [row for row in kernels.kernel_rows(Result.from_dict(data)) if row[1] == kernels.OTHER]
    assert other[2] == 100 and other[4] == 0.0 and other[6] == 0.0


# -- what tracing does to kernels in a replay (tracing.py, present/kernels.tracing_note) ---------------
def _traced(kind, recorded, replays, error=None, alone=None):
    """A tracing record; `recorded`: the profiled replays' us per kernel, `replays`: the unprofiled ones',
    `alone`: us per kernel recorded when launched one at a time (None: results written before it was kept)."""
    if error:
        return {"kind": kind, "error": error}
    median = sorted(replays)[len(replays) // 2]
    middle = sorted(recorded)[len(recorded) // 2]
    return {"kind": kind, "steps": 2000, "kernels": 2000, "kernels_per_step": 1, "names": [kind],
            "replay_us_per_kernel": median, "replay_us_per_kernel_samples": replays,
            "recorded_us_per_kernel": middle, "recorded_us_per_kernel_samples": recorded,
            "excess_us_per_kernel": middle - median, "method": "m",
            **({"alone_us_per_kernel": alone} if alone is not None else {})}


def test_tracing_is_measured_on_cuda_only_and_knows_its_kernels():
    assert tracing.measure("cpu") is None
    with pytest.raises(ValueError, match="kind"):
        tracing.step_function("matmul", torch.device("cpu"))
    for kind in tracing.KINDS:  # each runs one kernel's worth of work on fixed buffers
        step = tracing.step_function(kind, torch.device("cpu"))
        step()


def test_both_times_are_per_kernel_recorded_and_a_replay_the_profiler_miscounts_is_no_record():
    def seen(ms, kernels=4000, wall_ms=5.6):
        return {"kernel_ms": ms, "kernels": kernels, "wall_ms": wall_ms,
                "top_kernels": [{"name": "gemm", "ms": 3.0, "count": 2000},
                                {"name": "splitKreduce", "ms": 1.0, "count": 2000}]}

    # 2,000 steps of a matrix product that launches two kernels each; replays of 5.0 to 5.2 ms
    record = tracing.record_of("gemv", {"replay_us": [5000.0, 5200.0, 5100.0],
                                        "seen": [seen(4.0), seen(4.4, wall_ms=6.0), seen(4.2)],
                                        "alone": [seen(3.6), seen(3.2), seen(3.8)]}, steps=2000)
    assert record["alone_us_per_kernel_samples"] == [0.9, 0.8, 0.95] and record["alone_us_per_kernel"] == 0.9
    assert record["kernels"] == 4000 and record["kernels_per_step"] == 2 and record["names"] == ["gemm", "splitKreduce"]
    assert record["replay_us_per_kernel_samples"] == [1.25, 1.3, 1.275] and record["replay_us_per_kernel"] == 1.275
    assert record["recorded_us_per_kernel_samples"] == [1.0, 1.1, 1.05] and record["recorded_us_per_kernel"] == 1.05
    assert record["excess_us_per_kernel"] == pytest.approx(-0.225)
    assert record["profiled_wall_us_per_kernel"] == pytest.approx(1.4)  # the profiled replays' wall, median
    # launched alone, a kernel count unlike the replays': nothing to compare with
    odd = tracing.record_of("gemv", {"replay_us": [5000.0], "seen": [seen(4.0)], "alone": [seen(4.0, 3000)]},
                            steps=2000)
    assert odd["alone_us_per_kernel"] is None and odd["recorded_us_per_kernel"] == 1.0
    for counts in ([0, 0, 0], [4000, 3999, 4000], [3999] * 3):  # none, some replays' kernels missing, not whole steps
        missing = tracing.record_of("gemv", {"replay_us": [5000.0], "seen": [seen(4.0, n) for n in counts]}, steps=2000)
        assert set(missing) == {"kind", "error"} and "kernels in replays of 2000 steps" in missing["error"]
    assert tracing.record_of("add", {"error": "RuntimeError: x"}) == {"kind": "add", "error": "RuntimeError: x"}


def test_the_kernels_section_says_whether_tracing_lengthened_the_kernels_of_a_replay(tmp_path):
    data = make_result_dict(cuda_graph=True)
    data["profile"]["graph[reuse]"]["top_kernels"] = [{"name": "add", "ms": 5.0, "count": 1000}]
    result = Result.from_dict(copy.deepcopy(data))
    assert kernels.tracing_note(result) is None  # not measured: nothing said
    # add: every profiled replay above the slowest unprofiled one (1.02 us per kernel, gaps included)
    # gemv: recorded within the replay, whose gaps leave 5.2 - 5.0 us per kernel
    result.extra["tracing"] = [_traced("add", [1.09, 1.10, 1.12], [1.00, 1.01, 1.02], alone=1.0),
                               _traced("gemv", [4.9, 5.0, 5.05], [5.1, 5.2, 5.3]),
                               _traced("softmax", None, None, error="RuntimeError: no graphs")]
    note = kernels.tracing_note(result)
    assert ("add: 1.100 us recorded per kernel against 1.010 us per kernel for the whole unprofiled replay (2,000 "
            "kernels in 2,000 steps): recorded kernels outlast every unprofiled replay, by 0.090 us each") in note
    assert "gemv: 5.000 us recorded" in note
    assert "whose gaps leave 0.200 us per kernel in which a cost could hide" in note
    assert "softmax: not measured (RuntimeError: no graphs)" in note
    assert "So: the profiler lengthens the kernels it records back to back (add)" in note
    assert "by 0.090 us each; launched one at a time, 1.000 us recorded per kernel" in note  # gemv: not measured
    assert note.endswith("against the same kernels launched one at a time (host gaps between them, as a host-bound "
                         "generate() leaves them), a replay's are recorded add 0.100 us (10.0%) longer per kernel: a "
                         "graph engine's kernel sum against generate()'s carries that for kernels like these, whether "
                         "the time is the kernel's or the trace's.")
    assert note in markdown.summary(result) and note in [b.text for b in notebook.run_blocks(result, str(tmp_path))]
    result.extra["tracing"] = [_traced("add", [1.015, 1.03, 1.04], [1.00, 1.01, 1.02], alone=1.1)]
    assert "a replay's are recorded add 0.070 us (6.4%) shorter per kernel" in kernels.tracing_note(result)
    result.extra["tracing"][0]["alone_error"] = "RuntimeError: x"
    del result.extra["tracing"][0]["alone_us_per_kernel"]
    assert "; launched one at a time: not measured (RuntimeError: x)" in kernels.tracing_note(result)
    # one profiled replay within the unprofiled ones' spread: no verdict of lengthening
    result.extra["tracing"] = [_traced("add", [1.015, 1.03, 1.04], [1.00, 1.01, 1.02])]
    assert kernels.tracing_note(result).endswith("So: no lengthening beyond what the replays' gaps could hide.")
    result.extra["tracing"] = [_traced("add", None, None, error="E"), _traced("gemv", None, None, error="E")]
    assert kernels.tracing_note(result).endswith("So: not measured.")
    assert Result.from_dict(result.to_dict()).extra["tracing"] == result.extra["tracing"]


def test_every_unprofiled_replay_comes_before_any_profiler_session_and_a_failure_is_recorded(monkeypatch):
    """tracing.measure's order and failures, with the device work stood in for (it runs on CUDA only)."""
    order = []

    class Graph:
        def __init__(self, kind):
            self.kind = kind

        def replay(self):
            order.append(("replay", self.kind))

    def captured(step, device):
        if step == "softmax":
            raise RuntimeError("capture failed")
        return Graph(step)

    def profiled(fn, device):
        order.append("profiler")
        fn()
        return {"kernel_ms": 2.0, "wall_ms": 2.5, "kernels": tracing.STEPS,
                "top_kernels": [{"name": "k", "ms": 2.0, "count": 2000}]}

    monkeypatch.setattr(tracing, "step_function", lambda kind, device: kind)
    monkeypatch.setattr(tracing, "captured", captured)
    monkeypatch.setattr(tracing, "event_timer", lambda fn: fn() or 0.004)  # 4 ms a replay
    monkeypatch.setattr(tracing, "profile_call", profiled)
    monkeypatch.setattr(tracing, "one_at_a_time", lambda step, device: lambda: order.append(("alone", step)))
    records = tracing.measure("cuda")
    assert [r["kind"] for r in records] == list(tracing.KINDS)
    assert records[2] == {"kind": "softmax", "error": "RuntimeError: capture failed"}
    first_profile = order.index("profiler")
    assert order[:first_profile] == [("replay", "add")] * tracing.REPLAYS + [("replay", "gemv")] * tracing.REPLAYS
    # a throwaway session first, then each kind's own sessions
    profiled_replays = ([("replay", "add")] * (1 + tracing.PROFILED) + [("replay", "gemv")] * tracing.PROFILED
                        + [("alone", "add")] * tracing.PROFILED + [("alone", "gemv")] * tracing.PROFILED)
    assert order[first_profile:] == [x for r in profiled_replays for x in ("profiler", r)]
    for record in records[:2]:  # 4 ms over 2,000 kernels: 2 us each; 2 ms recorded over 2,000: 1 us each
        assert record["replay_us_per_kernel"] == pytest.approx(2.0) and record["recorded_us_per_kernel"] == 1.0
        assert len(record["recorded_us_per_kernel_samples"]) == tracing.PROFILED and record["names"] == ["k"]
        assert record["alone_us_per_kernel"] == 1.0  # launched alone: 2 ms recorded over 2,000 kernels
    # launching alone fails for one kind: its replays' record stays, the comparison says why it is missing

    def failing(step, device):
        if step == "gemv":
            raise RuntimeError("launch failed")
        return lambda: None

    monkeypatch.setattr(tracing, "one_at_a_time", failing)
    add, gemv, _ = tracing.measure("cuda")
    assert add["alone_us_per_kernel"] == 1.0 and "alone_error" not in add
    assert gemv["recorded_us_per_kernel"] == 1.0 and gemv["alone_us_per_kernel"] is None
    assert gemv["alone_error"] == "RuntimeError: launch failed"


def test_a_profiled_replay_that_only_ties_the_slowest_unprofiled_one_is_no_lengthening():
    assert kernels.tracing_verdict(_traced("add", [1.02, 1.03], [1.00, 1.02])) == "within"
    assert kernels.tracing_verdict(_traced("add", [1.021, 1.03], [1.00, 1.02])) == "lengthened"


def test_kernels_recorded_as_long_as_when_launched_alone_read_the_same():
    result = make_result(cuda_graph=True)
    result.extra["tracing"] = [_traced("add", [1.0, 1.0, 1.0], [1.1, 1.2, 1.3], alone=1.0)]
    assert "a replay's are recorded add the same per kernel" in kernels.tracing_note(result)


def test_a_profiler_that_fails_leaves_each_kind_an_error_not_a_crash(monkeypatch):
    # CUPTI can refuse a session: the profiles this qualifies are still worth having, so measure must not raise
    class Graph:
        def replay(self):
            pass

    def refused(fn, device):
        raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")

    monkeypatch.setattr(tracing, "step_function", lambda kind, device: kind)
    monkeypatch.setattr(tracing, "captured", lambda step, device: Graph())
    monkeypatch.setattr(tracing, "event_timer", lambda fn: 0.004)
    monkeypatch.setattr(tracing, "profile_call", refused)
    assert tracing.measure("cuda", kinds=("add", "gemv")) == [
        {"kind": kind, "error": "RuntimeError: CUPTI_ERROR_NOT_INITIALIZED"} for kind in ("add", "gemv")]
