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


def test_readme_figures_are_the_committed_results():
    """Every results table in the README is regenerated from the result file committed beside it."""
    import os
    import re

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    readme = open(os.path.join(root, "README.md"), encoding="utf-8").read()
    blocks = re.findall(r"<!-- readme-results (\S+)( original)? -->\n(.*?)\n<!-- end readme-results -->", readme, re.S)
    assert blocks, "the README has no results tables"
    for name, original, table in blocks:
        result = results.read(os.path.join(root, "reports", name, "result.json"))
        assert result["metadata"]["hardware"]["gpu"], f"{name}: README figures must come from a GPU run"
        assert table == markdown.readme_results(result, with_original=bool(original))
