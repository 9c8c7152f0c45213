"""tools/probe_corner.py picks its point by parameter values, not by a substring of the slug."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tool_module import load

from rollout_study.params import StudyParams
from rollout_study.sweep import SweepSpec

ROOT = Path(__file__).resolve().parents[1]
probe_corner = load("probe_corner")


@pytest.fixture(scope="module")
def rotate_points():
    return SweepSpec.from_yaml(ROOT / "params" / "probe-turn-rotate-run.yaml").points()


def test_rotate_is_not_rotate_run(rotate_points):
    # "turn_order=rotate" is a substring of rotate-run's slug too: the old match picked two points and stopped
    slug, params = probe_corner.pick(rotate_points, ["turn_order=rotate", "policy=[reuse, recapture]",
                                                     "max_new_tokens=64"])
    assert params.turn_order == "rotate" and params.policy == ["reuse", "recapture"]
    assert params.max_new_tokens == 64 and "rotate-run" not in slug


def test_a_list_value_is_the_whole_list():
    # "engines=eager,graph" was a prefix of three points' slugs; the YAML list equals one point's engines
    points = SweepSpec.from_yaml(ROOT / "params" / "sweep-h200.yaml").points()
    slug, params = probe_corner.pick(points, ["model=synthetic-llama-3.2-1b", "batch_size=64", "max_new_tokens=512",
                                              "engines=[eager, graph, hf-continuous]"])
    assert (params.model, params.batch_size, params.max_new_tokens) == ("synthetic-llama-3.2-1b", 64, 512)
    assert params.engines == ["eager", "graph", "hf-continuous"]


def test_auto_reads_as_a_parameter_file_writes_it(rotate_points):
    # prompt_len: auto in the file is None in the point's parameters (StudyParams.from_dict)
    slug, params = probe_corner.pick(rotate_points, ["prompt_len=auto", "turn_order=rotate-run", "max_new_tokens=256",
                                                     "policy=[recapture, reuse]", "lr=1.0e-4"])
    assert params.prompt_len is None and params.turn_order == "rotate-run" and params.max_new_tokens == 256


def test_a_policy_is_the_policies_it_names(rotate_points):
    # policy: both is recapture then reuse, as the study runs it; the other order is another point
    slug, params = probe_corner.pick(rotate_points, ["policy=both", "turn_order=rotate", "max_new_tokens=64"])
    assert params.policy == ["recapture", "reuse"] and params.turn_order == "rotate"
    other, params = probe_corner.pick(rotate_points, ["policy=[reuse, recapture]", "turn_order=rotate",
                                                      "max_new_tokens=64"])
    assert params.policy == ["reuse", "recapture"] and other != slug


@pytest.mark.parametrize("matches, said", [
    (["turn_order"], "KEY=VALUE"),
    (["=rotate"], "KEY=VALUE"),
    (["turn_orders=rotate"], "names no parameter ['turn_orders']"),
    (["turn_order=rotate", "turn_order=rotate-run"], "names turn_order twice"),
    # a value the parameter cannot take: its check's message, with the allowed values
    (["turn_order=rotat"], "turn_order must be one of fixed, reverse, rotate, rotate-run; got 'rotat'"),
    (["lr=ten"], "--match lr must be a number in (0, 10], got 'ten' (str)"),
    (["max_new_tokens=[64"], "--match max_new_tokens: value '[64' is not valid YAML"),
    # one this sweep has not: the values it has; several points: the parameters that tell them apart
    (["max_new_tokens=65", "turn_order=rotate"], "no point has max_new_tokens=65; the sweep's max_new_tokens: 64, 256"),
    (["max_new_tokens=64"], "picked 4, "),
    (["max_new_tokens=64"], "differ in policy: [recapture, reuse], [reuse, recapture]; turn_order: rotate, rotate-run"),
])
def test_a_bad_match_says_what(rotate_points, matches, said):
    with pytest.raises(SystemExit) as stop:
        probe_corner.pick(rotate_points, matches)
    assert said in str(stop.value)


def test_no_point_picked_names_the_values_of_the_parameters_none_has_alone(rotate_points):
    # prompt_len's None as the file writes it; turn_order, which some point has, not listed
    with pytest.raises(SystemExit) as stop:
        probe_corner.pick(rotate_points, ["prompt_len=16", "turn_order=rotate"])
    assert str(stop.value) == "--match picked no point: no point has prompt_len=16; the sweep's prompt_len: auto"


def test_values_of_different_points_pick_none_and_say_so():
    points = [("small-short", StudyParams(batch_size=1, requests=1, max_new_tokens=16)),
              ("large-long", StudyParams(batch_size=4, requests=4, max_new_tokens=64))]
    with pytest.raises(SystemExit) as stop:
        probe_corner.pick(points, ["batch_size=1", "max_new_tokens=64"])
    assert str(stop.value) == ("--match picked no point: each value is some point's, but no point has them all; "
                               "the sweep's batch_size: 1, 4; max_new_tokens: 16, 64")


def test_several_points_differ_in_what_the_study_reads():
    # `both` and [recapture, reuse] are one policy: the points differ in their batch, not in their policy
    points = [("both-1", StudyParams(policy="both", batch_size=1, requests=1)),
              ("listed-2", StudyParams(policy=["recapture", "reuse"], batch_size=2, requests=2))]
    with pytest.raises(SystemExit) as stop:
        probe_corner.pick(points, ["policy=both"])
    said = str(stop.value)
    assert "picked 2, ['both-1', 'listed-2'], which differ in requests: 1, 2; batch_size: 1, 2 (" in said
    assert "policy" not in said.split("differ in")[1]


def test_a_value_reads_as_the_studys_set_reads_it(rotate_points):
    # papermill's -p and the study's --set read 1e-4 as a number (YAML alone reads it as text) and engines as a list
    slug, params = probe_corner.pick(rotate_points, ["lr =1e-4", "engines=graph", "turn_order=rotate",
                                                     "max_new_tokens=256", "policy=both"])
    assert params.lr == 1e-4 and params.engines == ["graph"] and params.max_new_tokens == 256


def _corner(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """tools/probe_corner.py ARGS, run in `cwd`."""
    return subprocess.run([sys.executable, str(ROOT / "tools" / "probe_corner.py"), *args], capture_output=True,
                          text=True, cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_a_bare_set_is_refused_before_any_work(tmp_path):
    out = tmp_path / "probe.json"
    done = _corner(tmp_path, "--sweep", str(ROOT / "params" / "probe-turn-rotate-run.yaml"), "--match",
                   "turn_order=rotate", "--match", "max_new_tokens=64", "--match", "policy=both", "--set", "lr",
                   "--out", str(out))
    assert done.returncode == 1 and "--set expects key=value, got 'lr'" in done.stderr
    assert "point " not in done.stderr and not out.exists()


@pytest.mark.parametrize("changes, said", [
    (["--set", "batch_size=0"], "--set/--engines: batch_size must be an integer between 1 and 1024, got 0"),
    (["--set", "heads=5"], "--set/--engines: hidden (128) must be a multiple of heads (5)"),  # across parameters
    (["--engines", "eager,warp"], "--set/--engines: engines must be a non-empty list drawn from eager, graph"),
])
def test_a_change_the_study_refuses_is_said_before_any_work(tmp_path, changes, said):
    out = tmp_path / "probe.json"
    done = _corner(tmp_path, "--sweep", str(ROOT / "params" / "sweep-cpu.yaml"), "--match", "batch_size=1", *changes,
                   "--out", str(out))
    assert done.returncode == 1 and said in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "point " not in done.stderr and not out.exists()


def test_a_missing_sweep_file_is_said_before_any_work(tmp_path):
    done = _corner(tmp_path, "--sweep", "no-such.yaml", "--match", "batch_size=1")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "sweep file 'no-such.yaml' does not exist" in done.stderr


# The probe whole, in a child whose study fails where a GPU's error would: its update (a failure the study records)
# or its model's load (what the study raises)
CHILD = """
import runpy, sys
from rollout_study import models, training

def fail(*args, **kwargs):
    raise RuntimeError("injected")

setattr(*((training.Trainer, "update") if sys.argv.pop(1) == "update" else (models, "load")), fail)
sys.argv.pop(0)
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _probe(out: Path, failing: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD, failing, str(ROOT / "tools" / "probe_corner.py"), "--sweep",
                           str(ROOT / "params" / "sweep-cpu.yaml"), "--match", "batch_size=1", "--engines", "eager",
                           "--set", "iterations=1", "--out", str(out)], capture_output=True, text=True, timeout=300,
                          cwd=out.parent, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_the_probe_says_each_step_and_failure_of_the_point_as_it_runs_it(tmp_path):
    done = _probe(tmp_path / "probe.json", "update")
    assert done.returncode == 0, done.stderr[-2000:]
    said = [line.split("] ", 1)[1] for line in done.stderr.splitlines() if line.startswith("[")]
    assert said[0] == ("point batch_size=1-requests=1, engines ['eager'], "
                       "changed {'iterations': 1, 'engines': ['eager']}")
    for step in ("call eager 0 first 0", "reference 0", "update 0 False", "call eager 0 steady_after_update 0"):
        assert f"begin {step}" in said and f"end {step}" in said
    assert "FAILURE engine=None policy=None cycle=0 phase=update: RuntimeError: injected" in said
    assert "Traceback (most recent call last)" in done.stderr  # with its traceback
    assert said[-1] == "done: 4 calls, 1 failures, valid False"
    result = json.loads((tmp_path / "probe.json").read_text())
    assert {call["engine"] for call in result["calls"]} == {"eager"} and result["metadata"]["params"]["iterations"] == 1
    # what the study raises is said, and the probe exits as it does (no result to write)
    raised = _probe(tmp_path / "raised.json", "load")
    assert raised.returncode == 0 and "RAISED RuntimeError: injected" in raised.stderr
    assert not (tmp_path / "raised.json").exists()
