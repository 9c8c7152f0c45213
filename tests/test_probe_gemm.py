"""tools/probe_gemm.py's rows variant: which matrix products inductor is made to write as a reduction."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# In a child: the probe replaces an entry of inductor's process-wide decomposition table.
CHILD = """
import json, sys, torch
sys.path.insert(0, sys.argv[1] + "/tools")
import probe_gemm
probe_gemm.use_rows_mm(4)
linear = torch.compile(torch.nn.functional.linear, backend="inductor", dynamic=False, fullgraph=True)
out = {}
for rows, width in ((3, 64), (5, 64), (3, int(sys.argv[2]))):  # few rows; one too many; a weight over the bound
    before = dict(probe_gemm.ROWS_MM_SEEN)
    x, w = torch.randn(rows, 64), torch.randn(width, 64)
    got = linear(x, w)
    out[f"{rows}x{width}"] = {"seen": {k: v - before[k] for k, v in probe_gemm.ROWS_MM_SEEN.items()},
                              "close": bool(torch.allclose(got, x @ w.t(), rtol=1e-5, atol=1e-5))}
print(json.dumps(out))
"""


def test_rows_mm_decomposes_only_few_rows_against_a_small_weight(tmp_path):
    over = 2 ** 22 // 64 + 1  # rows of 64: one row past ROWS_MM_MAX_WEIGHT's 2**22 values
    # An empty inductor cache, as the probe gives each variant: a cached graph is not traced again, so the
    # decomposition would not run (its table is not part of the cache's key)
    done = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), str(over)], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["3x64"] == {"seen": {"decomposed": 1, "left_to_inductor": 0}, "close": True}
    assert seen["5x64"] == {"seen": {"decomposed": 0, "left_to_inductor": 1}, "close": True}
    assert seen[f"3x{over}"] == {"seen": {"decomposed": 0, "left_to_inductor": 1}, "close": True}


def _probe(tmp_path, *args):
    return subprocess.run([sys.executable, str(ROOT / "tools" / "probe_gemm.py"), str(tmp_path / "out.json"),
                           *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")})


def test_each_batch_runs_in_its_own_process_with_the_prompt_asked(tmp_path):
    done = _probe(tmp_path, "--device", "cpu", "--model", "synthetic", "--variants", "graph", "--batches", "1,3",
                  "--prompt", "8")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads((tmp_path / "out.json").read_text())
    assert [(r["batch"], r["prompt_len"], r["parity_ok"]) for r in rows] == [(1, 8, True), (3, 8, True)]
    assert len({r["pid"] for r in rows}) == 2 and os.getpid() not in {r["pid"] for r in rows}


def test_a_batch_or_prompt_out_of_range_is_refused_before_any_process(tmp_path):
    for option, value, said in (("--batches", "4,0", "comma-separated whole numbers from 1 to 64"),
                                ("--batches", "4,x", "comma-separated whole numbers from 1 to 64"),
                                ("--prompt", "513", "a whole number from 1 to 512"),
                                ("--prompt", "8,9", "a whole number from 1 to 512")):
        done = _probe(tmp_path, "--device", "cpu", option, value)
        assert done.returncode != 0 and f"{option}: {said}, not '{value}'" in done.stderr
        assert not (tmp_path / "out.json").exists()
