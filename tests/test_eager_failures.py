"""The CUDA tests' output keeps a failure's traceback even when the session aborts before pytest's summary."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

TESTS = pathlib.Path(__file__).parent

INNER = '''
import os

def test_fails():
    assert 1 == 2, "the message that must survive"

def test_aborts():
    os.abort()  # what a fault in a CUDA graph's destructor does to the session
'''


def _session(tmp_path, eager: bool) -> str:
    (tmp_path / "test_inner.py").write_text(INNER)
    env = {k: v for k, v in os.environ.items() if k != "ROLLOUT_STUDY_EAGER_FAILURES"}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    if eager:
        env["ROLLOUT_STUDY_EAGER_FAILURES"] = "1"
    # -p conftest: the project's conftest loaded as a plugin, its hook and all
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-v",
                          "test_inner.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode not in (0, 1)  # the abort ended the session: pytest never reached its summary
    assert "short test summary" not in run.stdout and "test_inner.py::test_fails FAILED" in run.stdout
    return run.stdout + run.stderr


def test_a_failure_is_written_before_a_later_abort_ends_the_session(tmp_path):
    assert "the message that must survive" in _session(tmp_path, eager=True)
    assert "the message that must survive" not in _session(tmp_path, eager=False)  # pytest alone loses it
