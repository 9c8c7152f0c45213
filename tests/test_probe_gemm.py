"""tools/probe_gemm.py's rows variant: which matrix products inductor is made to write as a reduction."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from checkpoint_fixture import fake_checkpoint
from tool_module import load

ROOT = Path(__file__).resolve().parent.parent
probe_gemm = load("probe_gemm")

# In a child: the probe replaces an entry of inductor's process-wide decomposition table.
CHILD = """
import json, sys, torch
sys.path.insert(0, sys.argv[1] + "/tools")
import probe_gemm
probe_gemm.use_rows_mm(4)
linear = torch.compile(torch.nn.functional.linear, backend="inductor", dynamic=False, fullgraph=True)
out = {}
for rows, width in ((4, int(sys.argv[3])), (5, 64), (4, int(sys.argv[2]))):  # the bounds; a row over; a value over
    before = dict(probe_gemm.ROWS_MM_SEEN)
    x, w = torch.randn(rows, 64), torch.randn(width, 64)
    got = linear(x, w)
    out[f"{rows}x{width}"] = {"seen": {k: v - before[k] for k, v in probe_gemm.ROWS_MM_SEEN.items()},
                              "close": bool(torch.allclose(got, x @ w.t(), rtol=1e-5, atol=1e-5))}
print(json.dumps(out))
"""


def test_rows_mm_decomposes_only_few_rows_against_a_small_weight(tmp_path):
    bound = 2 ** 22 // 64  # rows of 64: ROWS_MM_MAX_WEIGHT's 2**22 values; one row more is over it
    # An empty inductor cache, as the probe gives each variant: a cached graph is not traced again, so the
    # decomposition would not run (its table is not part of the cache's key)
    done = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), str(bound + 1), str(bound)], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen[f"4x{bound}"] == {"seen": {"decomposed": 1, "left_to_inductor": 0}, "close": True}
    assert seen["5x64"] == {"seen": {"decomposed": 0, "left_to_inductor": 1}, "close": True}
    assert seen[f"4x{bound + 1}"] == {"seen": {"decomposed": 0, "left_to_inductor": 1}, "close": True}


def _probe(tmp_path, *args):
    return subprocess.run([sys.executable, str(ROOT / "tools" / "probe_gemm.py"), str(tmp_path / "out.json"),
                           *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"),
                               "ROLLOUT_STUDY_COMMIT": "c" * 40})


def test_each_batch_runs_in_its_own_process_with_the_prompt_asked(tmp_path):
    done = _probe(tmp_path, "--device", "cpu", "--model", "synthetic", "--variants", "graph", "--batches", "1,3",
                  "--prompt", "8")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads((tmp_path / "out.json").read_text())
    assert [(r["batch"], r["prompt_len"], r["parity_ok"]) for r in rows] == [(1, 8, True), (3, 8, True)]
    assert len({r["pid"] for r in rows}) == 2 and os.getpid() not in {r["pid"] for r in rows}
    assert [r["commit"] for r in rows] == ["c" * 40] * 2  # the commit the call was given, recorded


def test_a_batch_or_prompt_out_of_range_is_refused_before_any_process(tmp_path):
    for option, value, said in (("--batches", "4,0", "comma-separated whole numbers from 1 to 64"),
                                ("--batches", "4,x", "comma-separated whole numbers from 1 to 64"),
                                ("--prompt", "513", "a whole number from 1 to 512"),
                                ("--prompt", "8,9", "a whole number from 1 to 512")):
        # one small variant: a value let through fails in seconds, not after every variant's compile
        done = _probe(tmp_path, "--device", "cpu", "--model", "synthetic", "--variants", "graph", option, value)
        assert done.returncode != 0 and f"{option}: {said}, not '{value}'" in done.stderr
        assert not (tmp_path / "out.json").exists()


def _main(monkeypatch, out: Path, *args: str, failing: tuple = ()) -> tuple[int, list[dict]]:
    """probe_gemm.main() here, each child a stand-in that records what it was given (and the out file as it found
    it) and answers a row after a word on stdout; those of a batch in `failing` exit 3."""
    children = []

    def child(command, **kwargs):
        asked = {"variant": command[command.index("--one") + 1], "batch": int(command[command.index("--batches") + 1]),
                 "prompt": command[command.index("--prompt") + 1], "env": kwargs["env"],
                 "written": len(json.loads(out.read_text())) if out.exists() else 0}
        children.append(asked)
        if asked["batch"] in failing:
            return subprocess.CompletedProcess(command, 3, "", "Traceback: it died")
        row = {"variant": asked["variant"], "batch": asked["batch"], "steady_median_ms": 1.0, "kernel_ms": 2.0,
               "kernels_per_step": 3.0, "parity_ok": True}
        return subprocess.CompletedProcess(command, 0, "a word first\n" + json.dumps(row) + "\n", "")

    monkeypatch.setattr(probe_gemm.subprocess, "run", child)
    # on the CPU: the parent refuses cuda where CUDA is not, before any child
    monkeypatch.setattr(sys, "argv", ["probe_gemm.py", str(out), "--device", "cpu", *args])
    return probe_gemm.main(), children


def test_each_variant_at_each_batch_is_a_process_of_its_own_cache_whose_row_is_written_as_it_ends(
        monkeypatch, tmp_path):
    out = tmp_path / "out.json"
    status, children = _main(monkeypatch, out, "--variants", "graph,compiled", "--batches", "4,8", "--prompt", "41",
                             failing=(8,))
    assert status == 1  # a process failed
    assert [(c["variant"], c["batch"], c["prompt"]) for c in children] == [
        ("graph", 4, "41"), ("compiled", 4, "41"), ("graph", 8, "41"), ("compiled", 8, "41")]
    assert [c["written"] for c in children] == [0, 1, 2, 3]  # a later one's crash keeps the earlier rows
    caches = [c["env"]["TORCHINDUCTOR_CACHE_DIR"] for c in children]
    assert len(set(caches)) == 4 and not any(Path(cache).exists() for cache in caches)
    assert all(c["env"]["TEARDOWN_CUPTI"] == "1" for c in children)
    rows = json.loads(out.read_text())
    assert [(row["variant"], row["batch"], row.get("error")) for row in rows] == [
        ("graph", 4, None), ("compiled", 4, None), ("graph", 8, 3), ("compiled", 8, 3)]
    assert rows[2]["stderr"] == "Traceback: it died" and rows[2]["prompt_len"] == 41
    assert rows[0]["steady_median_ms"] == 1.0
    assert _main(monkeypatch, out, "--variants", "graph")[0] == 0
    # a variant it does not know: said before any process
    with pytest.raises(SystemExit, match=r"--variants: unknown \['graf'\]; allowed: graph, compiled, "):
        _main(monkeypatch, tmp_path / "none.json", "--variants", "graph,graf")
    assert not (tmp_path / "none.json").exists()


def test_a_process_measures_its_batch_and_prompt_and_hands_a_variants_options_to_inductor(monkeypatch):
    from rollout_study import workload
    from rollout_study.engines import graph, graph_compiled

    class Built(Exception):
        pass

    asked, options = [], {}
    real = workload.random_workload
    monkeypatch.setattr(workload, "random_workload",
                        lambda *args, **kwargs: asked.append(args[:3]) or real(*args, **kwargs))

    def engine(model, device, policy, prompt, new, **kwargs):
        asked.append(prompt)
        options.update(graph_compiled.INDUCTOR_OPTIONS)
        raise Built

    monkeypatch.setattr(graph, "GraphEngine", engine)
    with pytest.raises(Built):
        probe_gemm.one("graph", "synthetic", "cpu", batch=3, prompt=8)
    assert asked == [(3, 3, 8), 8]
    # rows_mm goes to this process's decomposition (stood in for here: the table is process-wide), not to inductor
    monkeypatch.setattr(graph_compiled, "INDUCTOR_OPTIONS", dict(graph_compiled.INDUCTOR_OPTIONS))  # put back after
    engines_own = dict(graph_compiled.INDUCTOR_OPTIONS)
    monkeypatch.setattr(graph_compiled, "GraphCompiledEngine", engine)
    monkeypatch.setattr(probe_gemm, "use_rows_mm", asked.append)
    with pytest.raises(Built):
        probe_gemm.one("compiled-rows-mm-cdt", "synthetic", "cpu", batch=3, prompt=8)
    assert asked[2:] == [(3, 3, 8), 16, 8] and options == {**engines_own, "coordinate_descent_tuning": True}


def test_a_model_or_device_the_study_cannot_take_is_refused_before_any_process(tmp_path):
    # each would fail in every child, after its model load (a compile variant's, after minutes)
    model = _probe(tmp_path, "--device", "cpu", "--model", "no-such-model", "--variants", "graph")
    assert model.returncode == 1 and "graph batch" not in model.stdout, model.stdout + model.stderr
    assert model.stderr.splitlines()[-1].startswith("--model: parameters: model must be 'synthetic', one of ")
    indexed = _probe(tmp_path, "--device", "cuda:7", "--model", "synthetic", "--variants", "graph")
    said = indexed.stderr.splitlines()[-1]  # argparse words the rest (quotes, a suggestion) by Python version
    assert indexed.returncode == 2 and "argument --device: invalid choice: 'cuda:7'" in said and "cpu" in said
    assert not (tmp_path / "out.json").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is here: --device cuda runs")
def test_cuda_without_cuda_is_refused_before_any_process(tmp_path):
    absent = _probe(tmp_path, "--model", "synthetic", "--variants", "graph")  # the default device, cuda
    assert absent.returncode == 1 and "graph batch" not in absent.stdout, absent.stdout + absent.stderr
    assert absent.stderr.splitlines()[-1] == "--device: cuda, but no CUDA device is here; allowed here: cpu"
    assert not (tmp_path / "out.json").exists()


def test_a_prompt_the_models_positions_cannot_hold_with_the_new_tokens_is_refused_before_any_process(tmp_path):
    # a local checkpoint's table was checked by each child at the study's default lengths, not the probe's
    model = fake_checkpoint(tmp_path / "short", {"model_type": "llama", "max_position_embeddings": 70})
    done = _probe(tmp_path, "--device", "cpu", "--model", str(model), "--variants", "graph", "--prompt", "8")
    assert done.returncode == 1 and "graph batch" not in done.stdout, done.stdout + done.stderr
    assert done.stderr.splitlines()[-1] == ("--prompt: 8 with the probe's 64 new tokens: parameters: prompt_len + "
                                            "max_new_tokens = 72 exceeds the model's 70 positions; allowed: "
                                            "prompt_len + max_new_tokens <= 70")
    assert not (tmp_path / "out.json").exists()
