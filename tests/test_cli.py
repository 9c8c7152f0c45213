"""cli.py: the reference workload end to end through `bench`, parameters, bad input, a parity failure."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from result_fixture import make_result, make_result_dict
from rollout_study import cli, cli_params
from rollout_study.engines.graph import GraphEngine
from rollout_study.param_values import ParameterError
from rollout_study.progress import Progress
from rollout_study.result import Result

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ["--requests", "8", "--batch-size", "4", "--prompt-len", "32", "--max-new-tokens", "32",
             "--iterations", "10"]


def run_cli(*args, module=("rollout_study",), timeout=600):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", *module, *args], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=timeout)


def test_reference_workload_end_to_end_through_the_original_command_line(tmp_path):
    out = tmp_path / "rollout-first-call.json"
    done = run_cli(*REFERENCE, "--device", "cpu", "--output", str(out), module=("rollout_study.bench",))
    assert done.returncode == 0, done.stderr[-3000:]
    result = Result.read(out)
    assert result.is_valid and not result.failures
    meta = result.metadata
    assert meta["label"] == "synthetic" and meta["cuda_graph"] is False and "no CUDA graph" in meta["graph_note"]
    assert meta["workload"]["requests"] == 8 and meta["workload"]["batch_sizes"] == [4, 4]
    assert meta["command"].startswith("python -m rollout_study bench --requests 8")
    for key in ("name", "layers", "hidden_size", "heads", "kv_heads", "vocab", "parameters", "dtype"):
        assert meta["model"][key] is not None
    assert meta["hardware"]["cpu"] and meta["hardware"]["cores"]
    assert all(meta["software"][key] for key in ("python", "torch", "transformers"))
    assert meta["git"]["commit"] and meta["time_start"] and meta["training"]["optimizer"] == "sgd"
    # eager and graph[recapture]; first + 10 steady, before and after the one update
    assert len(result.calls) == 2 * (1 + 10) * 2
    assert len(result.calls_of("graph[recapture]", phase="steady")) == 10
    assert len(result.calls_of("eager", phase="first_after_update")) == 1
    assert all(c.parity_ok and c.generated_tokens == 8 * 32 for c in result.calls)
    assert len(result.updates) == 1 and result.updates[0].loss > 0
    assert result.profile == {}  # no CUDA, no profile
    assert "graph[recapture]" in done.stdout and "wrote" in done.stdout


@pytest.mark.parametrize("args,fragment", [
    (["--requests", "0"], "requests must be an integer between 1"),
    (["--batch-size", "-1"], "batch_size must be an integer between 1"),
    (["--policy", "never"], "policy must be one of recapture, reuse, both"),
    (["--optimizer", "rmsprop"], "optimizer must be one of sgd, adamw"),
    (["--dtype", "int8"], "dtype must be one of"),
    (["--engines", "eager,turbo"], "engines must be a non-empty list drawn from eager, graph"),
    (["--model", "/nonexistent/model"], "model must be 'synthetic'"),
    (["--prompt-len", "2000", "--max-new-tokens", "100"], "exceeds the model's 2048 positions"),
    (["--set", "colour=red"], "unknown parameter(s) colour"),
    (["-p", "iterations", "0"], "iterations must be"),
])
def test_bad_parameters_exit_2_naming_the_parameter_and_write_nothing(tmp_path, capsys, args, fragment):
    out = tmp_path / "r.json"
    assert cli.main(["bench", *args, "--device", "cpu", "--output", str(out)]) == 2
    assert fragment in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("output, fragment", [("", "not a file name"), (".", "not a file name"),
                                              ("folder", "is a folder"), ("/proc/x.json", "not writable"),
                                              ("a-file/x.json", "is not a folder")])
def test_an_unusable_output_path_is_refused_before_the_run(tmp_path, capsys, monkeypatch, output, fragment):
    (tmp_path / "folder").mkdir()
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("rollout_study.launch.run_study", lambda *a, **k: pytest.fail("the run started"))
    assert cli.main(["bench", "--device", "cpu", "--output", output]) == 2
    assert fragment in capsys.readouterr().err


def test_every_way_of_giving_a_parameter_agrees(tmp_path):
    base = tmp_path / "p.yaml"
    base.write_text("name: p\nrequests: 6\niterations: 2\n", encoding="utf-8")
    args = cli.parser().parse_args(["bench", str(base), "--set", "lr=0.5", "-p", "engines", "[eager]",
                                    "--cycles", "3", "--no-profile"])
    params = cli.params_from(args)
    assert (params.name, params.requests, params.iterations, params.lr, params.engines, params.cycles,
            params.profile) == ("p", 6, 2, 0.5, ["eager"], 3, False)
    assert cli_params.parse_value("engines", "eager,graph") == ["eager", "graph"]
    run_args = cli.parser().parse_args(["run", str(base), "--set", "lr=0.5", "-p", "engines", "[eager]",
                                        "--cycles", "3", "--profile", "false"])
    assert cli.params_from(run_args) == params  # run accepts what bench accepts
    with pytest.raises(ParameterError, match="key=value"):
        cli_params.parse_override("iterations")
    with pytest.raises(ParameterError, match="--set expects key=value, got ' =3'"):
        cli_params.parse_override(" =3")
    assert cli_params.parse_override(" lr = 0.5") == ("lr", 0.5)
    # one file given both ways is one file; a bad value is said against the file and the overrides
    assert cli.params_from(cli.parser().parse_args(["run", str(base), "--params", str(base)])).requests == 6
    with pytest.raises(ParameterError, match=f"^{re.escape(str(base))} with overrides: requests must be"):
        cli.params_from(cli.parser().parse_args(["run", str(base), "--set", "requests=0"]))
    with pytest.raises(ParameterError, match="^defaults with overrides: requests must be"):
        cli.params_from(cli.parser().parse_args(["bench", "--requests", "0"]))


def test_a_parameter_given_several_ways_takes_the_later_kind_as_the_help_says(tmp_path):
    # file, then a flag per parameter, then --set, then -p, whatever their order on the line
    base = tmp_path / "p.yaml"
    base.write_text("name: p\nlr: 0.1\n", encoding="utf-8")
    given = {"flag": ["--lr", "0.2"], "set": ["--set", "lr=0.3"], "p": ["-p", "lr", "0.4"]}
    for kinds, lr in ((["p", "set", "flag"], 0.4), (["set", "flag"], 0.3), (["flag"], 0.2), ([], 0.1)):
        line = ["run", str(base)] + [word for kind in kinds for word in given[kind]]
        assert cli.params_from(cli.parser().parse_args(line)).lr == lr, kinds


def test_numbers_are_read_as_papermill_reads_them():
    """1e-4 is a number on the command line (papermill's -p), though YAML 1.1 reads it as text."""
    for flags in (["-p", "lr", "1e-4"], ["--set", "lr=1e-4"], ["--lr", "1e-4"]):
        assert cli.params_from(cli.parser().parse_args(["run", *flags])).lr == 1e-4, flags
    raws = ("4", "-3", "2.5", "5E3", "True", "False", "None", "true", "[1, 2]", "abc")
    assert [cli_params.parse_value("x", raw) for raw in raws] \
        == [4, -3, 2.5, 5000.0, True, False, None, True, [1, 2], "abc"]
    # nothing after the = is text, which every check refuses, not YAML's None (prompt_len's auto)
    assert cli_params.parse_value("prompt_len", "") == cli_params.parse_value("prompt_len", " ") == ""
    # words papermill's float() takes stay text: no parameter's value
    assert cli_params.parse_value("name", "nan") == "nan"
    # float() overflows it to inf: text, which lr's check refuses
    assert cli_params.parse_value("lr", "1e999") == "1e999"
    args = cli.parser().parse_args(["run", "-p", "prompt_len", "None", "--requests", "abc"])
    with pytest.raises(ParameterError, match="requests must be an integer between 1 and 4096, got 'abc'"):
        cli.params_from(args)


def test_parity_failure_writes_an_invalid_result_and_exits_1(tmp_path, monkeypatch, capsys):
    real_call = GraphEngine.__call__

    def corrupt(self, batches, clock):
        out = real_call(self, batches, clock)
        out.sequences[0] = out.sequences[0].clone()
        out.sequences[0][0, -1] += 1  # one wrong token in the last step
        return out

    monkeypatch.setattr(GraphEngine, "__call__", corrupt)
    out = tmp_path / "r.json"
    code = cli.main(["bench", "--device", "cpu", "--requests", "4", "--prompt-len", "8", "--max-new-tokens", "4",
                     "--iterations", "2", "--quiet", "--output", str(out)])
    assert code == 1
    raw = json.loads(out.read_text())
    assert raw["valid"] is False
    bad = [c for c in raw["calls"] if not c["parity"]["ok"]]
    assert bad and all(c["engine"] == "graph" for c in bad)
    assert bad[0]["parity"]["mismatch"]["step"] == 3
    assert "parity" in capsys.readouterr().err


def test_local_checkpoint_loads_and_is_labelled_pretrained(tmp_path, tiny):
    _, loaded = tiny()
    folder = tmp_path / "my-checkpoint"
    loaded.model.save_pretrained(folder)  # no tokenizer: seeded random prompts
    out = tmp_path / "r.json"
    done = run_cli("bench", "--model", str(folder), "--device", "cpu", "--requests", "4", "--prompt-len", "8",
                   "--max-new-tokens", "4", "--iterations", "1", "--output", str(out), "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    result = Result.read(out)
    meta = result.metadata
    assert meta["label"] == "pretrained" and meta["model"]["name"] == "my-checkpoint"
    assert meta["model"]["source"] == str(folder) and meta["workload"]["prompt_source"] == "random"
    assert result.is_valid
    chat = run_cli("bench", "--model", str(folder), "--prompts", "chat", "--device", "cpu",
                   "--output", str(tmp_path / "c.json"))
    assert chat.returncode == 2 and "prompts: 'chat' needs a model with a tokenizer" in chat.stderr
    assert not (tmp_path / "c.json").exists()


def test_help_names_the_defaults_each_command_runs_with():
    """`run` without a file runs cpu-smoke.yaml on a CPU and reference-tiny.yaml with CUDA, not StudyParams's."""
    def help_of(command: str, flag: str) -> str:
        [action] = [a for a in cli.parser()._subparsers._group_actions[0].choices[command]._actions
                    if flag in a.option_strings]
        return action.help

    assert help_of("run", "--requests") == ("default: the parameter file's; without one, 6 on CPU (cpu-smoke.yaml), "
                                            "8 with CUDA (reference-tiny.yaml)")
    assert help_of("run", "--prompt-len").endswith("16 on CPU (cpu-smoke.yaml), 32 with CUDA (reference-tiny.yaml)")
    assert help_of("run", "--batch-size").endswith("4 (in cpu-smoke.yaml and reference-tiny.yaml)")
    assert help_of("bench", "--requests") == "default: the parameter file's; without one, 8"
    assert help_of("bench", "--prompt-len").endswith("without one, auto")


def test_compare_and_publish_name_what_they_expect_instead_of_a_bare_errno(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "result.json").write_text("{}", encoding="utf-8")
    assert cli.main(["compare", str(run), str(run)]) == cli.EXIT_BAD_INPUT
    assert f"{str(run)!r} is a folder without sweep.json; allowed: a result file, such as " \
           f"{str(run / 'result.json')!r} (it holds one: name it)" in capsys.readouterr().err
    assert cli.main(["compare", str(tmp_path / "none.json"), str(run / "result.json")]) == cli.EXIT_BAD_INPUT
    assert "none.json' does not exist; allowed: a result file or a sweep folder" in capsys.readouterr().err
    assert cli.main(["publish", str(run), "--reports-root", "/proc/x"]) == cli.EXIT_BAD_INPUT
    assert "--reports-root '/proc/x': the folder /proc is not writable" in capsys.readouterr().err


def test_help_lists_every_subcommand():
    done = run_cli("--help", timeout=120)
    assert done.returncode == 0
    for command in ("run", "bench", "report", "summary", "publish"):
        assert command in done.stdout


def test_main_job_default_follows_cuda(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cli.default_params_file().name == "cpu-smoke.yaml"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert cli.default_params_file().name == "reference-tiny.yaml"


def test_a_failed_final_write_keeps_the_result_in_a_named_fallback(tmp_path, monkeypatch, capsys):
    from rollout_study.result import Result as RecordResult

    real_write = RecordResult.write
    target = tmp_path / "r.json"

    def full_disk(self, path):
        if Path(path) == target:
            raise OSError(28, "No space left on device")
        return real_write(self, path)

    monkeypatch.setattr(RecordResult, "write", full_disk)
    code = cli.main(["bench", "--device", "cpu", "--requests", "2", "--prompt-len", "8", "--max-new-tokens", "2",
                     "--iterations", "1", "--engines", "eager", "--quiet", "--output", str(target)])
    captured = capsys.readouterr()
    assert code == 1 and "saved to" in captured.err and "eager" in captured.out  # the summary is not lost
    fallback = Path(captured.err.split("saved to ")[1].split()[0])
    assert Result.read(fallback).is_valid
    fallback.unlink()


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8") as handle:
                    parent = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the process table from /proc")
def test_sigterm_during_cold_starts_leaves_no_orphan_and_no_partial_folder(tmp_path):
    import signal
    import time

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-m", "rollout_study", "run", "params/cpu-smoke.yaml", "--quiet",
                                "--output-root", str(tmp_path), "--set", "cold_starts=3"], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen: set[int] = set()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        seen |= _descendants(process.pid)
        launched = [p for p in seen if _alive(p) and "rollout_study.launch" in _cmdline(p)]
        if launched:
            break
        time.sleep(0.5)
    assert process.poll() is None, "the run ended before a cold start began: " + process.stderr.read()[-2000:]
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=120)
    time.sleep(3)
    assert [p for p in seen if _alive(p)] == []  # kernel, cold-start children: all gone
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no partial run folder


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def _hashed(tmp_path, name: str, prompt_len: int = 16, flipped: bool = False) -> str:
    data = make_result_dict()
    data["metadata"]["workload"]["prompt_len"] = prompt_len
    for call in data["calls"]:
        call["tokens_sha256"] = f"{call['engine']}-{call['cycle']}-{call['phase']}-{call['index']}"
    if flipped:
        data["calls"][-1]["tokens_sha256"] = "another token"
    path = tmp_path / name
    Result.from_dict(data).write(path)
    return str(path)


def test_compare_of_two_results_passes_only_for_the_same_workload_and_tokens(tmp_path, capsys):
    # the same tokens from another workload prove nothing about either engine
    a, b, other = _hashed(tmp_path, "a.json"), _hashed(tmp_path, "b.json"), _hashed(tmp_path, "c.json", 32)
    assert cli.main(["compare", a, b]) == cli.EXIT_OK
    assert cli.main(["compare", a, other]) == cli.EXIT_FAILED
    assert "different workloads: prompt_len 16 vs 32" in capsys.readouterr().out
    assert cli.main(["compare", a, _hashed(tmp_path, "d.json", flipped=True)]) == cli.EXIT_FAILED


def test_compare_refuses_a_sweep_folder_against_a_result_file(tmp_path, capsys):
    folder = tmp_path / "sweep"
    folder.mkdir()
    (folder / "sweep.json").write_text("{}", encoding="utf-8")
    assert cli.main(["compare", str(folder), _hashed(tmp_path, "a.json")]) == cli.EXIT_BAD_INPUT
    assert "must both be sweep folders (with sweep.json) or both result files" in capsys.readouterr().err


def test_summary_prints_the_console_table_or_summary_md(tmp_path, capsys):
    path = tmp_path / "r.json"
    make_result().write(path)
    assert cli.main(["summary", str(path)]) == cli.EXIT_OK
    assert capsys.readouterr().out.startswith("synthetic | tiny-llama-fixture | cpu float32")
    assert cli.main(["summary", str(path), "--markdown"]) == cli.EXIT_OK
    assert capsys.readouterr().out.startswith("# fixture: synthetic model tiny-llama-fixture")


def test_an_os_error_is_bad_input_said_in_one_line_not_a_traceback(tmp_path, monkeypatch, capsys):
    path = tmp_path / "r.json"
    path.write_text("{}", encoding="utf-8")

    def unreadable(*args, **kwargs):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(Result, "read", unreadable)
    assert cli.main(["summary", str(path)]) == cli.EXIT_BAD_INPUT
    assert "error: [Errno 5] Input/output error" in capsys.readouterr().err


def test_the_progress_bar_counts_each_call_once_on_standard_error_and_quiet_shows_none(capsys):
    # standard output is what a command prints for reading: the bar must stay off it, and --quiet off both
    bar = Progress(3, True)
    for n in range(3):
        bar.step(f"call {n}")
    assert bar.bar.n == 3
    bar.close()
    out, err = capsys.readouterr()
    assert out == "" and "rollouts" in err and bar.bar.disable  # closed: tqdm disables a bar it has closed
    quiet = Progress(3, False)
    quiet.step("call 0")
    quiet.close()
    assert quiet.bar is None and capsys.readouterr() == ("", "")
