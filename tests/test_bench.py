"""The command line: the reference workload end to end on the CPU, bad input, a parity failure."""
import json
import os
import subprocess
import sys

import pytest
import torch

from rollout_study import bench, results
from rollout_study.engines.graph import GraphEngine

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCE = ["--requests", "8", "--batch-size", "4", "--prompt-len", "32", "--max-new-tokens", "32",
             "--iterations", "10"]


def run_cli(*args):
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "rollout_study.bench", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=600)


def test_reference_workload_end_to_end_on_cpu(tmp_path):
    out = tmp_path / "rollout-first-call.json"
    done = run_cli(*REFERENCE, "--device", "cpu", "--output", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    result = results.read(str(out))
    assert result["valid"] and not result["failures"]
    meta = result["metadata"]
    assert meta["label"] == "synthetic" and meta["cuda_graph"] is False and "no CUDA graph" in meta["graph_note"]
    assert meta["workload"]["requests"] == 8 and meta["workload"]["batch_sizes"] == [4, 4]
    assert meta["command"].startswith("python -m rollout_study.bench --requests 8")
    for key in ("name", "layers", "hidden_size", "heads", "kv_heads", "vocab", "parameters", "dtype"):
        assert meta["model"][key] is not None
    for key in ("cpu", "cores"):
        assert meta["hardware"][key]
    for key in ("python", "torch", "transformers"):
        assert meta["software"][key]
    assert meta["git"]["commit"] and meta["time_start"] and meta["training"]["optimizer"] == "sgd"
    # eager and graph[recapture]; first + 10 steady, before and after the one update
    assert len(result["calls"]) == 2 * (1 + 10) * 2
    phases = {(c["engine"], c["phase"]): 0 for c in result["calls"]}
    for c in result["calls"]:
        phases[(c["engine"], c["phase"])] += 1
    assert phases[("graph", "steady")] == 10 and phases[("eager", "first_after_update")] == 1
    assert all(c["parity"]["ok"] for c in result["calls"])
    assert all(c["generated_tokens"] == 8 * 32 for c in result["calls"])
    assert len(result["updates"]) == 1 and result["updates"][0]["loss"] > 0
    assert result["profile"] == {}  # no CUDA, no profile
    assert "graph[recapture]" in done.stdout and "valid: True" in done.stdout


@pytest.mark.parametrize("args,fragment", [
    (["--requests", "0"], "requests must be an integer between 1"),
    (["--batch-size", "-1"], "batch_size must be an integer between 1"),
    (["--policy", "never"], "policy must be one of recapture, reuse, both"),
    (["--optimizer", "rmsprop"], "optimizer must be one of sgd, adamw"),
    (["--dtype", "int8"], "dtype must be one of"),
    (["--engines", "eager,turbo"], "engines must be a non-empty list"),
    (["--model", "/nonexistent/model"], "model must be 'synthetic'"),
    (["--prompt-len", "2000", "--max-new-tokens", "100"], "exceeds the model's 2048 positions"),
])
def test_bad_parameters_fail_clearly_and_write_nothing(tmp_path, args, fragment):
    out = tmp_path / "r.json"
    done = run_cli(*args, "--device", "cpu", "--output", str(out))
    assert done.returncode == 2
    assert fragment in done.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_parity_failure_writes_invalid_result_and_exits_nonzero(tmp_path, monkeypatch, capsys):
    real_call = GraphEngine.__call__

    def corrupt(self, batches, clock):
        out = real_call(self, batches, clock)
        out.sequences[0] = out.sequences[0].clone()
        out.sequences[0][0, -1] += 1  # one wrong token in the last step
        return out

    monkeypatch.setattr(GraphEngine, "__call__", corrupt)
    out = tmp_path / "r.json"
    code = bench.main(["--device", "cpu", "--requests", "4", "--prompt-len", "8", "--max-new-tokens", "4",
                       "--iterations", "2", "--quiet", "--output", str(out)])
    assert code == 1
    result = json.loads(out.read_text())
    assert result["valid"] is False
    bad = [c for c in result["calls"] if not c["parity"]["ok"]]
    assert bad and all(c["engine"] == "graph" for c in bad)
    assert bad[0]["parity"]["mismatch"]["step"] == 3
    assert "parity failed" in capsys.readouterr().err


def test_local_checkpoint_loads_and_is_labelled_pretrained(tmp_path, tiny):
    _, loaded = tiny()
    folder = tmp_path / "my-checkpoint"
    loaded.model.save_pretrained(folder)  # no tokenizer: seeded random prompts
    out = tmp_path / "r.json"
    done = run_cli("--model", str(folder), "--device", "cpu", "--requests", "4", "--prompt-len", "8",
                   "--max-new-tokens", "4", "--iterations", "1", "--output", str(out), "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    result = results.read(str(out))
    meta = result["metadata"]
    assert meta["label"] == "pretrained" and meta["model"]["name"] == "my-checkpoint"
    assert meta["model"]["source"] == str(folder) and meta["workload"]["prompt_source"] == "random"
    assert result["valid"]
    chat = run_cli("--model", str(folder), "--prompts", "chat", "--device", "cpu", "--output", str(tmp_path / "c.json"))
    assert chat.returncode == 2 and "prompts: 'chat' needs a model with a tokenizer" in chat.stderr
    assert not (tmp_path / "c.json").exists()
