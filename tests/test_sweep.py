"""Running a sweep: the repeat rule, bad sweep files, resume and kept points, failed points, the code
fingerprint, the fork server, and a two-point CPU sweep through the sweep notebook to HTML (the report's numbers
and words from hand-made results: test_sweep_report.py)."""
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest
import yaml

from result_fixture import make_result_dict
from result_fixture import sweep_point as point
from rollout_study import cli, environment, forkserver, launch, pipeline, publish, repeats, sweep
from rollout_study.compare import CommonPoints, compare_sweeps
from rollout_study.environment import code_fingerprint
from rollout_study.forkserver import _differs_from_server
from rollout_study.launch import LaunchError
from rollout_study.present import sweep as report
from rollout_study.present import index, sweep_figures, sweep_repeats
from rollout_study.present.markdown import table
from rollout_study.param_values import ParameterError
from rollout_study.params import StudyParams
from rollout_study.protocol import run_in_process
from rollout_study.record import Failure, ResultError
from rollout_study.result import Result
from rollout_study.stats import Samples, ratio_interval
from rollout_study.sweep_command import keep_from
from rollout_study.sweep_validity import failed_points

REPO = Path(__file__).resolve().parent.parent


def test_a_repeat_alone_blames_neighbours_only_when_points_ran_side_by_side():
    # Ray on one GPU runs one point at a time: a shift there is the executor's or the host's, not a neighbour's
    one = sweep_repeats.contrast({"wall": {"executor": "ray", "workers": 1}})
    assert "side by side" not in one and "nothing ran beside it" in one and "ray run" in one
    # repeated by Ray as well (since the runs alone run twice): run to run; repeated locally, the executor's too
    by_ray = {"wall": {"executor": "ray", "workers": 1}, "repeats": {"points": [{"executor": "ray"}]}}
    assert sweep_repeats.contrast(by_ray).startswith("run to run: the sweep's run and the runs alone by one executor "
                                                     "(ray)")
    assert sweep_repeats.contrast({**by_ray, "repeats": {"points": [{"executor": "local"}]}}) == one
    assert sweep_repeats.contrast({"wall": {"executor": "ray", "workers": 2}}) == (
        "by running side by side (up to 2 workers, ray executor)")
    # the local executor repeats locally too: run to run
    assert sweep_repeats.contrast({"wall": {"executor": "local", "workers": 1}}).startswith("run to run")
    # a resumed sweep: any invocation with two workers ran points side by side
    resumed = {"wall": {"executor": "local", "workers": 1, "earlier": [{"executor": "ray", "workers": 2}]}}
    assert sweep_repeats.contrast(resumed) == "by running side by side (up to 2 workers, local and ray executor)"
    # older records keep executor and workers at the top level, or no workers at all
    assert sweep_repeats.contrast({"executor": "ray", "workers": 3}).startswith("by running side by side (up to 3")
    assert "not recorded" in sweep_repeats.contrast({"executor": "local"})
    assert "None" not in sweep_repeats.contrast({"wall": {"executor": "local", "seconds": 1.0}})


def test_repeat_sample_is_deterministic_and_independent_of_the_name(tmp_path):
    values = {"device": "cpu", "sweep": {"batch_size": [1, 2, 3, 4, 5, 6], "max_new_tokens": [4, 8]},
              "repeat_alone": 3}
    spec = sweep.SweepSpec.from_dict({"name": "a", **values})
    chosen = repeats.sample(spec, 3)
    assert len(chosen) == 3 and [o for o, _, _ in chosen] == sorted({o for o, _, _ in chosen})
    renamed = sweep.SweepSpec.from_dict({"name": "b", **values})
    assert [s for _, s, _ in repeats.sample(renamed, 3)] == [s for _, s, _ in chosen]
    code = ("from rollout_study import sweep, repeats; import json, sys; "
            "s = sweep.SweepSpec.from_dict(json.loads(sys.argv[1])); print([o for o, _, _ in repeats.sample(s, 3)])")
    other = subprocess.run([sys.executable, "-c", code, json.dumps({"name": "c", **values})], capture_output=True,
                           text=True, env={"PYTHONHASHSEED": "12345", "PYTHONPATH": str(REPO), "PATH": "/usr/bin"})
    assert other.stdout.strip() == str([o for o, _, _ in chosen]), other.stderr[-2000:]
    others = {tuple(o for o, _, _ in repeats.sample(sweep.SweepSpec.from_dict(
        {**values, "name": "x", "seed": seed}), 3)) for seed in range(6)}
    assert len(others) > 1  # the choice follows the points, so other points give other samples


def test_the_repeat_rule_moves_only_beyond_the_spread():
    base = [10.0, 10.2, 9.9, 10.1, 9.8, 10.0]  # six: the least the repeats give a verdict from
    side = point(1, 16, {"eager": (1, 1, 1, 1), "graph[reuse]": (1, 1, 1, 1)}, steady_samples={
        ("graph[reuse]", "steady"): [v * 1.2 for v in base], ("eager", "steady"): base,
        ("graph[reuse]", "steady_after_update"): [10.0, 10.0], ("eager", "steady_after_update"): base})
    alone = point(1, 16, {"eager": (1, 1, 1, 1), "graph[reuse]": (1, 1, 1, 1)}, steady_samples={
        ("graph[reuse]", "steady"): base, ("eager", "steady"): [10.05, 9.95, 10.1, 9.9, 10.0, 10.0],
        ("graph[reuse]", "steady_after_update"): [10.0, 10.1], ("eager", "steady_after_update"): base})
    found = {(s.variant, s.phase): s for s in repeats.shifts(side, alone)}
    moved = found[("graph[reuse]", "steady")]
    expected = ratio_interval(Samples([v * 1.2 for v in base]), Samples(base))
    assert moved.verdict == "moved" and moved.ratio == expected and expected.low > 1
    assert found[("eager", "steady")].verdict == "within the spread"
    assert found[("graph[reuse]", "steady_after_update")].verdict == "too few samples"
    points = [({"order": 0, "slug": "p0"}, side), ({"order": 1, "slug": "p1"}, alone),
              ({"order": 2, "slug": "p2", "error": "boom"}, None)]
    repeated = [({"order": 0, "slug": "p0"}, alone), ({"order": 1, "slug": "p1"}, alone),
                ({"order": 2, "slug": "p2"}, alone)]
    verdicts = {v.slug: v for v in repeats.verdicts(points, repeated)}
    assert verdicts["p0"].verdict == "moved" and [s.variant for s in verdicts["p0"].moved] == ["graph[reuse]"]
    assert verdicts["p1"].verdict == "not moved"
    assert verdicts["p2"].verdict == "not compared" and "boom" in verdicts["p2"].why
    table = sweep_repeats.point_table(list(verdicts.values()))
    assert list(table["verdict"]) == ["moved", "not moved", "not compared"]
    assert list(table["largest shift"])[:2] == ["graph[reuse] c0 steady", "eager c0 steady"]


def test_a_moved_points_largest_shift_is_a_phase_that_moved():
    # eager's ratio (1.3, interval holding 1: a noisy phase) is larger than graph's (0.98, tight: moved)
    side = point(1, 16, {"eager": (1, 1, 1, 1), "graph[reuse]": (1, 1, 1, 1)}, steady_samples={
        ("eager", "steady"): [13.0, 6.0, 20.0, 9.0, 17.0, 13.0],
        ("graph[reuse]", "steady"): [9.8, 9.81, 9.79, 9.8, 9.8, 9.8]})
    alone = point(1, 16, {"eager": (1, 1, 1, 1), "graph[reuse]": (1, 1, 1, 1)}, steady_samples={
        ("eager", "steady"): [10.0, 12.0, 8.0, 15.0, 7.0, 10.0],
        ("graph[reuse]", "steady"): [10.0, 10.01, 9.99, 10.0, 10.0, 10.0]})
    found = {s.variant: s for s in repeats.shifts(side, alone) if s.phase == "steady"}
    assert found["eager"].verdict == "within the spread" and found["graph[reuse]"].verdict == "moved"
    assert abs(found["eager"].ratio.point - 1) > abs(found["graph[reuse]"].ratio.point - 1)
    verdicts = repeats.verdicts([({"order": 0, "slug": "p0"}, side)], [({"order": 0, "slug": "p0"}, alone)])
    row = sweep_repeats.point_table(verdicts).iloc[0]
    assert row["verdict"] == "moved" and row["largest shift"] == "graph[reuse] c0 steady"
    assert row["sweep / nearest alone"] == found["graph[reuse]"].ratio.point


@pytest.mark.parametrize("text, fragment", [
    ("repeat_alone: -1\n", "repeat_alone must be an integer >= 0"),
    ("repeat_alone: 3\n", "repeat_alone must be at most the sweep's 2 point(s)"),
    ("report: curves\n", "report must be one of hazards, sweep; got 'curves'"),
])
def test_bad_sweep_files_are_refused_before_any_work(tmp_path, capsys, text, fragment):
    bad = tmp_path / "bad.yaml"
    bad.write_text("sweep:\n  batch_size: [1, 2]\ndevice: cpu\n" + text, encoding="utf-8")
    runs = tmp_path / "runs"
    assert cli.main(["sweep", str(bad), "--output-root", str(runs)]) == cli.EXIT_BAD_INPUT
    assert fragment in capsys.readouterr().err and not runs.exists()


def test_a_subset_file_runs_some_of_a_full_sweeps_points_with_their_parameters(tmp_path, capsys):
    full = yaml.safe_load((REPO / "params" / "sweep-cpu.yaml").read_text(encoding="utf-8"))
    full["sweep"]["max_new_tokens"] = [4, 6]
    (tmp_path / "full.yaml").write_text(yaml.safe_dump(full), encoding="utf-8")
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump({**full, "sweep": {"max_new_tokens": 4}}), encoding="utf-8")
    whole = {f"{slug}-{sweep.point_hash(params)}" for slug, params in
             sweep.SweepSpec.from_yaml(str(tmp_path / "full.yaml")).points()}

    def subset(file: str, **values) -> Path:
        path = tmp_path / f"{file}.yaml"
        path.write_text(yaml.safe_dump({"subset_of": "full.yaml", **values}), encoding="utf-8")
        return path

    spec = sweep.SweepSpec.from_yaml(str(subset("part", sweep={"max_new_tokens": [6, 4], "batch": [
        {"batch_size": 2, "requests": 2}]})))
    keys = [f"{slug}-{sweep.point_hash(params)}" for slug, params in spec.points()]
    assert (spec.name, spec.repeat_alone, spec.report) == ("part", 0, "sweep")  # named after its file
    assert len(keys) == 2 and set(keys) <= whole and "max_new_tokens=4" in keys[0]  # the full file's order
    shared = ("name", "repeat_alone", "sweep", "subset_of")
    assert {k: v for k, v in spec.to_dict().items() if k not in shared} == {k: v for k, v in full.items()
                                                                            if k not in shared}
    assert spec.subset_of == "full.yaml" and sweep.SweepSpec.from_dict(spec.to_dict()) == spec  # recorded, read back
    record = {"spec": spec.to_dict(), "wall": {"executor": "local", "seconds": 1.0}}
    assert any(line.startswith("a subset of full.yaml: that file's points")
               for line in report.answer_lines(record, [], tmp_path))
    for values, fragment in [
            ({"sweep": {"prompt_len": [8]}},
             "sweep.prompt_len is no axis of full.yaml; allowed: batch, max_new_tokens"),
            ({"sweep": {"max_new_tokens": [5, 4]}}, "sweep.max_new_tokens has [5], not among full.yaml's "
             "sweep.max_new_tokens; allowed: [4, 6]"),
            ({"sweep": {"max_new_tokens": [4]}, "name": "sweep-cpu"}, "name must differ from the full sweep's"),
            ({"subset_of": "../full.yaml", "sweep": {"max_new_tokens": [4]}}, "must name a sweep file in the same"),
            ({"subset_of": "broken.yaml", "sweep": {"max_new_tokens": [4]}}, "broken.yaml: sweep.max_new_tokens must"),
            ({"sweep": {"max_new_tokens": []}}, "sweep.max_new_tokens must be a non-empty list"),
            ({"sweep": {"max_new_tokens": [4]}, "lr": 0.1},
             "sets only name, subset_of, repeat_alone, launcher, sweep; got lr"),
            ({}, "needs a 'sweep:' mapping of some of full.yaml's axes"),
            ({"subset_of": "missing.yaml", "sweep": {"max_new_tokens": [4]}}, "must name a sweep file"),
            ({"subset_of": "part.yaml", "sweep": {"max_new_tokens": [4]}}, "is not a full sweep file")]:
        bad = subset("bad", **values)
        with pytest.raises(ParameterError, match=re.escape(fragment)):
            sweep.SweepSpec.from_yaml(str(bad))
    runs = tmp_path / "runs"  # through the command: refused before any work, nothing written
    assert cli.main(["sweep", str(subset("bad", sweep={"max_new_tokens": [5]})), "--output-root", str(runs)]) == \
        cli.EXIT_BAD_INPUT
    assert "sweep.max_new_tokens" in capsys.readouterr().err and not runs.exists()


@pytest.mark.parametrize("content, fragment", [
    (b"name: x\nsweep:\n  batch_size: [1,\n", "x.yaml: not valid YAML"),
    (b"name: x\n\xff\xfe\n", "x.yaml: not UTF-8 text"),
    (None, "sweep file {path!r} is a folder; allowed: a YAML file"),
    (b"subset_of: full.yaml\nsweep:\n  batch_size: [1]\n", "full.yaml: not valid YAML")])
def test_a_sweep_file_that_does_not_read_is_bad_input_naming_it(tmp_path, capsys, content, fragment):
    path = tmp_path / "x.yaml"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    (tmp_path / "full.yaml").write_bytes(b"sweep: {batch_size: [1, 2]\n")  # what a subset names, broken
    runs = tmp_path / "runs"
    assert cli.main(["sweep", str(path), "--output-root", str(runs)]) == cli.EXIT_BAD_INPUT
    assert fragment.format(path=str(path)) in capsys.readouterr().err and not runs.exists()


def test_sweep_help_names_the_report_and_repeat_alone(capsys):
    with pytest.raises(SystemExit):
        cli.main(["sweep", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the description
    assert "repeat_alone" in out and "curves over batch size and new tokens" in out


def test_instrument_false_skips_only_the_instrumented_calls():
    small = {"device": "cpu", "engines": ["eager"], "requests": 1, "batch_size": 1, "prompt_len": 4,
             "max_new_tokens": 2, "iterations": 1, "profile": False}
    on, off = (run_in_process(StudyParams.from_dict({**small, "instrument": flag})) for flag in (True, False))
    assert on.extra["instrumented_calls"] and "instrumented_calls" not in off.extra
    assert [(c.variant, c.cycle, c.phase, c.index) for c in on.calls] == \
        [(c.variant, c.cycle, c.phase, c.index) for c in off.calls]
    assert off.metadata["params"]["instrument"] is False


def test_the_sweep_notebook_is_committed_without_outputs_and_only_calls_the_package():
    notebook = nbformat.read(str(REPO / "notebooks" / "sweep.ipynb"), as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code)
    (parameters,) = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    namespace: dict = {}
    exec(parameters.source, namespace)
    assert namespace["sweep_dir"] == "." and namespace["figures_dir"] == "figures"
    assert "report.blocks(" in code[-1].source and "def " not in "".join(c.source for c in code)


def _as_if_measured_here(*results: Result) -> None:
    """Fixture results marked as measured by this code on this kind of device: what a resume keeps."""
    for result in results:
        result.metadata.update(git=environment.git_commit(), device="cpu")
        result.metadata.setdefault("software", {}).update(
            {name: environment.package_version(name) for name in ("torch", "transformers")})


def test_a_result_is_kept_on_resume_only_from_the_gpu_model_this_host_has(tmp_path, monkeypatch, capsys):
    spec = sweep.SweepSpec.from_yaml(str(REPO / "params" / "sweep-cpu.yaml"))
    slug, params = spec.points()[0]
    measured = point(1, 4, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (5, 10.0, 1, 1)})
    _as_if_measured_here(measured)
    measured.metadata.update(device="cuda", hardware={**measured.metadata["hardware"], "gpu": "NVIDIA H200"})
    file = f"points/{slug}-{sweep.point_hash(params)}.json"
    measured.write(tmp_path / file)
    monkeypatch.setattr(StudyParams, "resolved_device", lambda self: "cuda")  # as on a GPU host
    for names, kept in [(("NVIDIA H200", "NVIDIA H200"), sweep.KEPT), (("NVIDIA H100 80GB HBM3",), None),
                        (None, sweep.KEPT)]:  # None: nvidia-smi cannot tell, the device type decides alone
        monkeypatch.setattr(environment, "gpu_names", lambda names=names: names)
        assert sweep.kept_status(tmp_path, file, params) == kept, names
    assert "measured on NVIDIA H200, this host has NVIDIA H100 80GB HBM3: runs again" in capsys.readouterr().err
    # CUDA names a MIG slice after its card, nvidia-smi the card: the card model is what is compared
    measured.metadata["hardware"]["gpu"] = "NVIDIA H200 MIG 3g.71gb"
    measured.write(tmp_path / file)
    monkeypatch.setattr(environment, "gpu_names", lambda: ("NVIDIA H200",))
    assert sweep.kept_status(tmp_path, file, params) == sweep.KEPT


def test_a_curve_sweep_publishes_its_failed_and_invalid_points_as_findings_but_not_an_unfinished_run(tmp_path):
    # "A point that runs out of memory or fails is recorded as such and the sweep goes on": such points are
    # findings of the sweep (listed first, never plotted); a sweep that never ran some points is no result.
    spec = dataclasses.replace(sweep.SweepSpec.from_yaml(str(REPO / "params" / "sweep-cpu.yaml")), repeat_alone=0)
    first_slug = spec.points()[0][0]
    valid = point(1, 16, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (5, 10.0, 1, 1)})

    invalid = point(2, 16, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (5, 10.0, 1, 1)})
    invalid.calls[-1].parity.ok = False
    _as_if_measured_here(valid, invalid)

    def one_loses_parity(params):
        return valid if params.name.endswith(first_slug) else invalid

    sweep.run_local(spec, tmp_path, progress=False, launcher=one_loses_parity)
    assert sweep.validity_problems(tmp_path) == []
    assert len(sweep.point_problems(sweep.load(tmp_path)[1])) == 1
    (row,) = [r for r in index.entries(tmp_path.parent) if r["folder"] == tmp_path.name]
    assert row["validity"] == "valid sweep; 1 of 2 points failed or invalid (listed in its report)"
    # Resumed, the invalid point is kept as the valid one is: a second draw until it passes would pick results
    again = []
    rerun = sweep.run_local(spec, tmp_path, progress=False, launcher=lambda p: again.append(p) or 1 / 0)
    assert again == [] and [p["status"] for p in rerun["points"]] == [
        "kept from an earlier run", "invalid, kept from an earlier run"]  # kept, and still said to be invalid
    assert len(sweep.point_problems(sweep.load(tmp_path)[1])) == 1
    # ...but a result that records a failure (out of memory in a phase) may pass on another try: run again
    invalid.failures.append(Failure("graph", "reuse", 0, "steady", "OutOfMemoryError: CUDA (simulated)"))
    invalid.write(tmp_path / rerun["points"][1]["file"])
    assert failed_points(tmp_path) == [spec.points()[1][0]]  # what stops the H200 run after its smoke sweep
    sweep.run_local(spec, tmp_path, progress=False, launcher=lambda p: again.append(p) or valid)
    assert [p.name for p in again] == [spec.points()[1][1].name]
    assert failed_points(tmp_path) == []  # a lost parity alone would not count either (above: kept, not failed)

    record = json.loads((tmp_path / "sweep.json").read_text(encoding="utf-8"))
    record["points"] = record["points"][:1]  # interrupted: the second point never ran
    (tmp_path / "sweep.json").write_text(json.dumps(record), encoding="utf-8")
    assert sweep.validity_problems(tmp_path) == ["1 of the spec's 2 point(s) not run (resume with --into)"]

    def everything_fails(params):
        raise RuntimeError("out of memory (simulated)")

    with pytest.raises(ParameterError, match="have the same parameters or name"):  # 1e-4 twice: one point, twice
        sweep.SweepSpec.from_dict({**spec.to_dict(), "sweep": {"lr": [0.0001, 1e-4]}})
    # In a file YAML reads a bare 1e-4 as text: refused as such, with the spelling that is a number
    (tmp_path / "lr.yaml").write_text("name: lr\nreport: sweep\nsweep:\n  lr: [1e-4, 0.0001]\n", encoding="utf-8")
    with pytest.raises(ParameterError, match=r"lr must be a number .* \(YAML reads 1e-4 as text: write 1.0e-4\)"):
        sweep.SweepSpec.from_yaml(str(tmp_path / "lr.yaml"))
    (tmp_path / "lr.yaml").write_text("name: lr\nreport: sweep\nsweep:\n  lr: [1.0e-4, 0.0001]\n", encoding="utf-8")
    with pytest.raises(ParameterError, match="have the same parameters or name"):
        sweep.SweepSpec.from_yaml(str(tmp_path / "lr.yaml"))

    none_valid = tmp_path.parent / "none-valid"
    sweep.run_local(spec, none_valid, progress=False, launcher=everything_fails)
    assert sweep.validity_problems(none_valid) == ["no valid point"]
    # A model none of whose points is valid has no curve: the answer says so rather than nothing
    record, loaded_points = sweep.load(none_valid)
    lines = report.answer_lines(record, loaded_points, none_valid)
    assert "model synthetic (auto): no valid point; 2 failed or invalid (listed below), so no curve" in lines
    record, loaded_points = sweep.load(tmp_path)  # one valid point of that model: no such line
    assert not any("no valid point" in line for line in report.answer_lines(record, loaded_points, tmp_path))


def test_a_curve_sweep_without_its_repeats_or_any_point_is_no_result_and_a_point_recorded_twice_counts_once():
    valid = point(1, 16, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (5, 10.0, 1, 1)})
    entry = {"order": 0, "slug": "batch_size=1", "file": "points/a.json", "status": "valid"}
    spec = {"name": "s", "report": "sweep", "sweep": {"batch_size": [1]}, "repeat_alone": 1}
    # the points ran, the repeat alone the spec asks for did not: not yet a result
    (problem,) = sweep.validity_problems(None, ({"spec": spec, "points": [entry]}, [(entry, valid)]))
    assert problem.startswith("repeat_alone is 1") and problem.endswith("lack their runs (resume the sweep with "
                                                                        "--into)")
    # axes that name no point (a record edited by hand): nothing measured is nothing to publish
    empty = {"spec": {**spec, "sweep": {"batch_size": []}, "repeat_alone": 0}, "points": []}
    assert sweep.validity_problems(None, (empty, [])) == ["no points"]
    # one point's entry twice (by slug: older records have no order) is one point of the spec's two, not both
    twice = {"spec": {**spec, "sweep": {"batch_size": [1, 2]}}, "points": [entry, dict(entry)]}
    assert sweep.missing_points(twice) == (1, 2)


def test_load_gives_the_points_in_the_specs_order_and_no_result_for_a_failed_one_whose_file_is_left(tmp_path):
    # Ray records points as they finish: the report reads them in the spec's order. A failed point whose older
    # result file could not be removed (settle) must not stand in for it.
    for name, batch in (("a", 1), ("b", 2), ("c", 4)):
        point(batch, 16, {"eager": (1, 100.0, 1, 1)}).write(tmp_path / "points" / f"{name}.json")
    entries = [{"order": 2, "slug": "c", "file": "points/c.json", "status": "valid"},
               {"order": 0, "slug": "a", "file": "points/a.json", "status": "failed", "error": "out of memory"},
               {"order": 1, "slug": "b", "file": "points/b.json", "status": "valid"}]
    (tmp_path / sweep.SWEEP_FILE).write_text(json.dumps({"spec": {"name": "s", "report": "sweep"},
                                                         "points": entries}), encoding="utf-8")
    _, loaded = sweep.load(tmp_path)
    assert [(entry["slug"], result and result.metadata["workload"]["batch_size"]) for entry, result in loaded] == [
        ("a", None), ("b", 2), ("c", 4)]


def test_a_curve_sweeps_failed_point_is_not_repeated_alone_and_an_invalid_repeat_is_a_finding(tmp_path):
    spec = sweep.SweepSpec.from_yaml(str(REPO / "params" / "sweep-cpu.yaml"))  # repeat_alone: 1
    ((order, slug, _),) = repeats.sample(spec, 1)
    valid = point(1, 16, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (5, 10.0, 1, 1)})
    invalid = point(1, 16, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (5, 10.0, 1, 1)})
    invalid.calls[-1].parity.ok = False
    _as_if_measured_here(valid, invalid)

    def sampled_fails(params):
        if params.name.endswith(slug):
            raise RuntimeError("out of memory (simulated)")
        return valid

    failed_side = tmp_path / "failed-side"
    sweep.run_local(spec, failed_side, progress=False, launcher=sampled_fails)
    ran = []
    block = repeats.run(spec, failed_side, progress=False, launcher=lambda p: ran.append(p) or valid)
    assert ran == [] and [e["status"] for e in block["points"]] == [repeats.NOT_REPEATED]
    assert sweep.validity_problems(failed_side) == []
    record, loaded_points = sweep.load(failed_side)
    line = [x for x in report.answer_lines(record, loaded_points, failed_side) if x.startswith("repeated alone")]
    assert line == ["repeated alone: 0 point(s), 0 moved run to run: the sweep's run and the runs alone by one "
                    "executor (local), one at a time, so a shift is the host's between them, not a neighbour's, 0 not "
                    "moved; 1 sampled point(s) not repeated (failed or invalid in the sweep's run)"]

    # A repeat that loses parity alone: a finding of a curve sweep, kept on resume (not drawn again)
    lost_alone = tmp_path / "lost-alone"
    sweep.run_local(spec, lost_alone, progress=False, launcher=lambda p: valid)
    repeats.run(spec, lost_alone, progress=False, launcher=lambda p: invalid)
    block = repeats.run(spec, lost_alone, progress=False, launcher=lambda p: ran.append(p) or valid)
    assert ran == [] and [e["status"] for e in block["points"]] == ["invalid, kept from an earlier run"] * 2
    record = json.loads((lost_alone / "sweep.json").read_text(encoding="utf-8"))
    assert repeats.problems(record) == [] and sweep.validity_problems(lost_alone) == []
    # ...while a hazard sweep, whose matrix needs every cell, refuses it
    record["spec"]["report"] = "hazards"
    assert repeats.problems(record) == [f"repeat of point {slug} alone (run {n}): invalid, kept from an earlier run"
                                        for n in (1, 2)]


def test_a_resumed_sweep_sums_the_wall_time_of_its_invocations(tmp_path):
    spec = sweep.SweepSpec.from_yaml(str(REPO / "params" / "sweep-cpu.yaml"))

    def out_of_memory(params):
        raise RuntimeError("out of memory (simulated)")

    first = sweep.run_local(spec, tmp_path, progress=False, launcher=out_of_memory)["wall"]
    assert (first["points_run"], first["earlier"], first["total_seconds"]) == (2, [], first["seconds"])
    second = sweep.run_local(spec, tmp_path, progress=False, launcher=out_of_memory)["wall"]
    assert [w["start"] for w in second["earlier"]] == [first["start"]]
    assert second["total_seconds"] == pytest.approx(first["seconds"] + second["seconds"])
    frame = report.wall_table(json.loads((tmp_path / "sweep.json").read_text(encoding="utf-8")))
    assert list(frame["what"]) == ["sweep points, invocation 1", "sweep points, invocation 2",
                                   "sweep points, all invocations"]

    cells = [row.strip("| ").split(" | ") for row in table(list(frame.columns), frame.values.tolist())[2:]]
    counts = [[row[i] for i in (2, 3, 7, 8)] for row in cells]  # GPUs, workers, points run, points kept
    assert counts == [["0", "1", "2", "0"], ["0", "1", "2", "0"], ["-", "-", "-", "-"]]  # integers, blanks "-"


def test_a_smoke_sweeps_points_are_kept_by_the_full_sweep_and_its_time_counted(tmp_path, capsys, monkeypatch):
    # params/sweep-h200-smoke.yaml runs the long sweep's corner first: its points are the sweep's own, so
    # --keep-from copies them in (measured once), and the smoke's wall time joins the sweep's.
    spec = sweep.SweepSpec.from_yaml(str(REPO / "params" / "sweep-cpu.yaml"))
    smoke = sweep.SweepSpec.from_dict({**spec.to_dict(), "name": "sweep-cpu-smoke", "repeat_alone": 0,
                                       "sweep": {"batch": [{"batch_size": 2, "requests": 2}]}})
    (smoke_slug, smoke_params), = smoke.points()
    assert smoke_slug == spec.points()[1][0] and sweep.point_hash(smoke_params) == sweep.point_hash(spec.points()[1][1])
    measured = point(2, 4, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (5, 10.0, 1, 1)})
    _as_if_measured_here(measured)
    smoke_folder = tmp_path / "smoke"
    smoke_wall = sweep.run_local(smoke, smoke_folder, progress=False, launcher=lambda p: measured)["wall"]

    folder, ran = tmp_path / "full", []
    folder.mkdir()
    assert keep_from(smoke_folder, folder, spec) == [f"points/{smoke_slug}-{sweep.point_hash(smoke_params)}.json"]
    record = sweep.run_local(spec, folder, progress=False, launcher=lambda p: ran.append(p.name) or measured)
    assert ran == [spec.points()[0][1].name]  # the smoke's point was not measured again
    assert sorted((p["order"], p["status"]) for p in record["points"]) == [(0, "valid"), (1, sweep.KEPT)]
    wall = record["wall"]
    assert (wall["points_run"], wall["points_kept"]) == (1, 1)  # the wall-time table's columns of this invocation
    assert [(w["sweep"], w["start"], w["points_run"]) for w in wall["earlier"]] == [
        ("sweep-cpu-smoke", smoke_wall["start"], 1)]
    assert wall["total_seconds"] == pytest.approx(smoke_wall["seconds"] + wall["seconds"])
    assert list(report.wall_table(record)["what"]) == [
        "sweep points, invocation 1 (sweep-cpu-smoke, its points copied in)", "sweep points, invocation 2",
        "sweep points, all invocations"]
    # Copied again into the resumed folder (nothing new to copy): the smoke's time is not counted twice
    assert keep_from(smoke_folder, folder, spec) == []
    (folder / record["points"][0]["file"]).unlink()  # the kept one, as a failed point's result is deleted
    assert len(keep_from(smoke_folder, folder, spec)) == 1
    again = json.loads((folder / "sweep.json").read_text(encoding="utf-8"))["wall"]
    assert [w.get("sweep") for w in again["earlier"]] == ["sweep-cpu-smoke"]
    assert again["total_seconds"] == pytest.approx(wall["total_seconds"])
    # A result from other code is copied but not kept: the resume rule decides, and the point runs again
    other = tmp_path / "other"
    other.mkdir()
    measured.metadata["git"] = {**measured.metadata["git"], "code_sha256": "0" * 64}
    measured.write(smoke_folder / f"points/{smoke_slug}-{sweep.point_hash(smoke_params)}.json")
    keep_from(smoke_folder, other, spec)
    ran.clear()
    sweep.run_local(spec, other, progress=False, launcher=lambda p: ran.append(p.name) or measured)
    assert len(ran) == 2
    # Through the command, as tools/h200-reports.sh runs it after a passing smoke sweep
    _as_if_measured_here(measured)  # measured by this code again
    measured.write(smoke_folder / f"points/{smoke_slug}-{sweep.point_hash(smoke_params)}.json")
    file = tmp_path / "sweep-cpu.yaml"
    file.write_text(yaml.safe_dump({**spec.to_dict(), "repeat_alone": 0}), encoding="utf-8")
    launched = []
    monkeypatch.setattr(launch, "fresh_process", lambda params, mode: launched.append(params.name) or measured)
    monkeypatch.setattr(pipeline, "sweep_report_step", lambda folder, report, progress, **shown: [])
    assert cli.main(["sweep", str(file), "--output-root", str(tmp_path / "cli"), "--quiet",
                     "--keep-from", str(smoke_folder)]) == 0
    assert launched == [spec.points()[0][1].name]
    (done,) = [p for p in (tmp_path / "cli").iterdir() if p.is_dir() and not p.name.startswith(".")]
    record = json.loads((done / "sweep.json").read_text(encoding="utf-8"))
    assert sorted(p["status"] for p in record["points"]) == [sweep.KEPT, "valid"]
    assert [w.get("sweep") for w in record["wall"]["earlier"]] == ["sweep-cpu-smoke"]
    # Two subsets that hold every point between them (one model's points each, say): nothing runs again
    first = sweep.SweepSpec.from_dict({**smoke.to_dict(), "name": "sweep-cpu-first",
                                       "sweep": {"batch": [{"batch_size": 1, "requests": 1}]}})
    first_folder = tmp_path / "first"
    sweep.run_local(first, first_folder, progress=False, launcher=lambda p: measured)
    ran_first = json.loads((first_folder / "sweep.json").read_text(encoding="utf-8"))
    ran_first["wall"]["start"] = "2000-01-01T00:00:00+00:00"  # before the smoke, named first below too...
    (first_folder / "sweep.json").write_text(json.dumps(ran_first), encoding="utf-8")
    launched.clear()
    assert cli.main(["sweep", str(file), "--output-root", str(tmp_path / "both"), "--quiet",
                     "--keep-from", str(first_folder), "--keep-from", str(smoke_folder)]) == 0
    assert launched == []
    (done,) = [p for p in (tmp_path / "both").iterdir() if p.is_dir() and not p.name.startswith(".")]
    record = json.loads((done / "sweep.json").read_text(encoding="utf-8"))
    assert [p["status"] for p in record["points"]] == [sweep.KEPT, sweep.KEPT]
    # ...and the smoke's, named second, started once this test began: listed in the order they ran
    assert [w.get("sweep") for w in record["wall"]["earlier"]] == ["sweep-cpu-first", "sweep-cpu-smoke"]
    assert record["wall"]["total_seconds"] == pytest.approx(sum(w["seconds"] for w in [*record["wall"]["earlier"],
                                                                                       record["wall"]]))
    # Bad input: named, before any work, nothing written
    runs = tmp_path / "runs"
    args = ["sweep", str(REPO / "params" / "sweep-cpu.yaml"), "--output-root", str(runs)]
    assert cli.main([*args, "--keep-from", str(tmp_path / "nowhere")]) == cli.EXIT_BAD_INPUT
    assert "--keep-from" in capsys.readouterr().err and not runs.exists()
    assert cli.main([*args, "--keep-from", str(smoke_folder), "--keep-from", str(tmp_path / "nowhere")]) == \
        cli.EXIT_BAD_INPUT
    assert "nowhere" in capsys.readouterr().err and not runs.exists()  # the second is checked before any work
    assert cli.main([*args, "--into", str(folder), "--keep-from", str(smoke_folder), "--keep-from", str(folder)]) \
        == cli.EXIT_BAD_INPUT
    assert "--keep-from: the folder the sweep resumes" in capsys.readouterr().err


def test_a_sweeps_own_invocation_that_comes_back_through_a_subset_counts_once(tmp_path):
    spec = sweep.SweepSpec.from_yaml(str(REPO / "params" / "sweep-cpu.yaml"))
    subset = sweep.SweepSpec.from_dict({**spec.to_dict(), "name": "sweep-cpu-part", "repeat_alone": 0,
                                        "sweep": {"batch": [{"batch_size": 2, "requests": 2}]}})
    measured = point(2, 4, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (5, 10.0, 1, 1)})
    _as_if_measured_here(measured)
    full, part = tmp_path / "full", tmp_path / "part"
    own = sweep.run_local(spec, full, progress=False, launcher=lambda p: measured)["wall"]
    part.mkdir()
    assert len(keep_from(full, part, subset)) == 1  # the subset built from the full sweep's folder...
    part_wall = sweep.run_local(subset, part, progress=False, launcher=lambda p: measured)["wall"]
    (full / "points" / f"{subset.points()[0][0]}-{sweep.point_hash(subset.points()[0][1])}.json").unlink()
    assert len(keep_from(part, full, spec)) == 1  # ...and copied back: the full sweep's invocation comes with it
    wall = json.loads((full / "sweep.json").read_text(encoding="utf-8"))["wall"]
    assert sorted((w.get("sweep") or "own", w["start"]) for w in [*wall["earlier"], wall]) == sorted(
        [("own", own["start"]), ("sweep-cpu-part", part_wall["start"])])
    assert wall["total_seconds"] == pytest.approx(own["seconds"] + part_wall["seconds"])


def test_a_fresh_process_ends_once_its_result_is_out_so_a_crash_in_teardown_cannot_lose_it():
    # An exit handler that aborts stands for the CUDA memory pool destructor that once did (H200, batch 64)
    script = ("import atexit, os, rollout_study.launch as launch\n"
              "launch.worker = lambda: (atexit.register(os.abort), print('result'), 0)[-1]\n"
              "launch.main()\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # buffered, as a plain interpreter is
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120,
                          env=env)
    assert (done.returncode, done.stdout) == (0, "result\n"), done.stderr[-2000:]  # ended, and nothing lost


def test_a_failed_points_error_keeps_its_first_lines_as_well_as_its_last(tmp_path, monkeypatch):
    # A native abort's tail is stack frames alone: the message that names the error comes first. Through the
    # real launcher, with the process's exit faked: its output is cut once, in the middle, and said so.
    spec = sweep.SweepSpec.from_yaml(str(REPO / "params" / "sweep-cpu.yaml"))
    stderr = "terminate called: CUDA error: invalid argument\n" + "".join(
        f"frame #{i}: <unknown function> + 0x{i:x}\n" for i in range(400))
    (tmp_path / "stderr.txt").write_text(stderr, encoding="utf-8")
    interpreter = tmp_path / "python"  # stands for the new interpreter: writes that, then aborts (SIGABRT: -6)
    interpreter.write_text(f'#!/bin/sh\ncat > /dev/null\ncat "{tmp_path / "stderr.txt"}" >&2\nkill -ABRT $$\n',
                           encoding="utf-8")
    interpreter.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(interpreter))
    sweep.run_local(spec, tmp_path / "sweep", progress=False, launcher=launch.fresh_process)
    errors = [p["error"] for p in json.loads((tmp_path / "sweep" / "sweep.json").read_text(encoding="utf-8"))["points"]]
    assert len(errors) == 2
    for error in errors:
        assert error.startswith("fresh process exited -6: terminate called: CUDA error: invalid argument")
        assert error.rstrip().endswith("frame #399: <unknown function> + 0x18f")
        assert f"[... {len(stderr) - 3000} characters left out ...]" in error  # cut once, by the launcher


@pytest.fixture(scope="module")
def cpu_sweep(tmp_path_factory):
    """params/sweep-cpu.yaml (two points, one repeated alone) run in this process, then its report."""
    patch = pytest.MonkeyPatch()
    patch.setattr(environment, "git_commit", lambda: {"commit": "e" * 40, "dirty": False})
    folder = tmp_path_factory.mktemp("sweep-cpu")
    spec = sweep.SweepSpec.from_yaml(str(REPO / "params" / "sweep-cpu.yaml"))
    sweep.run_local(spec, folder, progress=False, launcher=run_in_process)
    repeats.run(spec, folder, progress=False, launcher=run_in_process)
    (folder / "figures").mkdir()
    (folder / "figures" / "sweep-a-section-no-longer-drawn-speedup.png").write_bytes(b"stale")
    with pipeline.kernel_environment():
        problems = pipeline.sweep_report_step(folder, spec.report, progress=False)
    yield folder, problems
    patch.undo()


def test_a_cpu_sweep_runs_through_the_sweep_notebook_to_html(cpu_sweep, tmp_path):
    folder, problems = cpu_sweep
    assert problems == []
    record, points = sweep.load(folder)
    assert [e["status"] for e, _ in points] == ["valid", "valid"]
    assert all("instrumented_calls" not in r.extra for _, r in points)  # instrument: false trims the point
    wall = record["wall"]
    assert (wall["executor"], wall["gpus"], wall["workers"], wall["points_run"]) == ("local", 0, 1, 2)
    assert wall["seconds"] > 0 and wall["start"] <= wall["end"]
    spec = sweep.SweepSpec.from_yaml(str(REPO / "params" / "sweep-cpu.yaml"))
    assert [e["slug"] for e in record["repeats"]["points"]] == [slug for _, slug, _ in repeats.sample(spec, 1)] * 2
    assert sweep.validity_problems(folder) == []
    html = (folder / "report.html").read_text(encoding="utf-8")
    assert "Synthetic model: tiny-llama" in html and "Points repeated alone" in html
    assert "from rollout_study" not in html  # rendered without the code
    # run in the folder, on ".": no path of this machine (nor a rebuild's temporary folder) in the executed notebook
    assert str(folder) not in (folder / f"{spec.report}.ipynb").read_text(encoding="utf-8")
    # the figures drawn, and nothing an earlier report left there (the fixture put one in)
    assert sorted((folder / "figures").glob("*.png")) == sorted((folder / "figures").glob("sweep-synthetic-*.png"))
    # every figure but the growth: its two points share one new-token count (report.ONE_COUNT_NOTE)
    drawn = sorted(p.name.rsplit("-", 1)[-1] for p in (folder / "figures").glob("*.png"))
    assert drawn == sorted(f"{kind.rsplit('-', 1)[-1]}.png" for kind, _, _ in sweep_figures.FIGURES
                           if kind not in sweep_figures.OVER_TOKENS)
    summary = (folder / "summary.md").read_text(encoding="utf-8")
    assert "2 point(s): 2 valid, 0 failed or invalid; local executor" in summary
    # where the points' time went: every part measured, and the parts with the rest make up each point's wall
    assert "**Where each point's time went (seconds; the last row sums the points)**" in summary
    # summary.md is the report's blocks, every one but the figures, in the report's order
    shown = [b for b in report.blocks(record, points, str(tmp_path / "drawn"), folder) if b.kind != "figure"]
    assert [b.text for b in shown] == [b.text for b in report.blocks(record, points, None, folder)]
    place = 0
    for block in shown:  # each after the one before it
        place = summary.index(block.text, place) + len(block.text)
    assert len(shown) > 10
    times = report.time_table(points)
    assert list(times["point"]) == [e["slug"] for e, _ in points] + ["all points"]
    parts = ["start-up s", "measured calls s", "collect s", "parity s", "reference s", "update s", "rest s"]
    assert times[parts[:-1]].notna().all().all() and (times[parts[1:-1]] > 0).all().all()
    # the parts are disjoint: together they stay within each point's wall (the launcher's clock)
    assert ((times["rest s"] >= 0) & (times["rest s"] < times["wall s"])).all()
    assert "repeated alone: 1 point(s)" in summary
    assert "Per repeated point: moved run to run: the sweep's run and the runs alone by one executor (local)" \
        in summary
    assert "**Every steady phase compared" in summary
    assert "| in the sweep ms | alone 1 ms | alone 2 ms | sweep / nearest alone | low | high | alone 2 / alone 1 |" \
        in summary
    assert "**Host of each point" in summary and "- host: " in summary
    assert "eager generate()'s steady calls spread by" in summary  # the real points' calls give the spread

    target = publish.publish(folder, tmp_path / "reports", name="sweep-cpu")
    (row,) = index.entries(tmp_path / "reports")
    assert row["validity"] == "valid" and "sweep of 2 points (sweep)" in row["answer"]
    assert (target / "repeats").is_dir() and (target / "report.html").is_file()


def test_published_copies_of_raw_results_link_to_them_and_what_they_link_to_is_not_replaced(cpu_sweep, tmp_path):
    folder, _ = cpu_sweep
    reports = tmp_path / "reports"
    subset = publish.publish(folder, reports, name="subset")
    whole_run = tmp_path / "whole-run"  # the same points, as --keep-from copies them, and one measured anew
    shutil.copytree(folder, whole_run)
    first, second = sorted((whole_run / "points").glob("*.json"))
    data = json.loads(second.read_text(encoding="utf-8"))
    data["metadata"]["run_name"] += "-again"
    second.write_text(json.dumps(data), encoding="utf-8")
    whole = publish.publish(whole_run, reports, name="a-whole")  # sorts before `subset`: a link comes first
    linked = whole / "points" / first.name
    assert linked.is_symlink() and os.readlink(linked) == f"../../subset/points/{first.name}"
    assert linked.read_bytes() == (subset / "points" / first.name).read_bytes()
    assert not (whole / "points" / second.name).is_symlink()  # not the same bytes: its own file
    assert [e["status"] for e, _ in sweep.load(whole)[1]] == ["valid", "valid"]
    (reports / ".subset.rebuild-x" / "points").mkdir(parents=True)  # a rebuild's work folder beside them
    (reports / ".subset.rebuild-x" / "points" / first.name).symlink_to(f"../../subset/points/{first.name}")
    with pytest.raises(publish.PublishError, match=": a-whole beside it link to its raw results"):
        publish.publish(folder, reports, name="subset")  # would change or remove what `whole` holds
    assert (subset / "points" / first.name).is_file() and linked.read_bytes()
    again = publish.publish(whole_run, reports, name="a-whole")  # the linking report itself may be replaced
    assert (again / "points" / first.name).is_symlink()
    assert cli.main(["report", str(again), "--quiet"]) == cli.EXIT_OK  # a rebuilt report keeps its links
    assert (again / "points" / first.name).is_symlink() and (again / "report.html").is_file()
    third = publish.publish(whole_run, reports, name="b-third")  # links to the file, never to a link
    assert os.readlink(third / "points" / first.name) == f"../../subset/points/{first.name}"
    assert os.readlink(third / "points" / second.name) == f"../../a-whole/points/{second.name}"
    shutil.rmtree(reports / ".subset.rebuild-x")
    shutil.move(subset, tmp_path / "moved")  # by hand: the links now name nothing, and nothing reads as unmeasured
    with pytest.raises(ResultError, match="which is not there"):
        sweep.load(third)
    assert cli.main(["report", str(third), "--quiet"]) == cli.EXIT_BAD_INPUT


def test_two_sweeps_compare_by_wall_time(cpu_sweep, tmp_path, capsys):
    folder, _ = cpu_sweep
    twin = tmp_path / "twin"
    twin.mkdir()
    record = json.loads((folder / "sweep.json").read_text(encoding="utf-8"))
    half = record["wall"]["total_seconds"] / 2
    record["wall"].update(executor="ray", gpus=2, workers=2, seconds=half, total_seconds=half)
    (twin / "sweep.json").write_text(json.dumps(record), encoding="utf-8")
    assert cli.main(["compare", str(folder), str(twin)]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "wall time A / B: 2.00x" in out and "same points: yes (2 and 2)" in out
    assert "launchers differ" not in out
    # A sweep from before entries named their launcher ran new interpreters: the same as `fresh`
    old, new = tmp_path / "old", tmp_path / "new"
    for target, launcher in ((old, None), (new, "fresh")):
        target.mkdir()
        for entry in record["points"]:
            entry.pop("launcher", None) if launcher is None else entry.update(launcher=launcher)
        (target / "sweep.json").write_text(json.dumps(record), encoding="utf-8")
    assert cli.main(["compare", str(old), str(new)]) == cli.EXIT_OK
    assert "launchers differ" not in capsys.readouterr().out
    for entry in record["points"]:
        entry["launcher"] = "fork-server"
    (twin / "sweep.json").write_text(json.dumps(record), encoding="utf-8")
    assert cli.main(["compare", str(folder), str(twin)]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "launchers differ: each point's start-up depends on its launcher" in out and " fork-server " in out
    record["points"] = record["points"][:1]
    (twin / "sweep.json").write_text(json.dumps(record), encoding="utf-8")
    assert cli.main(["compare", str(folder), str(twin)]) == cli.EXIT_FAILED


def test_two_sweeps_compare_the_points_both_finished_by_tokens_and_steady_medians(cpu_sweep, tmp_path, capsys):
    folder, _ = cpu_sweep
    twin = tmp_path / "twin"
    shutil.copytree(folder, twin)
    assert cli.main(["compare", str(folder), str(twin)]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "points finished in both: 2; tokens: every call matches" in out and "median B/A" in out
    same = compare_sweeps(folder, twin).common
    assert same.shifts and all(s.ratio.point == 1.0 for s in same.shifts) and same.one_sided == ()
    # B's eager steady calls twice as slow, one call's tokens changed, another point without token hashes
    record = json.loads((twin / "sweep.json").read_text(encoding="utf-8"))
    first, second = (twin / entry["file"] for entry in record["points"][:2])
    data = json.loads(first.read_text(encoding="utf-8"))
    for call in data["calls"]:
        if call["engine"] == "eager" and call["phase"].startswith("steady"):
            call["total_ms"] *= 2
            call["breakdown_ms"] = {part: ms * 2 for part, ms in call["breakdown_ms"].items()}
    changed = next(c for c in data["calls"] if c["engine"] != "eager")
    changed["tokens_sha256"] = "0" * 64
    first.write_text(json.dumps(data), encoding="utf-8")
    unhashed = json.loads(second.read_text(encoding="utf-8"))
    for call in unhashed["calls"]:
        call.pop("tokens_sha256", None)
    second.write_text(json.dumps(unhashed), encoding="utf-8")
    moved = compare_sweeps(folder, twin).common
    assert cli.main(["compare", str(folder), str(twin)]) == cli.EXIT_FAILED  # the same points, other tokens
    capsys.readouterr()
    slugs = [entry["slug"] for entry in record["points"][:2]]
    assert [d.split(":")[0] for d in moved.token_differences] == [slugs[0]]
    assert moved.tokens_unchecked == (slugs[1],)
    doubled = [s for s in moved.shifts if s.variant == "eager" and s.ratio.point > 1.5]
    assert doubled and all(s.ratio.point == pytest.approx(2.0) for s in doubled)
    text = "\n".join(moved.lines())
    assert "tokens: DIFFER in 1" in text
    assert f"tokens not compared (no common call with token hashes): {slugs[1]}" in text
    # a variant B did not measure at one point: named, not silently dropped
    for call in unhashed["calls"]:
        if call["engine"] != "eager" and call["phase"].startswith("steady"):
            call["phase"] = "first"
    second.write_text(json.dumps(unhashed), encoding="utf-8")
    one_sided = compare_sweeps(folder, twin).common.one_sided
    assert one_sided and all(line.startswith(f"{slugs[1]}: ") and line.endswith("in A only") for line in one_sided)
    # B lost a point: the point both finished is compared, the other named as finished by A only
    second.unlink()
    lost = compare_sweeps(folder, twin).common
    assert lost.compared == (slugs[0],) and lost.unfinished == ((slugs[1],), ())
    assert f"finished by A only, though both sweeps list them: 1: {slugs[1]}" in "\n".join(lost.lines())


def test_the_common_points_table_counts_phases_moved_faster_and_slower_in_b_apart():
    def shift(variant, b, a):  # B's steady samples over A's, judged by the repeats' rule
        def result(values):
            return point(1, 16, {variant: (1, 1, 1, 1)}, steady_samples={(variant, "steady"): values,
                                                                         (variant, "steady_after_update"): values})
        return repeats.shifts(result(b), result(a))

    slower = shift("eager", (20, 21, 22, 21, 20.5, 21.5), (10, 10.5, 11, 10.5, 10.2, 10.8))
    faster = shift("graph[reuse]", (5, 5.1, 5.2, 5.1, 5.0, 5.2), (10, 10.2, 10.4, 10.2, 10.1, 10.3))
    within = shift("graph[recapture]", (10, 12, 9, 11, 10, 11), (11, 9, 12, 10, 10, 11))
    # three samples a side whose ranges do not overlap: moved at 95% before, no verdict now (1 in 10 by chance)
    few = shift("hf-continuous", (20, 21, 22), (10, 10.5, 11))
    assert {s.verdict for s in slower + faster} == {repeats.MOVED} and {s.verdict for s in within} != {repeats.MOVED}
    assert {s.verdict for s in few} == {repeats.FEW} and all(not s.ratio.contains(1.0) for s in few)
    lines = CommonPoints(("p",), shifts=tuple(slower + faster + within + few)).lines()
    rows = {line.split()[0]: line.split() for line in lines if line.split()[0] in ("eager", "graph[reuse]",
                                                                                   "graph[recapture]", "hf-continuous")}
    n = len(slower)
    assert rows["eager"][-3:] == ["0", str(n), "0"] and rows["graph[reuse]"][-3:] == [str(len(faster)), "0", "0"]
    assert rows["graph[recapture]"][-3:] == ["0", "0", "0"]
    assert rows["hf-continuous"][-3:] == ["0", "0", str(len(few))]
    assert float(rows["eager"][2]) == pytest.approx(2.0, rel=0.02)
    assert float(rows["graph[reuse]"][2]) == pytest.approx(0.5, rel=0.02)
    assert CommonPoints(()).lines() == ["points finished in both: none, so no tokens or medians to compare"]
    assert CommonPoints(("p",)).lines()[-1] == "steady medians: no steady phase measured in both"


def test_the_code_fingerprint_moves_with_the_package_and_the_study_notebook_only(tmp_path):
    (tmp_path / "rollout_study" / "engines").mkdir(parents=True)
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "rollout_study" / "engines" / "graph.py").write_text("A = 1\n")
    (tmp_path / "notebooks" / "study.ipynb").write_text("{}")
    (tmp_path / "README.md").write_text("figures")
    first = code_fingerprint(str(tmp_path))
    (tmp_path / "README.md").write_text("other figures")
    (tmp_path / "rollout_study" / "__pycache__").mkdir()
    (tmp_path / "rollout_study" / "__pycache__" / "x.py").write_text("B = 2\n")
    assert code_fingerprint(str(tmp_path)) == first
    (tmp_path / "rollout_study" / "engines" / "graph.py").write_text("A = 2\n")
    assert code_fingerprint(str(tmp_path)) != first
    (tmp_path / "rollout_study" / "engines" / "graph.py").write_text("A = 1\n")
    (tmp_path / "notebooks" / "study.ipynb").write_text('{"cells": []}')
    second = code_fingerprint(str(tmp_path))
    assert second != first
    # What the README's `jupyter nbconvert --execute` leaves beside it (git-ignored) measures nothing: it moved the
    # fingerprint of a clean tree, and a sweep resumed there measured its kept points again
    (tmp_path / "notebooks" / "study.nbconvert.ipynb").write_text('{"cells": [1]}')
    assert code_fingerprint(str(tmp_path)) == second


def test_the_code_fingerprint_leaves_out_what_only_presents(tmp_path):
    """A report's table may change between the sessions of a sweep; what measures may not."""
    for path, text in (("rollout_study/engines/graph.py", "A = 1\n"), ("rollout_study/present/tables.py", "T = 1\n"),
                       ("rollout_study/presentation.py", "P = 1\n"), ("notebooks/study.ipynb", "{}"),
                       ("notebooks/report.ipynb", "{}"), ("notebooks/sweep.ipynb", "{}"),
                       ("notebooks/hazards.ipynb", "{}")):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    first = code_fingerprint(str(tmp_path))
    (tmp_path / "rollout_study/present/tables.py").write_text("T = 2\n")
    (tmp_path / "rollout_study/present/captures.py").write_text("C = 1\n")
    (tmp_path / "notebooks/report.ipynb").write_text('{"cells": []}')
    (tmp_path / "notebooks/sweep.ipynb").write_text('{"cells": []}')
    (tmp_path / "notebooks/hazards.ipynb").write_text('{"cells": []}')
    # they only read finished sweeps or runs
    for reader in ("sweep_curves.py", "sweep_settings.py", "sweep_crossover.py", "sweep_validity.py",
                   "sweep_load.py", "compare.py", "policy_gap.py", "policy_order.py"):
        (tmp_path / "rollout_study" / reader).write_text("R = 1\n")
    assert code_fingerprint(str(tmp_path)) == first
    (tmp_path / "rollout_study/sweep.py").write_text("S = 1\n")  # sweep.py launches the points: it measures
    assert code_fingerprint(str(tmp_path)) != first
    (tmp_path / "rollout_study/sweep.py").unlink()
    # Only the present/ folder: a module whose name merely begins with "present" still measures.
    (tmp_path / "rollout_study/presentation.py").write_text("P = 2\n")
    assert code_fingerprint(str(tmp_path)) != first


def test_an_editors_dot_file_beside_the_code_does_not_move_the_fingerprint(tmp_path):
    # an editor's lock file (.#graph.py) is no code, and may be a dangling link that cannot be read
    (tmp_path / "rollout_study").mkdir()
    (tmp_path / "rollout_study" / "graph.py").write_text("A = 1\n")
    first = environment.code_fingerprint(str(tmp_path))
    (tmp_path / "rollout_study" / ".#graph.py").write_text("lock\n")
    assert environment.code_fingerprint(str(tmp_path)) == first


def test_a_specs_points_are_validated_once_however_many_steps_ask(monkeypatch):
    """Each point's StudyParams reads a checkpoint's config and weights' headers: the file's validation, the
    command's checks, the record and the repeats' sample take the same points, not four validations of each."""
    made = []
    real = StudyParams.from_dict.__func__
    monkeypatch.setattr(StudyParams, "from_dict",
                        classmethod(lambda cls, *args, **kwargs: made.append(1) or real(cls, *args, **kwargs)))
    spec = sweep.SweepSpec.from_yaml(str(REPO / "params" / "sweep-cpu.yaml"))
    first = len(made)
    points = spec.points()
    points.pop()  # a copy of the list: the spec's own stays whole
    assert len(spec.points()) == len(points) + 1 == first and len(made) == first
    assert len(dataclasses.replace(spec, name="other").points()) == first and len(made) == 2 * first


def test_a_two_point_cpu_sweep_through_the_fork_server_runs_each_point_in_a_forked_child(tmp_path):
    spec = sweep.SweepSpec.from_dict({**yaml.safe_load((REPO / "params" / "sweep-cpu.yaml").read_text()),
                                      "launcher": "fork-server", "repeat_alone": 1})
    assert sweep.SweepSpec.from_dict(spec.to_dict()) == spec  # sweep.json's spec reads back the same
    record = sweep.run_local(spec, tmp_path, progress=False)
    assert [(p["status"], p["launcher"]) for p in record["points"]] == [("valid", "fork-server")] * 2
    block = repeats.run(spec, tmp_path, progress=False)
    assert [(p["status"], p["launcher"]) for p in block["points"]] == [("valid", "fork-server")] * repeats.ALONE_RUNS
    _, points = sweep.load(tmp_path)
    assert {r.metadata["command"] for _, r in points} == {"fresh process (fork server)"}
    assert sweep.validity_problems(tmp_path) == []


def test_a_fork_server_childs_failure_comes_back_with_its_output_and_the_server_goes_on():
    params = StudyParams.from_dict({"device": "cpu", "max_new_tokens": 2, "requests": 1, "batch_size": 1,
                                    "iterations": 1, "cycles": 1, "control_cycles": 0, "cold_starts": 0,
                                    "profile": False, "instrument": False, "engines": ["eager"]})
    with pytest.raises(LaunchError, match=r"(?s)fork-server child exited 1: .*mode must be one of measure"):
        forkserver.run_forked(params, "no-such-mode")
    assert forkserver.run_forked(params, "first_only").calls  # the next child runs


def test_a_fork_server_child_runs_with_its_callers_cores_and_environment_and_leaves_no_log(tmp_path, monkeypatch):
    """As a new interpreter would: the caller's cores (not the server's), the caller's variables with TEARDOWN_CUPTI
    set, none of the server's own (PYTORCH_NVML_BASED_CUDA_CHECK), and its log file gone once its output is read."""

    # The study's first act is asking nvidia-smi for the clocks: what it inherits is what the point's processes do
    tools, seen = tmp_path / "bin", tmp_path / "seen"
    tools.mkdir()
    (tools / "nvidia-smi").write_text('#!/bin/sh\nenv -0 > "$SEEN"\nexit 1\n', encoding="utf-8")
    (tools / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SEEN", str(seen))
    monkeypatch.setenv("ROLLOUT_STUDY_CALLERS_OWN", "caller")  # not read at import: any value goes through
    monkeypatch.delenv("PYTORCH_NVML_BASED_CUDA_CHECK", raising=False)
    logs = tmp_path / "logs"
    logs.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(logs))
    params = StudyParams.from_dict({"device": "cpu", "max_new_tokens": 2, "requests": 1, "batch_size": 1,
                                    "iterations": 1, "cycles": 1, "control_cycles": 0, "cold_starts": 0,
                                    "profile": False, "instrument": False, "engines": ["eager"]})
    cores = environment.allowed_cores()
    forkserver.run_forked(params, "first_only")  # the server started with every core, whatever ran before
    os.sched_setaffinity(0, cores[-1:])  # a Ray task's share of the host, as sweep_ray._pin sets it
    monkeypatch.delenv("HOME", raising=False)  # one the server started with: what the caller unset stays unset
    try:
        result = forkserver.run_forked(params, "first_only")
    finally:
        os.sched_setaffinity(0, cores)
    threads = result.metadata["threads"]
    assert threads["cpu_affinity"] == environment.core_ranges(cores[-1:]) and threads["TEARDOWN_CUPTI"] == "1"
    environ = dict(item.split("=", 1) for item in seen.read_text().split("\0") if "=" in item)
    assert environ["ROLLOUT_STUDY_CALLERS_OWN"] == "caller" and environ["TEARDOWN_CUPTI"] == "1"
    assert "PYTORCH_NVML_BASED_CUDA_CHECK" not in environ  # the server's own, set for its imports only
    assert "HOME" not in environ  # unset by the caller since the server started: not the server's value back
    # set by the imports (_server_imports.py): the caller's where it imported them too, else the server's
    assert "TORCHINDUCTOR_CACHE_DIR" in environ
    assert not [p for p in os.listdir(logs) if p.startswith("rollout-study-point-")]


def test_a_fork_server_child_past_its_time_is_killed_and_one_whose_caller_changed_an_import_variable_stops(
        monkeypatch):
    params = StudyParams.from_dict({"device": "cpu", "max_new_tokens": 64, "requests": 2, "batch_size": 1,
                                    "iterations": 100, "cold_starts": 0, "profile": False, "instrument": False})
    with pytest.raises(LaunchError, match=r"fork-server child timed out after 0.5 s and was killed"):  # output quoted
        forkserver.run_forked(params, "measure", timeout=0.5)  # its study would take a minute
    monkeypatch.setenv("TORCHINDUCTOR_ROLLOUT_STUDY_TEST", "1")  # a TORCH* variable the server did not start with
    with pytest.raises(LaunchError, match=r"(?s)TORCHINDUCTOR_ROLLOUT_STUDY_TEST differ from the fork server's"):
        forkserver.run_forked(params, "first_only")


def test_a_variable_read_at_import_may_differ_from_the_servers_start_only_as_the_imports_set_it():
    started, now = {"OMP_NUM_THREADS": "4"}, {"OMP_NUM_THREADS": "4", "TORCHINDUCTOR_CACHE_DIR": "/tmp/ti"}
    assert _differs_from_server({"OMP_NUM_THREADS": "4"}, started, now) == []
    assert _differs_from_server({"OMP_NUM_THREADS": "4", "TORCHINDUCTOR_CACHE_DIR": "/tmp/ti"}, started, now) == []
    assert _differs_from_server({"OMP_NUM_THREADS": "1"}, started, now) == ["OMP_NUM_THREADS"]
    assert _differs_from_server({"OMP_NUM_THREADS": "4", "TORCHINDUCTOR_CACHE_DIR": "/x"}, started, now) == [
        "TORCHINDUCTOR_CACHE_DIR"]
    assert _differs_from_server({"OMP_NUM_THREADS": "4", "PYTORCH_NVML_BASED_CUDA_CHECK": "0", "PATH": "/x"},
                                started, {**now, "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}) == []  # the server's own


def test_a_subset_may_set_its_own_launcher(tmp_path):
    (tmp_path / "full.yaml").write_text("name: full\nlauncher: fork-server\nsweep:\n  batch_size: [1, 2]\n"
                                        "device: cpu\n", encoding="utf-8")
    (tmp_path / "part.yaml").write_text("subset_of: full.yaml\nsweep:\n  batch_size: [1]\n", encoding="utf-8")
    (tmp_path / "fresh.yaml").write_text("subset_of: full.yaml\nlauncher: fresh\nsweep:\n  batch_size: [1]\n",
                                         encoding="utf-8")
    assert sweep.SweepSpec.from_yaml(str(tmp_path / "part.yaml")).launcher == "fork-server"  # the full file's
    fresh = sweep.SweepSpec.from_yaml(str(tmp_path / "fresh.yaml"))
    part = sweep.SweepSpec.from_yaml(str(tmp_path / "part.yaml"))
    assert fresh.launcher == "fresh"
    assert sweep.point_hash(fresh.points()[0][1]) == sweep.point_hash(part.points()[0][1])  # same point, same hash


def test_a_sweep_files_launcher_is_checked_before_any_work(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("sweep:\n  batch_size: [1, 2]\ndevice: cpu\nlauncher: spawn\n", encoding="utf-8")
    runs = tmp_path / "runs"
    assert cli.main(["sweep", str(bad), "--output-root", str(runs)]) == cli.EXIT_BAD_INPUT
    assert "launcher must be one of fresh, fork-server, got 'spawn'" in capsys.readouterr().err and not runs.exists()


PASSED = "tests/test_cuda.py::test_capture PASSED [ 50%]\n"
SUMMARY = "=================== 2 passed, 16 warnings in 83.33s (0:01:23) ===================\n"


@pytest.mark.parametrize("output, sweeps", [
    (PASSED + "tests/test_cuda.py::test_fork PASSED [100%]\n" + SUMMARY, True),
    # the sweep runs no profiling process: a profiler or tracing test's failure is for the next session
    (PASSED + "tests/test_cuda.py::test_the_profiler_records_every_kernel FAILED [100%]\n"
     + SUMMARY.replace("2 passed", "1 failed, 1 passed"), True),
    (PASSED + "tests/test_cuda.py::test_a_graphs_replay_survives_hf_compiles_clearing_of_cublas_workspaces FAILED"
     " [100%]\n" + SUMMARY.replace("2 passed", "1 failed, 1 passed"), False),
    (PASSED + "tests/test_cuda.py::test_a_fork_server_child_runs_a_point_on_the_gpu ERROR [100%]\n"
     + SUMMARY.replace("2 passed", "1 error, 1 passed"), False),
    (PASSED + "tests/test_cuda.py::test_kernel_sums_agree_with_torch FAILED [100%]\n"
     + SUMMARY.replace("2 passed", "1 failed, 1 passed"), True),
    # a profiler's failure whose traceback (printed as it happens) says FAILED: still the profiler's alone
    (PASSED + "tests/test_cuda.py::test_the_profiler_records_every_kernel FAILED [100%]\n"
     "E   RuntimeError: CUPTI FAILED to start\n" + SUMMARY.replace("2 passed", "1 failed, 1 passed"), True),
    # the file could not be collected: no test passed, and no test's line says FAILED or ERROR
    ("collected 0 items / 1 error\nERROR tests/test_cuda.py - ImportError: no torch\n"
     "=================== 1 error in 0.52s ===================\n", False),
    (PASSED + "tests/test_cuda.py::test_hf_continuous Fatal Python error: Aborted\n", False),  # no summary
])
def test_the_h200_scripts_gate_starts_a_sweep_only_where_the_cuda_tests_it_needs_passed(tmp_path, output, sweeps):
    log = tmp_path / "cuda-tests.txt"
    log.write_text("commit: " + "e" * 40 + "\n" + output, encoding="utf-8")
    done = subprocess.run(["bash", str(REPO / "tools" / "sweep-gate.sh"), str(log)], capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode == 0) == sweeps, done.stdout


def test_a_resume_keeps_a_result_of_this_device_and_clean_code_and_none_whose_cold_start_failed(tmp_path, monkeypatch):
    spec = sweep.SweepSpec.from_yaml(str(REPO / "params" / "sweep-cpu.yaml"))
    slug, params = spec.points()[0]
    file = f"points/{slug}-{sweep.point_hash(params)}.json"
    measured = point(1, 4, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (5, 10.0, 1, 1)})
    _as_if_measured_here(measured)
    measured.write(tmp_path / file)
    assert sweep.kept_status(tmp_path, file, params) == sweep.KEPT
    # measured on the CPU, the point now asks for CUDA: another device measures something else, it runs again
    monkeypatch.setattr(StudyParams, "resolved_device", lambda self: "cuda")
    assert sweep.kept_status(tmp_path, file, params) is None
    monkeypatch.undo()
    # a result from before the code fingerprint: the same commit, clean when it ran and clean now
    commit = {"commit": "a" * 40, "dirty": False}
    cases = [(commit, commit, sweep.KEPT), ({**commit, "dirty": True}, commit, None),
             (commit, {**commit, "dirty": True}, None), (commit, {**commit, "commit": "b" * 40}, None)]
    for recorded, now, kept in cases:
        measured.metadata["git"] = recorded
        measured.write(tmp_path / file)
        assert sweep.kept_status(tmp_path, file, params, now) == kept, (recorded, now)
    # invalid for a failed cold-start process, not for parity alone: a resume runs it again, as one with a failure
    cold = make_result_dict()
    cold["cold_starts"][0]["valid"] = False
    assert Result.from_dict(cold).cold_starts and not sweep.kept_on_resume(Result.from_dict(cold))
    assert sweep.kept_on_resume(Result.from_dict(make_result_dict()))
