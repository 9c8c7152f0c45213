"""Length buckets of the graph engines (CPU: the bucketed step functions run eagerly, slices and all)."""
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from result_fixture import make_result_dict, with_control
from rollout_study import parity
from rollout_study.engines.graph import GraphEngine
from rollout_study.engines.graph_compiled import GraphCompiledEngine
from rollout_study.engines.static_runner import StaticRunner, bucket_layout, decode_limits, replay_plan, step_buckets
from rollout_study.param_values import ParameterError
from rollout_study.params import StudyParams
from rollout_study.present import captures
from rollout_study.reference import reference
from rollout_study.result import Result
from rollout_study.timing import CallClock
from rollout_study.workload import random_workload

PROMPT, NEW = 8, 32


def test_which_bucket_serves_which_step():
    # Decode step s attends PROMPT + s keys: 9..16 in the first bucket, then 8 more per bucket.
    assert decode_limits(PROMPT, NEW, 8) == [16, 24, 32, 40]
    assert step_buckets(PROMPT, NEW, 8) == [0] * 8 + [1] * 8 + [2] * 8 + [3] * 7
    # Buckets start at the one that holds PROMPT + 1 keys, and the last is capped at the cache length.
    assert decode_limits(7, 10, 4) == [8, 12, 16]  # the last step attends 16 of the 17 slots
    assert step_buckets(7, 10, 4) == [0, 1, 1, 1, 1, 2, 2, 2, 2]
    assert decode_limits(PROMPT, NEW, 64) == decode_limits(PROMPT, NEW, 0) == [40]
    assert step_buckets(PROMPT, NEW, 64) == [0] * 31
    assert decode_limits(PROMPT, 1, 8) == [] and step_buckets(PROMPT, 1, 8) == []
    assert bucket_layout(PROMPT, NEW, 8)["decode_graphs"][-1] == {"graph": "decode[0:40]", "keys": 40,
                                                                  "steps_per_replay": 1, "steps": [25, 31]}
    assert bucket_layout(PROMPT, NEW, 8)["prefill_keys"] == PROMPT
    assert bucket_layout(PROMPT, NEW, 0)["prefill_keys"] == PROMPT + NEW


def test_replays_cover_every_decode_step_once_in_order():
    # 31 decode steps in buckets of 8, 8, 8, 7 steps.
    assert replay_plan(PROMPT, NEW, 8, 1) == [(b, 1) for b in step_buckets(PROMPT, NEW, 8)]
    assert replay_plan(PROMPT, NEW, 8, 0) == [(0, 8), (1, 8), (2, 8), (3, 7)]
    assert replay_plan(PROMPT, NEW, 8, 3) == [(0, 3), (0, 3), (0, 2), (1, 3), (1, 3), (1, 2), (2, 3), (2, 3), (2, 2),
                                              (3, 3), (3, 3), (3, 1)]
    assert replay_plan(PROMPT, NEW, 0, 0) == [(0, 31)] and replay_plan(PROMPT, NEW, 0, 100) == [(0, 31)]
    assert replay_plan(PROMPT, NEW, 0, 10) == [(0, 10), (0, 10), (0, 10), (0, 1)]
    assert replay_plan(PROMPT, 1, 0, 0) == []
    layout = bucket_layout(PROMPT, NEW, 0, 10)
    assert layout["steps_per_graph"] == 10
    assert layout["decode_graphs"] == [{"graph": "decode[0:40]x10", "keys": 40, "steps_per_replay": 10,
                                        "steps": [1, 30]},
                                       {"graph": "decode[0:40]", "keys": 40, "steps_per_replay": 1, "steps": [31, 31]}]


@pytest.mark.parametrize("steps_per_graph", [1, 0, 3])
def test_each_step_reads_its_buckets_slices(tiny, steps_per_graph):
    params, loaded = tiny(layers=1)
    w = random_workload(2, 2, PROMPT, params.vocab, seed=3)
    runner = StaticRunner(loaded.model, 2, PROMPT, NEW, loaded.model.device, "sdpa", length_bucket=8,
                          steps_per_graph=steps_per_graph)
    # One graph (one step function entry) per distinct (bucket, steps per replay), and no more.
    assert len(runner.steps) == 1 + len(set(replay_plan(PROMPT, NEW, 8, steps_per_graph)))
    # What a capture of each would note (captures run on CUDA only; the note is built the same way here)
    notes = [runner.capture_note(i, 0.002, 2 ** 20 * i, 0) for i in range(len(runner.steps))]
    assert notes[0] == {"batch": 2, "graph": "prefill", "keys": PROMPT, "steps": 1, "capture_ms": 2.0,
                        "pool_bytes": 0, "allocated_bytes": 0}
    assert [n["keys"] for n in notes[1:]] == sorted(n["keys"] for n in notes[1:]) and notes[-1]["keys"] == PROMPT + NEW
    limits = decode_limits(PROMPT, NEW, 8)
    assert {(n["keys"], n["steps"]) for n in notes[1:]} == {(limits[b], count) for b, count in
                                                            replay_plan(PROMPT, NEW, 8, steps_per_graph)}
    keys, masks = [], []
    update = runner.cache.update

    def recording_update(*args, **kwargs):
        k, v = update(*args, **kwargs)
        assert k.shape == v.shape
        keys.append(k.shape[2])
        return k, v

    runner.cache.update = recording_update
    hook = loaded.model.model.layers[0].register_forward_pre_hook(
        lambda module, args, kwargs: masks.append(kwargs["attention_mask"].shape[-1]), with_kwargs=True)
    try:
        runner.load(w.batches[0])
        runner.prefill()
        runner.decode()
    finally:
        hook.remove()
    expected = [PROMPT] + [decode_limits(PROMPT, NEW, 8)[b] for b in step_buckets(PROMPT, NEW, 8)]
    assert keys == masks == expected


@pytest.mark.parametrize("bucket,steps_per_graph", [(8, 1), (64, 1), (8, 0), (0, 5)])
def test_bucketed_graph_engines_reproduce_generate(tiny, bucket, steps_per_graph):
    params, loaded = tiny(layers=1)
    w = random_workload(2, 2, PROMPT, params.vocab, seed=4)
    ref = reference(loaded.model, w.batches, NEW, 0, "cpu")
    for policy in ("recapture", "reuse"):
        kwargs = dict(length_bucket=bucket, steps_per_graph=steps_per_graph)
        for engine in (GraphEngine(loaded.model, "cpu", policy, PROMPT, NEW, **kwargs),
                       GraphCompiledEngine(loaded.model, "cpu", policy, PROMPT, NEW, backend="eager", **kwargs)):
            clock = CallClock("cpu").start()
            out = engine(w.batches, clock)
            clock.stop()
            assert parity.compare(out, ref, [b.request_ids for b in w.batches])["ok"], (engine.variant, bucket)
            layout = engine.describe()["buckets"]
            assert layout["length_bucket"] == bucket
            assert sorted({g["keys"] for g in layout["decode_graphs"]}) == ([16, 24, 32, 40] if bucket == 8 else [40])
            assert sum(g["steps"][1] - g["steps"][0] + 1 for g in layout["decode_graphs"]) == NEW - 1


@pytest.mark.parametrize("value", [-1, "8", 2.5, True])
def test_a_bad_length_bucket_is_refused(value):
    with pytest.raises(ParameterError, match="length_bucket"):
        StudyParams.from_dict({"length_bucket": value})
    with pytest.raises(ValueError, match="length_bucket"):
        GraphEngine(None, "cpu", "recapture", PROMPT, NEW, length_bucket=value)


def test_any_positive_length_bucket_is_accepted():
    assert StudyParams.from_dict({"length_bucket": 7}).length_bucket == 7  # no multiple of anything needed
    assert StudyParams.from_dict({"length_bucket": 32768}).length_bucket == 32768


@pytest.mark.parametrize("value", [-1, "8", 2.5, True])
def test_a_bad_steps_per_graph_is_refused(value):
    with pytest.raises(ParameterError, match="steps_per_graph"):
        StudyParams.from_dict({"steps_per_graph": value})
    with pytest.raises(ValueError, match="steps_per_graph"):
        GraphEngine(None, "cpu", "recapture", PROMPT, NEW, steps_per_graph=value)


def test_each_captured_graph_is_reported_with_its_keys_capture_time_and_pool_growth(tmp_path):
    """Issue 11: capture cost and memory per bucket, in summary.md and in the report notebook."""
    import copy
    import random

    from result_fixture import make_result_dict
    from rollout_study.present import captures, markdown, notebook
    from rollout_study.result import Result

    data = make_result_dict(cuda_graph=True)
    notes = [{"batch": 4, "graph": "prefill", "keys": 41, "steps": 1, "capture_ms": 38.9, "pool_bytes": 8 * 2 ** 20,
              "allocated_bytes": 1024},
             {"batch": 4, "graph": "decode[0:64]", "keys": 64, "steps": 1, "capture_ms": 34.8, "pool_bytes": 0,
              "allocated_bytes": 0},
             {"graph": "decode[0:128]", "keys": 128, "steps": 1, "capture_ms": 39.0, "pool_bytes": 20 * 2 ** 20,
              "allocated_bytes": 0}]  # written before the notes named the runner's batch
    for number, call in enumerate(c for c in data["calls"] if c["captures"]):
        call["engine_notes"] = {"captures": copy.deepcopy(notes)}
        call["engine_notes"]["captures"][0]["capture_ms"] = 100.0 + number  # tells the calls apart, in run order
    random.Random(5).shuffle(data["calls"])  # the table orders the calls itself
    result = Result.from_dict(copy.deepcopy(data))
    assert Result.from_dict(result.to_dict()).to_dict() == data
    summary = markdown.summary(result)
    assert "## " + captures.TITLE in summary
    assert "| graph[recapture] | 0 | first | 0 | 4 | `prefill` | 41 | 1 | 100.000 | 8.0 | 0.000977 |" in summary
    assert "| graph[recapture] | 0 | first | 0 | - | `decode[0:128]` | 128 | 1 | 39.000 | 20.0 | 0.0 |" in summary
    frame = captures.captures_table([result])
    capturing = [c for c in result.calls if c.captures]
    assert len(frame) == 3 * len(capturing)
    # run order first: cycle 0's first calls, then each cycle's first call after its update (recapture only)
    assert list(frame["phase"][:6]) == ["first"] * 6 and list(frame["variant"][:6]) == ["graph[recapture]"] * 3 + [
        "graph[reuse]"] * 3
    assert set(frame["phase"][6:]) == {"first_after_update"} and set(frame["variant"][6:]) == {"graph[recapture]"}
    assert list(frame["pool MiB"][:3]) == [8.0, 0.0, 20.0] and frame["batch"].isna().sum() == len(capturing)
    # each call's prefill row, in the order the fixture wrote the calls (its run order): 100, 101, ...
    assert list(frame["capture ms"][::3]) == [100.0 + n for n in range(len(capturing))]
    assert captures.TITLE in [b.text for b in notebook.run_blocks(result, str(tmp_path))]
    # no notes (eager-only runs, CPU runs, results written before the notes): no section, no table
    plain = Result.from_dict(make_result_dict(cuda_graph=True))
    assert "## " + captures.TITLE not in markdown.summary(plain) and captures.captures_table([plain]).empty
    assert captures.TITLE not in [b.text for b in notebook.run_blocks(plain, str(tmp_path))]


def test_capture_rows_mark_a_control_cycles_recapture_and_read_old_notes_as_one_step():
    # a control cycle's first call recaptures too; unmarked, its capture would pass for a real update's
    data = with_control(make_result_dict(cuda_graph=True))
    note = {"graph": "decode[0:64]", "keys": 64, "capture_ms": 30.0, "pool_bytes": 0, "allocated_bytes": 0}
    for call in data["calls"]:
        if call["captures"]:
            call["engine_notes"] = {"captures": [dict(note)]}  # written before notes had "steps"
    rows = captures.capture_rows(Result.from_dict(data))
    phases = {(cycle, phase) for _, cycle, phase, *_ in rows}
    assert (0, "first") in phases and (0, "first_after_update (control)") in phases
    assert (1, "first_after_update") in phases
    assert {row[7] for row in rows} == {1}


def test_a_slot_an_earlier_rollout_left_at_inf_does_not_reach_the_next(tiny):
    # What an FP16 overflow leaves in the cache: masked out, it still turns attention to NaN unless cleared.
    params, loaded = tiny(layers=1)
    w = random_workload(2, 2, PROMPT, params.vocab, seed=0)
    ref = reference(loaded.model, w.batches, 6, 0, "cpu")
    engine = GraphEngine(loaded.model, "cpu", "reuse", PROMPT, 6)
    assert parity.compare(engine(w.batches, CallClock("cpu").start()), ref)["ok"]
    (runner,) = engine.runners.values()
    for tensor in (*runner.cache.keys, *runner.cache.values):
        tensor[:, :, PROMPT:] = float("inf")
    assert parity.compare(engine(w.batches, CallClock("cpu").start()), ref)["ok"]


def test_a_model_whose_head_dim_is_not_hidden_over_heads_reproduces_generate():
    # Qwen3 and Gemma set head_dim apart from hidden_size / heads: the cache takes the config's.
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=32, pad_token_id=0,
                         eos_token_id=None, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    w = random_workload(2, 2, PROMPT, 256, seed=0)
    ref = reference(model, w.batches, 6, 0, "cpu")
    engine = GraphEngine(model, "cpu", "recapture", PROMPT, 6)
    assert parity.compare(engine(w.batches, CallClock("cpu").start()), ref)["ok"]
