import dataclasses

import pytest

from checkpoint_fixture import NO_TENSORS, fake_checkpoint
from rollout_study.param_values import ParameterError
from rollout_study.params import StudyParams


def test_defaults_are_the_reference_workload():
    p = StudyParams()
    assert (p.requests, p.batch_size, p.resolved_prompt_len(), p.max_new_tokens, p.iterations) == (8, 4, 32, 32, 10)
    assert p.prompt_len is None and p.resolved_prompt_len(longest_prompt=41) == 41  # auto fits chat prompts
    assert StudyParams.from_dict({"prompt_len": "auto"}).prompt_len is None
    assert StudyParams.from_dict({"prompt_len": 40}).resolved_prompt_len(longest_prompt=41) == 40
    assert p.policy == "recapture" and p.optimizer == "sgd" and p.model == "synthetic"


@pytest.mark.parametrize("key,value,fragment", [
    ("requests", 0, "requests must be an integer between 1 and 4096, got 0"),
    ("batch_size", -2, "batch_size must be an integer between 1 and 1024"),
    ("prompt_len", 0, "prompt_len"),
    ("max_new_tokens", -1, "max_new_tokens"),
    ("iterations", 0, "iterations"),
    ("cycles", 0, "cycles"),
    ("requests", 2.5, "requests must be an integer"),
    ("requests", True, "requests must be an integer"),
    ("lr", 0, "lr must be a number in (0, 10]"),
    ("dtype", "float8", "dtype must be one of auto, float16, bfloat16, float32"),
    ("policy", "sometimes", "policy must be one of recapture, reuse, both"),
    ("optimizer", "lion", "optimizer must be one of sgd, adamw"),
    ("update_path", "rsync", "update_path must be one of in-place, copy, data-copy, load-state-dict, assign, reload, "
                             "lora-merge, cast, move"),
    ("master_dtype", "float16", "master_dtype must be one of auto, float32, bfloat16"),
    ("optimizer_impl", "cuda", "optimizer_impl must be one of auto, plain, foreach, fused"),
    ("lora_rank", 0, "lora_rank must be an integer between 1 and 1024"),
    ("policy", ["reuse", "sometimes"], "policy as a list must hold distinct names drawn from recapture, reuse, "
                                       "version-only, unchecked"),
    ("policy", ["reuse", "reuse"], "distinct names"),
    ("engines", ["eager", "vllm"], "engines must be a non-empty list drawn from eager, graph"),
    ("attn", "flash", "attn must be one of sdpa, eager"),
    ("device", "tpu", "device must be one of auto, cpu, cuda"),
    ("instrument", "no", "instrument must be true or false"),
    ("control_placement", "last", "control_placement must be one of first, interleaved"),
    ("turn_order", "random", "turn_order must be one of fixed, reverse, rotate, rotate-run"),
])
def test_bad_values_name_the_parameter_and_range(key, value, fragment):
    with pytest.raises(ParameterError) as err:
        StudyParams.from_dict({key: value})
    assert fragment in str(err.value)


def test_unknown_key_is_named():
    with pytest.raises(ParameterError, match="unknown parameter.*requestz"):
        StudyParams.from_dict({"requestz": 8})


def test_missing_model_path_is_named(tmp_path):
    with pytest.raises(ParameterError, match="model .*not a folder"):
        StudyParams.from_dict({"model": str(tmp_path / "nowhere")})
    (tmp_path / "empty").mkdir()
    with pytest.raises(ParameterError, match="no config.json"):
        StudyParams.from_dict({"model": str(tmp_path / "empty")})


def test_prompt_plus_new_tokens_beyond_positions():
    with pytest.raises(ParameterError, match=r"prompt_len \+ max_new_tokens = 80 exceeds the model's 64 positions"):
        StudyParams.from_dict({"max_positions": 64, "prompt_len": 48, "max_new_tokens": 32})


def test_yaml_errors_name_file_and_key(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("requests: 8\nbatch_size: zero\n")
    with pytest.raises(ParameterError, match=r"p.yaml: batch_size must be an integer"):
        StudyParams.from_yaml(str(path))
    path.write_text("requests: [1\n")
    with pytest.raises(ParameterError, match="not valid YAML"):
        StudyParams.from_yaml(str(path))
    path.write_text("requests: 3\n")
    assert StudyParams.from_yaml(str(path)).name == "p"
    with pytest.raises(ParameterError, match=f"parameter file {str(tmp_path)!r} is a folder; allowed: a YAML file"):
        StudyParams.from_yaml(str(tmp_path))


def test_policy_both_expands():
    assert StudyParams.from_dict({"policy": "both"}).policies == ("recapture", "reuse")
    assert StudyParams.from_dict({"policy": "reuse"}).policies == ("reuse",)


def test_yaml_exponent_without_dot_gets_a_hint(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("lr: 1e-4\n")
    with pytest.raises(ParameterError, match="write 1.0e-4"):
        StudyParams.from_yaml(str(path))


def test_chat_prompts_need_a_tokenizer():
    with pytest.raises(ParameterError, match="prompts 'chat' needs a model with a tokenizer"):
        StudyParams.from_dict({"prompts": "chat"})


def test_values_that_would_crash_later_are_refused_up_front(tmp_path):
    with pytest.raises(ParameterError, match="seed must be an integer between 0 and"):
        StudyParams.from_dict({"seed": 18446744073709551616})
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing\n", encoding="utf-8")
    with pytest.raises(ParameterError, match="empty.yaml: the parameter file is empty"):
        StudyParams.from_yaml(str(empty))
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ParameterError, match="latin.yaml: not UTF-8"):
        StudyParams.from_yaml(str(latin))


@pytest.mark.parametrize("config, weights, fragment", [
    ("{not json", NO_TENSORS, "does not parse as JSON"),
    ('{"model_type": "no-such-model"}', NO_TENSORS, "model_type 'no-such-model'"),
    ('{"model_type": "llama"}', None, "holds no weights"),
    # a cut or foreign weights file failed at the load, after the run's folder was made
    ('{"model_type": "llama"}', b"garbage" * 10, "model.safetensors' is not a readable safetensors file"),
    ('{"model_type": "llama"}', NO_TENSORS[:5], "not a readable safetensors file"),
])
def test_checkpoint_folders_that_cannot_load_are_refused(tmp_path, config, weights, fragment):
    checkpoint = fake_checkpoint(tmp_path / "ckpt", config, weights)
    with pytest.raises(ParameterError, match=fragment):
        StudyParams.from_dict({"model": str(checkpoint)})


def test_a_sharded_checkpoint_with_metadata_passes_the_weights_check(tmp_path):
    """What save_pretrained writes for a larger model: shards with `format` metadata and an index."""
    import torch
    from safetensors.torch import save_file

    checkpoint = fake_checkpoint(tmp_path / "ckpt", weights=None)
    for shard in (1, 2):
        save_file({f"w{shard}": torch.zeros(2, 3, dtype=torch.bfloat16)},
                  str(checkpoint / f"model-0000{shard}-of-00002.safetensors"), metadata={"format": "pt"})
    (checkpoint / "model.safetensors.index.json").write_text('{"weight_map": {}}', encoding="utf-8")
    assert StudyParams.from_dict({"model": str(checkpoint)}).model == str(checkpoint)


def test_master_weights_need_a_trainer_apart():
    with pytest.raises(ParameterError, match="master_dtype 'bfloat16' needs a trainer apart.*'in-place' has none"):
        StudyParams.from_dict({"update_path": "in-place", "master_dtype": "bfloat16"})
    assert StudyParams.from_dict({"update_path": "copy"}).resolved_master_dtype() == "float32"
    assert StudyParams.from_dict({"update_path": "lora-merge"}).resolved_master_dtype() is None


def test_policy_names_and_lists():
    assert StudyParams.from_dict({"policy": "all"}).policies == ("recapture", "reuse", "version-only", "unchecked")
    assert StudyParams.from_dict({"policy": ["unchecked", "reuse"]}).policies == ("unchecked", "reuse")
    for diagnostic_only in ("unchecked", ["version-only", "unchecked"]):
        with pytest.raises(ParameterError, match="only diagnostic policies; they run beside a real one"):
            StudyParams.from_dict({"policy": diagnostic_only})


def test_synthetic_models_of_real_shapes_have_their_real_parameter_counts():
    import torch
    from transformers import LlamaForCausalLM

    from rollout_study.models import synthetic_config

    published = {"synthetic-smollm2-135m": 134_515_008, "synthetic-llama-3.2-1b": 1_235_814_400}
    for name, count in published.items():
        params = StudyParams.from_dict({"model": name})
        assert params.label == "synthetic" and params.is_synthetic
        with torch.device("meta"):
            model = LlamaForCausalLM(synthetic_config(params))
        assert sum(p.numel() for p in model.parameters()) == count, name
        with pytest.raises(ParameterError, match="prompts 'chat' needs a model with a tokenizer"):
            StudyParams.from_dict({"model": name, "prompts": "chat"})
    with pytest.raises(ParameterError, match="exceeds the model's 8192 positions"):
        StudyParams.from_dict({"model": "synthetic-smollm2-135m", "prompt_len": 8000, "max_new_tokens": 500})


def test_a_named_synthetic_shape_loads_labelled_with_its_shape():
    from rollout_study import models

    params = StudyParams.from_dict({"model": "synthetic-smollm2-135m", "device": "cpu"})
    loaded = models.load(params, "cpu", "float32")
    info = loaded.info
    assert info["label"] == "synthetic" and info["name"] == "SmolLM2-135M shape (random weights)"
    assert (info["layers"], info["hidden_size"], info["kv_heads"], info["tied_embeddings"]) == (30, 576, 3, True)
    assert loaded.tokenizer is None and (info["init_seed"], info["init_device"]) == (0, "cpu")


def test_the_seed_fixes_the_tiny_models_weights_and_its_name_gives_its_shape(tiny):
    import torch

    (_, one), (_, again), (_, other) = tiny(seed=1), tiny(seed=1), tiny(seed=2)
    weights = [loaded.model.state_dict() for loaded in (one, again, other)]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])  # a run repeats end to end
    assert not torch.equal(weights[0]["lm_head.weight"], weights[2]["lm_head.weight"])
    assert (one.info["init_seed"], other.info["init_seed"]) == (1, 2)
    # the name the published runs of the reference workload go by: layers, hidden, heads/kv heads, vocabulary
    assert one.info["name"] == "tiny-llama-2L-128h-4/2-v1024" and one.info["kv_heads"] == 2


def test_a_synthetic_model_runs_in_the_dtype_asked_for():
    import torch

    from rollout_study import models

    loaded = models.load(StudyParams.from_dict({"device": "cpu"}), "cpu", "bfloat16")
    assert {p.dtype for p in loaded.model.parameters()} == {torch.bfloat16} and loaded.info["dtype"] == "bfloat16"


def test_a_checkpoint_folder_gone_before_the_load_is_named(tmp_path):
    import torch

    from rollout_study import models

    params = StudyParams.from_dict({"device": "cpu"})
    with pytest.raises(ParameterError, match="model: .*nowhere' is not a folder"):
        models.local_checkpoint(str(tmp_path / "nowhere"), params, "cpu", torch.float32)


def test_a_name_set_after_the_parameters_cell_that_is_no_parameter_is_refused():
    import json

    before = {"__name__", "_ih", "get_ipython"}
    namespace = {name: None for name in before}
    namespace.update(requests=4, output_dir=".", command=None, _i3="text", _3=1, json=json, loads=json.loads)
    assert StudyParams.from_namespace(namespace, before=before).requests == 4  # imports and IPython's own pass
    namespace["requets"] = 4
    with pytest.raises(ParameterError, match=r"unknown parameter\(s\) requets; known: attn, batch_size"):
        StudyParams.from_namespace(namespace, before=before)
    assert StudyParams.from_namespace(namespace).requests == 4  # without `before`, as before: not checked


def test_every_parameter_has_its_check_and_every_check_its_parameter():
    # from_dict checks the fields CHECKS names: a field added without a check would take any value
    from rollout_study.param_values import CHECKS

    assert set(CHECKS) == {f.name for f in dataclasses.fields(StudyParams)}


@pytest.mark.parametrize("controls, cycles, expected", [
    (1, 2, "RRC"), (2, 2, "RCRC"), (2, 5, "RRRCRRC"), (1, 1, "RC"), (0, 3, "RRR"), (3, 1, "RCCC")])
def test_interleaved_controls_are_spread_over_the_run(controls, cycles, expected):
    placed = StudyParams.from_dict({"control_cycles": controls, "cycles": cycles, "control_placement": "interleaved"})
    schedule = placed.update_schedule()
    assert [cycle for cycle, _ in schedule] == list(range(controls + cycles))
    assert "".join("C" if control else "R" for _, control in schedule) == expected
    first = dataclasses.replace(placed, control_placement="first").update_schedule()
    assert "".join("C" if control else "R" for _, control in first) == "C" * controls + "R" * cycles


def test_a_later_parameter_at_its_old_value_leaves_a_points_hash_as_it_was():
    import hashlib
    import json
    from rollout_study import sweep

    params = StudyParams.from_dict({"requests": 4, "cycles": 2, "control_cycles": 1})
    before = {k: v for k, v in params.to_dict().items() if k not in ("name", "control_placement", "turn_order")}
    assert sweep.point_hash(params) == hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()[:12]
    assert sweep.point_hash(dataclasses.replace(params, control_placement="interleaved")) != sweep.point_hash(params)
    assert sweep.point_hash(dataclasses.replace(params, turn_order="rotate")) != sweep.point_hash(params)


@pytest.mark.parametrize("key,top", [("requests", 4096), ("cycles", 100), ("control_cycles", 10),
                                     ("seed", 2 ** 63 - 1), ("lr", 10.0)])
def test_each_range_holds_its_top_and_refuses_past_it(key, top):
    # the bad values above are all under a range's bottom: a range's top is a bound too (seed: what torch takes)
    from rollout_study.param_values import CHECKS

    CHECKS[key](key, top)
    with pytest.raises(ParameterError, match=f"^{key} must be"):
        CHECKS[key](key, top + (0.5 if isinstance(top, float) else 1))


def test_an_engine_named_twice_is_refused():
    # two instances of one engine would share a variant name: their calls would read as one variant's samples
    with pytest.raises(ParameterError, match="engines must not repeat an engine"):
        StudyParams.from_dict({"engines": ["eager", "graph", "eager"]})
