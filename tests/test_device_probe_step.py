"""tools/h200-reports.sh's `probe-cliff` step: the diagnostic runs in the call, with the model and prompt length it is
given, into $OUT, and never beside a background step on the GPU (it times kernels) or without the study's wheels."""
import json
import os
import subprocess
import sys
from pathlib import Path

from device_tree import install_wheels, script

# Stands in for tools/probe_batch_cliff.py (which needs a GPU): says what it was asked, writes its JSON, and exits 4
# where asked for the model "failing", as a crash would.
FAKE_PROBE = """import json, os, sys
json.dump(sys.argv[1:] + [os.environ.get("ROLLOUT_STUDY_COMMIT")], open(sys.argv[1], "w"))
print("batch   1: fake")
sys.exit(4 if "failing" in sys.argv else 0)
"""


def _tree_with_probe(tmp_path):
    (tmp_path / "tree" / "tools").mkdir(parents=True)
    (tmp_path / "tree" / "tools" / "probe_batch_cliff.py").write_text(FAKE_PROBE)


def test_probe_cliff_runs_the_probe_with_its_model_and_prompt_into_out(tmp_path):
    _tree_with_probe(tmp_path)
    bare = script(tmp_path, "probe-cliff", "synthetic-smollm2-135m", "41")
    assert bare.returncode == 3 and "error: the wheels are not installed" in bare.stdout
    assert not (tmp_path / "probe-cliff-synthetic-smollm2-135m.json").exists()
    install_wheels(tmp_path)
    done = script(tmp_path, "probe-cliff", "synthetic-smollm2-135m", "41")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "batch   1: fake" in done.stdout and "PROBE-CLIFF (exit 0)" in done.stdout
    asked = json.loads((tmp_path / "probe-cliff-synthetic-smollm2-135m.json").read_text())
    # the commit the call was given reaches the probe, which records it
    assert asked == [str(tmp_path / "probe-cliff-synthetic-smollm2-135m.json"), "--model", "synthetic-smollm2-135m",
                     "--prompt", "41", "a" * 40]
    assert "batch   1: fake" in (tmp_path / "probe-cliff-synthetic-smollm2-135m.log").read_text()
    # without arguments: the tiny model and the tiny sweep's prompt, as the probe was first run
    tiny = script(tmp_path, "probe-cliff")
    assert tiny.returncode == 0 and json.loads((tmp_path / "probe-cliff-synthetic.json").read_text())[1:4] == [
        "--model", "synthetic", "--prompt"]
    assert json.loads((tmp_path / "probe-cliff-synthetic.json").read_text())[4] == "32"
    # a name that is no shape's (a folder, say) is refused before anything runs
    folder = script(tmp_path, "probe-cliff", "../x", "41")
    assert folder.returncode == 2 and "error: probe-cliff MODEL is a synthetic shape's name" in folder.stdout
    # a probe that fails: the step fails with its status
    failed = script(tmp_path, "probe-cliff", "failing", "41")
    assert failed.returncode == 4 and "PROBE-CLIFF (exit 4)" in failed.stdout


def test_probe_cliff_is_refused_while_a_background_step_runs_on_the_gpu(tmp_path):
    _tree_with_probe(tmp_path)
    install_wheels(tmp_path)
    step = subprocess.Popen(["sleep", "60"])
    try:
        (tmp_path / "work-inner-resume.pid").write_text(f"{step.pid}\n")
        busy = script(tmp_path, "probe-cliff", "synthetic-smollm2-135m", "41")
    finally:
        step.kill()
        step.wait()
    assert busy.returncode == 1 and "error: resume is running on this GPU; probe-cliff not started" in busy.stdout
    assert not (tmp_path / "probe-cliff-synthetic-smollm2-135m.json").exists()


def test_the_probe_refuses_a_batch_or_length_out_of_range_before_the_gpu(tmp_path):
    # The probe itself (no GPU here): its arguments are checked before CUDA is touched, and nothing is written
    probe = Path(__file__).resolve().parent.parent / "tools" / "probe_batch_cliff.py"
    for args, said in ((["--batches", "8,0"], "argument --batches: comma-separated whole numbers from 1 to 64"),
                       (["--batches", "8,x"], "argument --batches: comma-separated whole numbers from 1 to 64"),
                       (["--new", "0"], "--length-bucket: probe: max_new_tokens must be an integer between 1 and"),
                       (["--model", "synthetic-smollm2-135m", "--new", "9000"], "exceeds the model's"),
                       (["--length-bucket", "-1"], "--length-bucket: probe: length_bucket must be an integer"),
                       (["--prompt", "0"], "--prompt, --new or --length-bucket: probe: prompt_len must be an integer "
                                           "between 1 and"),
                       (["--model", "synthetic-gpt"], "argument --model: invalid choice: 'synthetic-gpt'")):
        # no device visible: on a GPU host too, a probe that reached CUDA before its checks would fail otherwise
        done = subprocess.run([sys.executable, str(probe), str(tmp_path / "out.json"), *args], capture_output=True,
                              text=True, timeout=300, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
        assert done.returncode == 2 and said in done.stderr, done.stderr[-800:]
        assert not (tmp_path / "out.json").exists()
