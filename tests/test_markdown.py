import subprocess
import sys

from rollout_study import markdown, results


def test_summary_of_a_cpu_run(tmp_path):
    out = tmp_path / "r.json"
    done = subprocess.run([sys.executable, "-m", "rollout_study.bench", "--device", "cpu", "--requests", "5",
                           "--prompt-len", "8", "--max-new-tokens", "4", "--iterations", "2", "--policy", "both",
                           "--quiet", "--output", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    text = markdown.summary(results.read(str(out)))
    assert "synthetic model" in text and "**no CUDA graph**" in text
    for target in ("| eager | 0 | first |", "| graph[recapture] | 0 | steady |", "| graph[reuse] | 0 | steady_after_update |"):
        assert target in text
    assert "not measured" in text  # no profile on the CPU: the kernel-time target is not claimed
    assert "| parity with generate() on every measured call | 18/18 | all | yes |" in text
