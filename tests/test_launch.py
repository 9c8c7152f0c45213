"""The fresh process's side of `launch`, with the study itself stood in: which run a request starts, and that
nothing but the result reaches the real stdout."""
import io
import json
import sys

from rollout_study import launch, protocol
from rollout_study.params import StudyParams

PARAMS = {"device": "cpu", "engines": ["graph"], "policy": ["reuse"]}


class _Ran:
    def __init__(self, name, calls):
        self.name, self.calls = name, calls

    def __call__(self, params, progress=False, command=None, mode=None):
        self.calls.append((self.name, params, progress, command, mode))
        return "result of " + self.name


def _stand_ins(monkeypatch):
    calls = []
    monkeypatch.setattr(launch, "run_study", _Ran("run_study", calls))
    monkeypatch.setattr(protocol, "run_in_process", _Ran("run_in_process", calls))
    return calls


def test_a_study_request_runs_the_whole_study_and_any_other_mode_the_protocol_alone(monkeypatch):
    calls = _stand_ins(monkeypatch)
    assert launch.run_request({"params": PARAMS, "mode": launch.STUDY_MODE}, "cmd") == "result of run_study"
    assert launch.run_request({"params": PARAMS, "mode": "first_only"}, "cmd") == "result of run_in_process"
    assert launch.run_request({"params": PARAMS}, "cmd") == "result of run_in_process"
    assert [(c[0], c[2], c[3], c[4]) for c in calls] == [("run_study", False, "cmd", None),
                                                         ("run_in_process", False, "cmd", "first_only"),
                                                         ("run_in_process", False, "cmd", "measure")]
    assert all(c[1] == StudyParams.from_dict(PARAMS) for c in calls)


def test_the_worker_writes_only_the_result_on_stdout_and_the_study_s_prints_on_stderr(monkeypatch, capsys):
    class _Result:
        def to_dict(self):
            return {"valid": True}

    def noisy(request, command):
        print("a progress line")
        assert command == "fresh process (rollout_study.launch)"
        return _Result()

    real = io.StringIO()
    monkeypatch.setattr(launch, "run_request", noisy)
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({"params": PARAMS})))
    monkeypatch.setattr("sys.stdout", real)
    assert launch.worker() == 0
    assert sys.stdout is real  # given back after the run
    assert json.loads(real.getvalue()) == {"valid": True}
    assert "a progress line" in capsys.readouterr().err
