"""Bad input is refused before any work, naming the parameter and what is allowed, with nothing written: the cases
an audit of every command found getting through (a model's positions, a sweep record that does not read, a YAML key
given twice, a name too long for a folder, ...)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from checkpoint_fixture import fake_checkpoint
from rollout_study import cli, cli_params, models, publish, sweep
from rollout_study.param_values import ParameterError
from rollout_study.params import StudyParams

REPO = Path(__file__).resolve().parent.parent
CPU = REPO / "params" / "sweep-cpu.yaml"


def _sweep_file(path: Path, **values) -> Path:
    """params/sweep-cpu.yaml with `values` over its keys, as a file."""
    import yaml

    path.write_text(yaml.safe_dump({**yaml.safe_load(CPU.read_text(encoding="utf-8")), **values}), encoding="utf-8")
    return path


def _checkpoint(folder: Path, positions: int) -> Path:
    return fake_checkpoint(folder, {"model_type": "llama", "max_position_embeddings": positions})


def _with_word_tokenizer(folder: Path, chat_template: str | None = None) -> Path:
    """A tokenizer of one token per word or mark (all unknown) saved into `folder`, with `chat_template` if given."""
    from tokenizers import Tokenizer
    from tokenizers import models as token_models
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    words = Tokenizer(token_models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    words.pre_tokenizer = Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=words, unk_token="[UNK]", chat_template=chat_template).save_pretrained(
        folder)
    return folder


def test_prompt_and_new_tokens_past_a_real_models_positions_are_refused_before_it_loads(tmp_path, monkeypatch, capsys):
    checkpoint = _checkpoint(tmp_path / "ckpt", 16)
    with pytest.raises(ParameterError, match="prompt_len \\+ max_new_tokens = 40 exceeds the model's 16 positions; "
                                             "allowed: prompt_len \\+ max_new_tokens <= 16"):
        StudyParams.from_dict({"model": str(checkpoint), "prompt_len": 8, "max_new_tokens": 32})
    assert StudyParams.from_dict({"model": str(checkpoint), "prompt_len": 8, "max_new_tokens": 8}).max_new_tokens == 8
    with pytest.raises(ParameterError, match="exceeds the model's 8192 positions"):
        StudyParams.from_dict({"model": "smollm2-135m-instruct", "max_new_tokens": 9000})
    # a config that does not say leaves it to the load, as before
    (checkpoint / "config.json").write_text(json.dumps({"model_type": "llama"}), encoding="utf-8")
    assert StudyParams.from_dict({"model": str(checkpoint), "max_new_tokens": 9000}).max_new_tokens == 9000
    # `run` and `sweep` alike: exit 2, nothing loaded, no folder
    _checkpoint(tmp_path / "short", 16)
    monkeypatch.setattr(models, "load", lambda *a, **k: pytest.fail("the model was loaded"))
    runs = tmp_path / "runs"
    assert cli.main(["run", "--model", str(tmp_path / "short"), "--device", "cpu", "--max-new-tokens", "32",
                     "--output-root", str(runs)]) == cli.EXIT_BAD_INPUT
    assert "exceeds the model's 16 positions" in capsys.readouterr().err and not runs.exists()
    swept = _sweep_file(tmp_path / "swept.yaml", model=str(tmp_path / "short"), max_new_tokens=30)
    assert cli.main(["sweep", str(swept), "--output-root", str(runs), "--quiet"]) == cli.EXIT_BAD_INPUT
    assert "exceeds the model's 16 positions" in capsys.readouterr().err and not runs.exists()


def test_a_sweeps_chat_prompt_too_long_for_its_prompt_len_is_refused_before_any_point_without_dequantizing(
        tmp_path, monkeypatch, capsys):
    from rollout_study import model_cache

    # no dequantized copy yet: the check reads the GGUF file's tokenizer and writes no 517 MB copy
    monkeypatch.setenv(model_cache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(model_cache, "_write_copy", lambda *a, **k: pytest.fail("the model was dequantized"))
    runs = tmp_path / "runs"
    swept = _sweep_file(tmp_path / "smol.yaml", model="smollm2-135m-instruct", prompt_len=8)  # holds no chat prompt
    assert cli.main(["sweep", str(swept), "--output-root", str(runs), "--quiet"]) == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "point batch_size=1-requests=1: prompt_len must be >= 37 for the chat prompts" in err, err
    assert not runs.exists() and not (tmp_path / "cache").exists()
    # prompt_len auto: the longest chat prompt (37 tokens at 2 requests) counts against the 8192 positions
    tight = _sweep_file(tmp_path / "tight.yaml", model="smollm2-135m-instruct", prompt_len=None, max_new_tokens=8160)
    assert cli.main(["sweep", str(tight), "--output-root", str(runs), "--quiet"]) == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert ("the longest chat prompt (37 tokens; prompt_len auto) + max_new_tokens = 8197 exceeds the model's 8192 "
            "positions") in err, err
    assert not runs.exists()


def _sweep_folder(root: Path, record) -> Path:
    root.mkdir(parents=True)
    (root / sweep.SWEEP_FILE).write_text(record if isinstance(record, str) else json.dumps(record), encoding="utf-8")
    return root


BAD_RECORDS = {
    "not JSON": ("{oops", "not valid JSON"),
    "a list": ([1, 2], "not a sweep record: it needs a 'spec' mapping"),
    "no spec": ({"points": []}, "not a sweep record"),
    "a spec without its name": ({"spec": {"report": "sweep"}, "points": []}, "a 'spec' mapping with its name"),
    "an order that is text": ({"spec": {"report": "sweep", "name": "s"},
                               "points": [{"slug": "a", "file": "points/a.json", "order": "1"}]}, "order, an integer"),
    "an entry without its slug": ({"spec": {"report": "sweep", "name": "s"}, "points": [{"file": "points/a.json"}]},
                                  "each naming its point \\(slug\\), its result file"),
    "a wall that is text": ({"spec": {"report": "sweep", "name": "s"}, "points": [], "wall": "x"},
                            "'wall' must be a mapping"),
    "repeats that are a list": ({"spec": {"report": "sweep", "name": "s"}, "points": [], "repeats": ["r"]},
                                "'repeats' must be a mapping"),
    "a report no notebook reads": ({"spec": {"report": "curves", "name": "s"}, "points": []},
                                   "a report, one of hazards, sweep"),
    "an entry without its file": ({"spec": {"report": "sweep", "name": "s"}, "points": [{"slug": "a"}]},
                                  "its result file \\(file\\)"),
}


@pytest.mark.parametrize("case", BAD_RECORDS, ids=list(BAD_RECORDS))
def test_a_sweep_record_that_does_not_read_is_bad_input_for_every_command_that_takes_one(tmp_path, case, capsys):
    record, said = BAD_RECORDS[case]
    folder = _sweep_folder(tmp_path / "bad", record)
    with pytest.raises(ParameterError, match=said):
        sweep.load(folder)
    good = _sweep_folder(tmp_path / "good", {"spec": {"report": "sweep", "name": "good"}, "points": []})
    before = sorted(p.name for p in tmp_path.rglob("*"))
    runs = tmp_path / "runs"
    for argv in (["sweep", str(CPU), "--keep-from", str(folder), "--output-root", str(runs)],
                 ["sweep", str(CPU), "--into", str(folder)], ["compare", str(good), str(folder)],
                 ["report", str(folder)], ["publish", str(folder), "--reports-root", str(tmp_path / "reports")]):
        assert cli.main([*argv, "--quiet"] if argv[0] in ("sweep", "report") else argv) == cli.EXIT_BAD_INPUT, argv
        assert str(folder) in capsys.readouterr().err, argv
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # no partial folder, no lock, no report root


def test_a_key_given_twice_in_a_parameter_or_sweep_file_is_refused(tmp_path, capsys):
    doubled = tmp_path / "doubled.yaml"
    doubled.write_text("requests: 0\ndevice: cpu\nrequests: 1\n", encoding="utf-8")
    with pytest.raises(ParameterError, match="doubled.yaml: not valid YAML: the key 'requests' is given twice"):
        StudyParams.from_yaml(str(doubled))
    doubled.write_text(CPU.read_text(encoding="utf-8") + "name: again\n", encoding="utf-8")
    assert cli.main(["sweep", str(doubled), "--output-root", str(tmp_path / "runs")]) == cli.EXIT_BAD_INPUT
    assert "the key 'name' is given twice" in capsys.readouterr().err
    merged = tmp_path / "merged.yaml"  # a merge key's keys may be overridden after it: no key given twice
    merged.write_text("base: &b {requests: 2, device: cpu}\npoint:\n  <<: *b\n  requests: 4\n", encoding="utf-8")
    from rollout_study.files import read_yaml

    assert read_yaml(str(merged), "file")["point"] == {"requests": 4, "device": "cpu"}


def test_names_too_long_for_a_folder_and_an_empty_publish_name_are_refused(tmp_path, capsys):
    runs = tmp_path / "runs"
    assert cli.main(["run", "--set", "name=" + "a" * 201, "--device", "cpu", "--output-root", str(runs)]) \
        == cli.EXIT_BAD_INPUT
    assert f"at most {publish.MAX_NAME} characters" in capsys.readouterr().err and not runs.exists()
    assert publish.check_name("a" * publish.MAX_NAME) == "a" * publish.MAX_NAME
    with pytest.raises(publish.PublishError, match="--name '' names a report folder; allowed: letters"):
        publish.publish(REPO / "reports" / "reference-tiny", tmp_path / "reports", name="")
    assert not (tmp_path / "reports").exists()


def test_a_folder_for_summary_and_a_file_for_publish_are_named_with_what_is_allowed(tmp_path, capsys):
    run = REPO / "reports" / "reference-tiny"
    assert cli.main(["summary", str(run)]) == cli.EXIT_BAD_INPUT  # was the OS's bare "[Errno 21] Is a directory"
    assert f"summary: {str(run)!r} is a folder; allowed: a result file, such as " \
           f"{str(run / 'result.json')!r}" in capsys.readouterr().err
    reports = tmp_path / "reports"
    assert cli.main(["publish", str(run / "result.json"), "--reports-root", str(reports)]) == cli.EXIT_BAD_INPUT
    assert f"publish: {str(run / 'result.json')!r} is a file; allowed: a run or sweep folder (the folder that " \
           f"holds it: {str(run)!r})" in capsys.readouterr().err  # was "[Errno 20] Not a directory"
    assert cli.main(["publish", str(run / "summary.md"), "--reports-root", str(reports)]) == cli.EXIT_BAD_INPUT
    assert f"(the folder that holds it: {str(run)!r})" in capsys.readouterr().err
    assert not reports.exists()
    assert cli.main(["summary", str(tmp_path / "no-such.json")]) == cli.EXIT_BAD_INPUT  # was "[Errno 2] No such file"
    assert f"summary: {str(tmp_path / 'no-such.json')!r} does not exist; allowed: a result file" \
        in capsys.readouterr().err
    sweep_folder = REPO / "reports" / "sweep-h200-tiny"
    assert cli.main(["summary", str(sweep_folder)]) == cli.EXIT_BAD_INPUT
    assert f"its summary is {str(sweep_folder / 'summary.md')!r}" in capsys.readouterr().err


def test_sweep_limits_the_command_line_and_the_file_cannot_run_are_refused(tmp_path, capsys):
    import importlib.util

    with pytest.raises(ParameterError, match=f"point_timeout_s must be a number of seconds > 0 and <= "
                                             f"{sweep.MAX_POINT_TIMEOUT_S:,}"):
        sweep.SweepSpec.from_dict({**sweep.SweepSpec.from_yaml(str(CPU)).to_dict(), "point_timeout_s": 3_000_000})
    bench = ["bench", str(CPU.parent / "cpu-smoke.yaml"), "--params", str(CPU.parent / "reference-tiny.yaml")]
    assert cli.main(bench) == cli.EXIT_BAD_INPUT
    assert "two parameter files" in capsys.readouterr().err
    if importlib.util.find_spec("ray") is None:
        return
    runs = tmp_path / "runs"
    addresses = [("http://127.0.0.1:8265", "allowed: HOST:PORT of a Ray cluster's head, 'auto', or ray://")]
    if importlib.util.find_spec("grpc") is None:
        addresses.append(("ray://127.0.0.1:10001", "a ray:// address needs Ray's client"))
    for address, said in addresses:
        assert cli.main(["sweep", str(CPU), "--executor", "ray", "--address", address, "--output-root", str(runs),
                         "--quiet"]) == cli.EXIT_BAD_INPUT
        assert said in capsys.readouterr().err and not runs.exists()


def test_address_auto_is_the_cluster_ray_would_find_and_is_refused_where_none_answers(tmp_path, monkeypatch, capsys):
    """ray.init('auto') with no cluster said so only after the sweep had made its output root."""
    pytest.importorskip("ray")
    import socket

    from ray._private import services
    from rollout_study import sweep_command, sweep_ray

    # Past the checks, ray.init would retry a dead address for minutes: a check that let one through fails here
    monkeypatch.setattr(sweep_ray, "run_ray", lambda *args, **kwargs: pytest.fail("ray.init reached"))
    runs = tmp_path / "runs"
    auto = ["sweep", str(CPU), "--executor", "ray", "--address", "auto", "--output-root", str(runs), "--quiet"]
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    for value, said in ((f"127.0.0.1:{port}", f"--address 'auto' (Ray finds '127.0.0.1:{port}' here): nothing "
                         "answers there"),
                        ("http://127.0.0.1:8265", "--address 'auto' (Ray finds 'http://127.0.0.1:8265' here): "
                                                  "allowed: HOST:PORT")):  # the address `ray job submit` reads
        monkeypatch.setenv("RAY_ADDRESS", value)
        assert cli.main(auto) == cli.EXIT_BAD_INPUT
        assert said in capsys.readouterr().err and not runs.exists()
    monkeypatch.delenv("RAY_ADDRESS")
    monkeypatch.setattr(services, "find_gcs_addresses", lambda: [])  # none running, whatever this host runs
    monkeypatch.setattr(services, "find_bootstrap_address", lambda temp_dir: None)
    assert cli.main(auto) == cli.EXIT_BAD_INPUT
    assert "--address 'auto': no running Ray cluster found" in capsys.readouterr().err and not runs.exists()
    with socket.socket() as head:  # one answering: let through, as ray.init would connect
        head.bind(("127.0.0.1", 0))
        head.listen()
        monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{head.getsockname()[1]}")
        sweep_command.reachable("auto")
    try:  # Ray writes an IPv6 head in brackets, [::1]:6379
        head = socket.socket(socket.AF_INET6)
        head.bind(("::1", 0))
    except OSError:
        return  # no IPv6 loopback here
    with head:
        head.listen()
        sweep_command.reachable(f"[::1]:{head.getsockname()[1]}")


def test_chat_prompts_from_a_checkpoint_without_a_chat_template_or_a_tokenizer_are_refused_before_it_loads(
        tmp_path, monkeypatch, capsys):
    plain = _with_word_tokenizer(_checkpoint(tmp_path / "plain", 64))  # no chat template
    bare = _checkpoint(tmp_path / "bare", 64)  # no tokenizer at all
    monkeypatch.setattr(models, "load", lambda *a, **k: pytest.fail("the model was loaded"))
    runs = tmp_path / "runs"
    for model, prompts, said in ((plain, "auto", "whose tokenizer has no chat template; allowed here: random"),
                                 (plain, "chat", "whose tokenizer has no chat template"),
                                 (bare, "chat", "prompts: 'chat' needs a model with a tokenizer")):
        assert cli.main(["run", "--model", str(model), "--prompts", prompts, "--device", "cpu",
                         "--output-root", str(runs)]) == cli.EXIT_BAD_INPUT
        assert said in capsys.readouterr().err and not runs.exists()
    # what the run can do goes through: random prompts need no chat template, auto without a tokenizer is random
    for model, prompts in ((plain, "random"), (bare, "auto"), (bare, "random")):
        cli_params.preflight(StudyParams.from_dict({"model": str(model), "prompts": prompts, "device": "cpu"}))
    # a sweep's points read each model's tokenizer once
    read = []
    monkeypatch.setattr(models, "tokenizer_only", lambda params: read.append(params.model))
    tokenizers: dict = {}
    for _ in range(2):
        cli_params.preflight(StudyParams.from_dict({"model": str(bare), "prompts": "auto"}), tokenizers)
    assert read == [str(bare)] and tokenizers == {str(bare): None}


def test_the_longest_chat_prompt_not_the_first_is_checked_against_prompt_len_and_the_positions(tmp_path):
    # one token per word or mark: the first two chat prompts are 7 and 5 tokens long
    chatty = _with_word_tokenizer(_checkpoint(tmp_path / "chatty", 64), "{{ messages[0]['content'] }}")
    for values, said in (({"prompt_len": 6}, "prompt_len must be >= 7 for the chat prompts"),
                         ({"max_new_tokens": 58}, "the longest chat prompt \\(7 tokens; prompt_len auto\\) \\+ "
                                                  "max_new_tokens = 65 exceeds the model's 64 positions")):
        params = StudyParams.from_dict({"model": str(chatty), "prompts": "chat", "requests": 2, **values})
        with pytest.raises(ParameterError, match=said):
            cli_params.preflight(params)
    cli_params.preflight(StudyParams.from_dict({"model": str(chatty), "prompts": "chat", "requests": 2,
                                                "prompt_len": 7, "max_new_tokens": 57}))


def test_an_unknown_sweep_file_key_is_named_against_the_file_and_an_overflowing_number_is_said_to_be_one(
        tmp_path, capsys):
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(CPU.read_text(encoding="utf-8") + "executor: ray\n", encoding="utf-8")
    with pytest.raises(ParameterError, match=r"unknown.yaml: unknown key\(s\) executor; allowed: the sweep file's own "
                                             r"\(name, report, sweep, repeat_alone, launcher, point_timeout_s, "
                                             r"subset_of\) and the StudyParams fields, shared by every point "
                                             r"\(attn, batch_size, "):
        sweep.SweepSpec.from_yaml(str(unknown))
    assert cli.main(["bench", "--set", "lr=1e999", "--output", str(tmp_path / "x.json")]) == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "lr must be a number in (0, 10], got '1e999' (str) (past the largest number a float holds)" in err
    assert "write 1.0e999" not in err and not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("axis", [{"dtype": ["auto", "float32"]}, {"prompts": ["auto", "random"]},
                                  {"policy": ["both", ["recapture", "reuse"]]}, {"prompt_len": [None, 32]}])
def test_two_points_one_study_once_auto_is_read_are_refused(axis):
    """dtype auto on device cpu is float32 on any host; a synthetic model's prompts auto are random, 32 long: each
    pair is one study twice, under two hashes. device auto stays as written: the host that runs it reads it."""
    base = {"name": "twice", "model": "synthetic", "device": "cpu", "prompt_len": 32}
    with pytest.raises(ParameterError, match="are one study once 'auto' and the policy names are read"):
        sweep.SweepSpec.from_dict({**base, "sweep": axis})
    for two in ({"dtype": ["float16", "float32"]}, {"device": ["auto", "cpu"]}):
        assert len(sweep.SweepSpec.from_dict({**base, "sweep": two}).points()) == 2
    auto = {**base, "device": "auto", "sweep": {"dtype": ["auto", "float32"]}}  # float16 under a GPU
    assert len(sweep.SweepSpec.from_dict(auto).points()) == 2


@pytest.mark.parametrize("values, said", [
    ({"name": None}, "name must be a non-empty string \\(left out: 'sweep'\\), got None"),
    ({"name": ""}, "name must be a non-empty string"),
    ({"name": 0}, "name must be a non-empty string"),
    ({"sweep": {"seed": [{"seed": 0, "name": "a"}, {"seed": 1}]}}, "sweep.seed: 'name' cannot be swept"),
])
def test_a_sweep_name_that_is_none_and_one_inside_an_axis_are_refused(values, said):
    with pytest.raises(ParameterError, match=said):
        sweep.SweepSpec.from_dict({"name": "s", "device": "cpu", "sweep": {"seed": [0, 1]}, **values})


def test_keep_from_a_sweep_whose_point_result_does_not_read_leaves_no_folder(tmp_path, capsys):
    source = _sweep_folder(tmp_path / "source", {"spec": {"report": "sweep", "name": "sweep-cpu"}, "points": [
        {"slug": "a", "file": "points/a.json", "status": "valid", "order": 0}]})
    (source / "points").mkdir()
    (source / "points" / "a.json").write_text("{broken", encoding="utf-8")
    runs = tmp_path / "runs"
    assert cli.main(["sweep", str(CPU), "--keep-from", str(source), "--output-root", str(runs), "--quiet"]) \
        == cli.EXIT_BAD_INPUT
    assert "a.json" in capsys.readouterr().err and not runs.exists()


@pytest.mark.parametrize("values, said", [
    ({"sweep": {"update_path": ["copy", "assign"], "seed": [0, 1]}},
     "points 'update_path=copy-seed=0' and 'update_path=copy-seed=1' both sync by 'copy'"),
    ({"sweep": {"seed": [0, 1]}}, "both sync by 'copy'"),
    ({"sweep": {"update_path": ["copy", "assign"]}, "engines": ["eager"]},
     "report: hazards needs an engine beside eager"),
])
def test_a_hazard_sweep_whose_matrix_would_merge_rows_or_have_no_cell_is_refused(tmp_path, values, said, capsys):
    import yaml

    path, runs = tmp_path / "hazards.yaml", tmp_path / "runs"
    path.write_text(yaml.safe_dump({"name": "h", "report": "hazards", "device": "cpu", "engines": ["eager", "graph"],
                                    **values}, sort_keys=False), encoding="utf-8")
    assert cli.main(["sweep", str(path), "--output-root", str(runs), "--quiet"]) == cli.EXIT_BAD_INPUT
    assert said in capsys.readouterr().err and not runs.exists()


@pytest.mark.parametrize("seeds, said", [([0, 0], "sweep.seed lists [0] more than once; allowed: each value once"),
                                         ([True], "sweep.seed has [True], not among full.yaml's sweep.seed")])
def test_a_subset_that_repeats_a_value_or_names_a_boolean_for_a_number_is_refused(tmp_path, seeds, said):
    import yaml

    (tmp_path / "full.yaml").write_text(yaml.safe_dump({"name": "full", "report": "sweep", "device": "cpu",
                                                        "sweep": {"seed": [0, 1]}}), encoding="utf-8")
    subset = tmp_path / "subset.yaml"
    subset.write_text(yaml.safe_dump({"name": "part", "subset_of": "full.yaml", "sweep": {"seed": seeds}}),
                      encoding="utf-8")
    with pytest.raises(ParameterError, match=said.replace("[", "\\[").replace("]", "\\]")):
        sweep.SweepSpec.from_yaml(str(subset))
    subset.write_text(yaml.safe_dump({"name": "part", "subset_of": "full.yaml", "sweep": {"seed": [1]}}),
                      encoding="utf-8")
    assert [slug for slug, _ in sweep.SweepSpec.from_yaml(str(subset)).points()] == ["seed=1"]


def test_a_subset_names_its_full_sweep_file_in_its_own_folder_only(tmp_path):
    # subset_of is recorded and read back as a file beside the subset: one in another folder, though it is there
    # and a full sweep file, is refused
    import yaml

    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "full.yaml").write_text(yaml.safe_dump({"name": "full", "report": "sweep", "device": "cpu",
                                                                  "sweep": {"seed": [0, 1]}}), encoding="utf-8")
    subset = tmp_path / "subset.yaml"
    subset.write_text(yaml.safe_dump({"subset_of": "other/full.yaml", "sweep": {"seed": [1]}}), encoding="utf-8")
    with pytest.raises(ParameterError, match="subset_of must name a sweep file in the same folder, got 'other/full"):
        sweep.SweepSpec.from_yaml(str(subset))


def test_a_subset_with_an_empty_sweep_mapping_is_refused(tmp_path):
    # an empty mapping cuts no axis: read as given, the subset would run every point of the full sweep under its own
    # name, measuring them all a second time
    (tmp_path / "full.yaml").write_text("name: full\ndevice: cpu\nsweep:\n  seed: [0, 1]\n", encoding="utf-8")
    subset = tmp_path / "subset.yaml"
    subset.write_text("name: part\nsubset_of: full.yaml\nsweep: {}\n", encoding="utf-8")
    with pytest.raises(ParameterError, match="a subset file needs a 'sweep:' mapping of some of full.yaml's axes"):
        sweep.SweepSpec.from_yaml(str(subset))
