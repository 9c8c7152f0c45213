"""The hazard matrix's verdicts from hand-made results, and a whole hazard sweep on the CPU."""
import json
import os
import sys
import types

import pytest

from rollout_study import hazards, publish, repeats, sweep, sweep_ray
from rollout_study.launch import LaunchError
from rollout_study.param_values import ParameterError
from rollout_study.present import hazards as report
from rollout_study.present import index
from rollout_study.result import Result
from result_fixture import make_call, make_result_dict

BAD = {"ok": False, "tokens": False, "attention_mask": True, "response_offsets": True,
       "mismatch": {"kind": "tokens", "request": 3, "step": 0, "engine_token": 17, "reference_token": 42,
                    "reference_top2_margin": 1.25},
       "matches_weights_before_update": True}


def hazard_result(path: str, decisions: dict, stale: set = frozenset(), changed: int = 6, bad: dict = BAD,
                  cycles: int = 2) -> Result:
    """A GPU result of one update path; `decisions`: policy -> parameter_check after each sync."""
    data = make_result_dict(cuda_graph=True)
    data["calls"] = [c for c in data["calls"] if c["engine"] == "eager"]
    for policy, check in decisions.items():
        for cycle, phase, samples in ((0, "first", 1), (0, "steady", 2),
                                      *((c, p, n) for c in range(cycles)
                                        for p, n in (("first_after_update", 1), ("steady_after_update", 2)))):
            for place in range(samples):
                call = make_call(f"graph[{policy}]", cycle, phase, place, 20.0 if phase.startswith("first") else 10.0,
                                 True)
                call["captures"] = (2 if phase == "first" or (phase == "first_after_update" and check == "dropped")
                                    else 0)
                call["parameter_check"] = check if phase == "first_after_update" else "unchanged"
                if policy in stale and phase.endswith("after_update"):
                    call["parity"] = dict(bad)
                data["calls"].append(call)
    data["updates"] = [{"cycle": c, "optimizer": "sgd", "lr": 0.05, "loss": 1.0, "ms": 30.0, "step_ms": 25.0,
                        "sync_ms": 5.0, "control": False, "applied": True, "update_path": path,
                        "requests_changed": changed} for c in range(cycles)]
    data["metadata"]["training"]["update_path"] = path
    data["metadata"]["workload"]["cycles"] = cycles
    data["valid"] = True
    return Result.from_dict(data)


def test_verdicts_for_each_kind_of_cell():
    result = hazard_result("assign", {"recapture": "dropped", "reuse": "dropped", "version-only": "unchanged",
                                      "unchecked": "unchanged"}, stale={"version-only", "unchecked"})
    cells = {c.policy: c for c in hazards.matrix([result])}
    assert cells["recapture"].verdict == "recaptured" and cells["recapture"].captures == 4
    assert cells["unchecked"].verdict == "STALE" and cells["unchecked"].diagnostic
    assert "token 17 instead of 42" in cells["unchecked"].detail and "margin 1.25" in cells["unchecked"].detail
    assert "weights before the sync" in cells["unchecked"].detail
    assert cells["unchecked"].parity == "0/6"
    assert result.validity_problems() == []  # a diagnostic policy's STALE is the finding, not a failure
    assert hazards.problems(list(cells.values())) == []
    assert [c.policy for c in hazards.demonstrated_stale(list(cells.values()))] == ["version-only", "unchecked"]
    assert cells["reuse"].rl_step_ms(8) == pytest.approx(25.0 + 5.0 + 20.0 + 7 * 10.0)


def test_a_mask_divergence_is_named_as_a_token_one_is():
    mask = {**BAD, "tokens": True, "attention_mask": False,
            "mismatch": {"kind": "attention_mask", "request": 3, "position": 5}}
    result = hazard_result("assign", {"unchecked": "unchanged"}, stale={"unchecked"}, bad=mask)
    cell = hazards.matrix([result])[0]
    assert cell.verdict == "STALE"
    assert cell.detail == ("cycle 0 first_after_update: request 3: attention mask differs at position 5; "
                           "the tokens of the weights before the sync")


def test_a_stale_real_policy_fails_the_matrix_and_the_run():
    result = hazard_result("reload", {"reuse": "kept"}, stale={"reuse"})
    (cell,) = hazards.matrix([result])
    assert cell.verdict == "STALE"
    assert hazards.problems([cell]) == [f"reload x reuse: STALE ({cell.detail})"]
    assert result.validity_problems()  # a real policy's parity failure is a failed run


def test_kept_graphs_are_valid_only_where_the_sync_changed_the_tokens():
    tested = hazard_result("copy", {"reuse": "kept"})
    untested = hazard_result("copy", {"reuse": "kept"}, changed=0)
    assert hazards.matrix([tested])[0].verdict == "kept and valid"
    assert hazards.matrix([untested])[0].verdict == "kept, unproven"
    mixed = hazard_result("cast", {"reuse": "kept"})
    for call in mixed.calls:
        if call.variant == "graph[reuse]" and call.phase == "first_after_update" and call.cycle == 1:
            call.extra["parameter_check"] = "dropped"
    assert hazards.matrix([mixed])[0].verdict == "mixed"


def test_a_mismatch_after_a_recapture_is_wrong_not_stale():
    # STALE is a kept graph replaying old weights; after a recapture the same mismatch is a bug of the capture.
    # The engine's decision tells them apart, not whether the tokens were the old weights'.
    (cell,) = hazards.matrix([hazard_result("copy", {"recapture": "dropped"}, stale={"recapture"})])
    assert cell.verdict == "WRONG" and "token 17 instead of 42" in cell.detail
    assert hazards.problems([cell]) == [f"copy x recapture: WRONG ({cell.detail})"]
    assert hazards.demonstrated_stale([cell]) == []


def test_one_sync_that_changed_no_token_leaves_kept_graphs_unproven():
    # every sync must have put parity to the test: one that changed nothing cannot tell old weights from new
    result = hazard_result("copy", {"reuse": "kept"}, cycles=3)
    result.updates[1].extra["requests_changed"] = 0
    (cell,) = hazards.matrix([result])
    assert cell.verdict == "kept, unproven" and "unchanged" in cell.detail
    assert hazards.proven_right([cell]) == []


def test_a_call_after_a_sync_without_parity_fails_the_cell_without_a_reference_failure():
    # parity None with no failure recorded beside it must not read as parity held
    data = hazard_result("copy", {"reuse": "kept"}).to_dict()
    for call in data["calls"]:
        if call["cycle"] == 1 and call["phase"] == "steady_after_update" and call["index"] == 0:
            call["parity"] = None
    (cell,) = hazards.matrix([Result.from_dict(data)])
    assert (cell.verdict, cell.detail) == ("failed", "1 call(s) after a sync without parity")
    assert hazards.problems([cell])


def test_a_policy_with_no_first_call_after_a_sync_is_failed_not_recaptured():
    # no decision at all would otherwise pass as "every sync dropped the graphs" and count as proven right
    data = hazard_result("assign", {"recapture": "dropped"}).to_dict()
    data["calls"] = [c for c in data["calls"] if c["phase"] != "first_after_update" or c["engine"] != "graph"]
    (cell,) = hazards.matrix([Result.from_dict(data)])
    assert (cell.verdict, cell.detail) == ("failed", "no call after a sync")
    assert hazards.proven_right([cell]) == [] and hazards.problems([cell])


def test_a_refusal_is_its_own_verdict():
    data = hazard_result("move", {"reuse": "dropped"}).to_dict()
    data["failures"] = [{"engine": "graph", "policy": "reuse", "cycle": 1, "phase": "first_after_update",
                         "error": "GraphRefused: graph engine: lm_head.weight is on cpu, the graphs on cuda"}]
    data["valid"] = False
    (cell,) = hazards.matrix([Result.from_dict(data)])
    assert cell.verdict == "refused" and "is on cpu" in cell.detail


def test_report_tables_put_paths_down_and_policies_across():
    results = [hazard_result(p, {"recapture": "dropped", "unchecked": "unchanged"},
                             stale={"unchecked"} if p == "assign" else set()) for p in ("copy", "assign")]
    cells = hazards.matrix(results)
    frame = report.matrix_table(cells)
    assert list(frame.columns) == ["update path", "recapture", "unchecked"]
    assert frame.set_index("update path").loc["assign", "unchecked"] == "STALE"
    assert list(report.cost_table(cells)["policy"]) == ["recapture", "recapture"]  # diagnostics are not priced
    text = report.summary({"spec": {"name": "h"}}, results)
    assert "| assign | unchecked (diagnostic) | STALE |" in text
    assert "recapture and reuse: 0 of 2 cells wrong (STALE, WRONG or failed); 2 proven right" in text
    # summary.md is the report's blocks in their order, the verdict matrix among them
    place = 0
    for block in report.blocks({"spec": {"name": "h"}}, results):
        place = text.index(block.text, place) + len(block.text)
    assert "| assign | recaptured | STALE |" in text  # the matrix's row, which the old summary.md left out


def test_sweep_files_are_validated_point_by_point_before_anything_runs(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("sweep:\n  update_path: [copy, rsync]\ndevice: cpu\n", encoding="utf-8")
    with pytest.raises(ParameterError, match="point update_path=rsync: update_path must be one of"):
        sweep.SweepSpec.from_yaml(str(bad))
    bad.write_text("sweep:\n  update_path: copy\n", encoding="utf-8")
    with pytest.raises(ParameterError, match="sweep.update_path must be a non-empty list"):
        sweep.SweepSpec.from_yaml(str(bad))
    with pytest.raises(ParameterError, match="'name' cannot be swept"):
        sweep.SweepSpec.from_dict({"sweep": {"name": ["a", "b"]}})
    spec = sweep.SweepSpec.from_dict({"name": "s", "sweep": {"update": [{"update_path": "in-place", "lr": 0.5},
                                                                        {"update_path": "copy"}]}, "device": "cpu"})
    (slug, first), (_, second) = spec.points()
    assert slug == "update_path=in-place-lr=0.5" and first.lr == 0.5 and second.lr == 0.01
    assert sweep.point_hash(first) != sweep.point_hash(second)


SMALL = {"device": "cpu", "engines": ["eager", "graph"], "policy": "all", "requests": 3, "batch_size": 2,
         "prompt_len": 8, "max_new_tokens": 4, "iterations": 1, "cycles": 1, "profile": False, "lr": 0.05}


@pytest.fixture(scope="module")
def cpu_sweep(tmp_path_factory):
    """Two update paths and one point that fails, run in this process (the launcher is a parameter)."""
    from rollout_study.protocol import run_in_process

    from rollout_study import environment

    # Resume keeps only results of the same, clean commit: a working tree with edits never qualifies,
    # so the module's runs are recorded as one clean commit.
    patch = pytest.MonkeyPatch()
    patch.setattr(environment, "git_commit", lambda: {"commit": "f" * 40, "dirty": False})
    folder = tmp_path_factory.mktemp("sweep")
    spec = sweep.SweepSpec.from_dict({"name": "hz", "sweep": {"update_path": ["copy", "assign", "reload"]}, **SMALL})
    calls = []

    def launcher(params):
        calls.append(params.update_path)
        if params.update_path == "reload":
            raise RuntimeError("out of memory (simulated)")
        return run_in_process(params)

    record = sweep.run_local(spec, folder, progress=False, launcher=launcher)
    yield spec, folder, record, calls
    patch.undo()


def test_a_sweep_runs_every_point_and_records_a_failing_one(cpu_sweep):
    spec, folder, record, calls = cpu_sweep
    assert calls == ["copy", "assign", "reload"]
    assert [p["status"] for p in record["points"]] == ["valid", "valid", "failed"]
    assert "out of memory" in record["points"][2]["error"]
    on_disk, points = sweep.load(folder)
    assert on_disk == json.loads(json.dumps(record)) and points[2][1] is None
    cells = hazards.matrix([r for _, r in points if r is not None])
    assert {c.verdict for c in cells if c.path == "assign" and c.policy == "reuse"} == {"recaptured (no CUDA graph)"}
    assert {c.verdict for c in cells if c.path == "copy" and c.policy == "reuse"} == {"kept and valid (no CUDA graph)"}
    assert sweep.validity_problems(folder) == ["point update_path=reload: RuntimeError: out of memory (simulated)"]


def test_a_rerun_into_the_same_folder_skips_the_valid_points(cpu_sweep):
    spec, folder, _, _ = cpu_sweep
    again = []
    record = sweep.run_local(spec, folder, progress=False, launcher=lambda p: again.append(p) or 1 / 0)
    assert [p["status"] for p in record["points"][:2]] == ["kept from an earlier run"] * 2
    assert len(again) == 1  # only the failed point ran again (and failed again)
    from rollout_study import environment

    edited = pytest.MonkeyPatch()
    edited.setattr(environment, "git_commit", lambda: {"commit": "f" * 40, "dirty": True})
    try:
        assert all(sweep.kept_status(folder, e["file"], spec.points()[0][1]) is None for e in record["points"])
    finally:
        edited.undo()
    # A later commit whose package and notebooks are unchanged (a README edit, say) keeps the points;
    # a change to the code that measures does not.
    kept = record["points"][0]
    stored = json.loads((folder / kept["file"]).read_text(encoding="utf-8"))
    stored["metadata"]["git"]["code_sha256"] = environment.code_fingerprint()
    (folder / kept["file"]).write_text(json.dumps(stored), encoding="utf-8")
    for fingerprint, keeps in ((environment.code_fingerprint(), True), ("0" * 64, False)):
        edited.setattr(environment, "git_commit",
                       lambda: {"commit": "f" * 40, "dirty": True, "code_sha256": fingerprint})
        try:
            assert (sweep.kept_status(folder, kept["file"], spec.points()[0][1]) is not None) is keeps
        finally:
            edited.undo()
    # The same code under another torch measures something else.
    stored["metadata"]["software"]["torch"] = "0.0.1"
    (folder / kept["file"]).write_text(json.dumps(stored), encoding="utf-8")
    edited.setattr(environment, "git_commit", lambda: {"commit": "f" * 40, "dirty": True,
                                                       "code_sha256": environment.code_fingerprint()})
    try:
        assert sweep.kept_status(folder, kept["file"], spec.points()[0][1]) is None
    finally:
        edited.undo()
    other = sweep.SweepSpec.from_dict({**spec.to_dict(), "device": "cuda" if False else "cpu", "lr": 0.06})
    assert all(sweep.kept_status(folder, f"{sweep.POINTS_FOLDER}/{slug}-{sweep.point_hash(p)}.json", p) is None
               for slug, p in other.points())  # other parameters: another hash, nothing kept


def test_a_sweep_with_a_failed_point_is_not_published_and_the_index_says_why(cpu_sweep, tmp_path):
    _, folder, _, _ = cpu_sweep
    with pytest.raises(publish.PublishError, match="point update_path=reload"):
        publish.publish(folder, tmp_path / "reports")
    (row,) = [r for r in index.entries(folder.parent) if r["folder"] == folder.name]
    assert row["validity"].startswith("INVALID") and "sweep of 3 points" in row["answer"]


def test_a_hazard_sweep_without_a_single_result_is_reported_as_such(tmp_path, capsys):
    """Every point failed: the summary, the notebook, the index and the README block say so, and list why."""
    from rollout_study import cli
    from rollout_study.present import notebook

    spec = sweep.SweepSpec.from_dict({"name": "none", "sweep": {"update_path": ["copy", "assign"]}, **SMALL})
    folder = tmp_path / "none"

    def launcher(params):
        raise RuntimeError("out of memory (simulated)")

    record = sweep.run_local(spec, folder, progress=False, launcher=launcher)
    text = report.summary(record, [])
    assert "No point has a result" in text and report.NO_RESULT in text
    assert ("**Warning:** points that did not run: update_path=copy: RuntimeError: out of memory (simulated); "
            "update_path=assign: RuntimeError: out of memory (simulated)") in text
    kinds = [b.kind for b in report.blocks(record, [])]
    assert kinds == ["heading", "answer", "warning"]
    notebook.show(report.blocks(record, []))
    assert report.NO_RESULT in report.readme_block(record, [])
    (row,) = index.entries(tmp_path)
    assert report.NO_RESULT in row["answer"] and row["validity"].startswith("INVALID")
    assert cli.main(["report", str(folder), "--quiet"]) == cli.EXIT_OK, capsys.readouterr().err[-2000:]
    assert "No point has a result" in (folder / "summary.md").read_text(encoding="utf-8")
    assert report.NO_RESULT in (folder / "report.html").read_text(encoding="utf-8")


def test_the_sweep_command_runs_fresh_processes_then_the_report_and_publishes(tmp_path, monkeypatch):
    import subprocess
    import sys

    import yaml

    spec = tmp_path / "hz.yaml"
    spec.write_text(yaml.safe_dump({"name": "hz-cli", "report": "hazards", "sweep": {"update_path": ["assign"]},
                                    **SMALL}), encoding="utf-8")
    runs = tmp_path / "runs"
    bad = tmp_path / "bad.yaml"
    bad.write_text("sweep:\n  update_path: [copy]\nlr: -1\n", encoding="utf-8")
    refused = subprocess.run([sys.executable, "-m", "rollout_study", "sweep", str(bad), "--output-root", str(runs)],
                             capture_output=True, text=True)
    assert refused.returncode == 2 and "lr must be a number in (0, 10]" in refused.stderr and not runs.exists()
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    (elsewhere / "sweep.json").write_text(json.dumps({"spec": {"name": "not-hz", "report": "hazards"}, "points": []}))
    wrong = subprocess.run([sys.executable, "-m", "rollout_study", "sweep", str(spec), "--into", str(elsewhere)],
                           capture_output=True, text=True)
    assert wrong.returncode == 2 and "holds sweep 'not-hz', not 'hz-cli'" in wrong.stderr
    done = subprocess.run([sys.executable, "-m", "rollout_study", "sweep", str(spec), "--output-root", str(runs),
                           "--quiet"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (folder,) = [p for p in runs.iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert {"sweep.json", "summary.md", "hazards.ipynb", "report.html"} <= {p.name for p in folder.iterdir()}
    assert ("recapture and reuse: 0 of 2 cells wrong (STALE, WRONG or failed); 2 proven right"
            in (folder / "summary.md").read_text(encoding="utf-8"))
    # the code check (tests/test_publish.py) would refuse this run wherever the tree holds uncommitted code
    monkeypatch.setattr(publish, "code_problems", lambda results: [])
    target = publish.publish(folder, tmp_path / "reports")
    assert (target / "report.html").is_file() and "hz-cli" in (tmp_path / "reports" / "index.html").read_text()


def test_the_readme_hazard_tables_are_the_committed_sweeps():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    text = (root / "README.md").read_text(encoding="utf-8")
    assert all(f"<!-- readme-hazards {name} -->" in text
               for name in ("hazards-tiny", "hazards-smollm2", "hazards-hf-compile"))
    assert report.fill_readme(text, root / "reports") == text
    for name in ("hazards-tiny", "hazards-smollm2", "hazards-hf-compile"):
        assert sweep.validity_problems(root / "reports" / name) == []
        cells = hazards.matrix([r for _, r in sweep.load(root / "reports" / name)[1]])
        assert not hazards.problems(cells)  # the target: no real policy's cell wrong
        if any(c.diagnostic for c in cells):  # where diagnostics ran, they show what a weaker check misses
            assert hazards.demonstrated_stale(cells)
    # The compiled peer: a column of its own on every path, parity after every sync, no cell stale or wrong.
    peers = [c for c in hazards.matrix([r for _, r in sweep.load(root / "reports" / "hazards-hf-compile")[1]])
             if c.peer]
    assert len(peers) == 9 and {c.engine for c in peers} == {"hf-compile"}
    assert all(c.kind not in hazards.WRONG and c.parity.split("/")[0] == c.parity.split("/")[1] for c in peers)


@pytest.mark.parametrize("launcher, command", [("fresh", "fresh process (rollout_study.launch)"),
                                               ("fork-server", "fresh process (fork server)")])
def test_a_sweep_through_ray_on_the_cpu_runs_points_side_by_side_in_fresh_processes(
        tmp_path, launcher, command, monkeypatch):
    ray = pytest.importorskip("ray")
    monkeypatch.setenv("ROLLOUT_STUDY_SLOTS", str(tmp_path / "slots"))  # runs beside this one hold no slot here
    repeat = 1 if launcher == "fork-server" else 0  # one case pays for the repeats
    spec = sweep.SweepSpec.from_dict({"name": "hz-ray", "sweep": {"update_path": ["copy", "data-copy"]},
                                      "launcher": launcher, "repeat_alone": repeat, **{**SMALL, "policy": "both"}})
    if repeat:  # by address: the cluster the sweep names (here a stand-in that starts a local one, as none runs)
        asked, init = [], ray.init
        monkeypatch.setattr(ray, "init", lambda address, **kw: asked.append(address) or init(address="local", **kw))
        record = sweep_ray.run_ray(spec, tmp_path, address="10.0.0.1:6379", progress=False)
        assert asked == ["10.0.0.1:6379"] and record["executor"] == "ray at 10.0.0.1:6379"
    else:  # its own instance, not the one RAY_ADDRESS names (ray job submit sets it; nothing listens there)
        monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
        record = sweep_ray.run_ray(spec, tmp_path, progress=False)
        assert record["executor"] == "ray (local instance)"
    assert sorted((p["status"], p["launcher"], p["executor"]) for p in record["points"]) == [
        ("valid", launcher, "ray")] * 2
    record, points = sweep.load(tmp_path)
    assert [e["slug"] for e, _ in points] == ["update_path=copy", "update_path=data-copy"]  # the spec's order
    assert all(r.metadata["command"] == command for _, r in points)
    assert sweep.validity_problems(tmp_path) == []
    # Each point pinned to its own slot's cores (one CPU each: Ray's CPUs are this host's cores), and its process
    # ran with them: what placement says is what the result recorded.
    cores = [e["placement"]["cores"] for e, _ in points]
    assert all(e["placement"]["pinned"] for e, _ in points) and all(c for c in cores)
    assert [r.metadata["threads"]["cpu_affinity"] for _, r in points] == cores
    if repeats.beside(points[0][1], points):  # they ran at once: two slots (each its lock), so other cores
        assert points[0][0]["placement"]["slot"] != points[1][0]["placement"]["slot"]
        assert os.cpu_count() < 2 or cores[0] != cores[1]
    if repeat:  # repeated alone by Ray too, twice, as its point ran: same threads and as many cores
        runs = record["repeats"]["points"]
        assert [(e["run"], e["executor"], e["status"]) for e in runs] == [(1, "ray", "valid"), (2, "ray", "valid")]
        side = next(e for e, _ in points if e["order"] == runs[0]["order"])
        assert {e["placement"]["slot"] for e in runs} == {side["placement"]["slot"]}  # its own slot: same cores
        (verdict,) = repeats.verdicts(points, repeats.load(tmp_path, record))
        assert verdict.runs == 2 and "other settings" not in verdict.why


class _Ref:
    """A task's reply (or the error Ray raises for it), as ray.get returns it."""

    def __init__(self, reply=None, error=None):
        self.reply, self.error = reply, error


def _fake_ray(monkeypatch, resources: dict, answer, initialized: bool = False) -> dict:
    """Ray without Ray: each task runs at once in this process, its reply `answer(*args)` or the error it raises;
    what the sweep asked of Ray is returned."""
    asked = {"init": [], "task": None, "runs": [], "shutdown": 0}

    class Task:
        def __init__(self, options=None):
            self.given = options or {}

        def options(self, **options):
            return Task(options)

        def remote(self, *args):
            asked["runs"].append((self.given, args))
            try:
                return _Ref(reply=answer(*args))
            except Exception as err:
                return _Ref(error=err)

    def get(ref):
        if ref.error is not None:
            raise ref.error
        return ref.reply

    def remote(**options):
        asked["task"] = options
        return lambda function: Task()

    ray = types.SimpleNamespace(
        is_initialized=lambda: initialized, init=lambda address, **kwargs: asked["init"].append(address),
        cluster_resources=lambda: dict(resources), remote=remote, get=get,
        wait=lambda refs, num_returns: ([refs[0]], refs[1:]),
        shutdown=lambda: asked.update(shutdown=asked["shutdown"] + 1))
    strategies = types.SimpleNamespace(NodeAffinitySchedulingStrategy=lambda node, soft: f"on {node}")
    monkeypatch.setitem(sys.modules, "ray", ray)
    monkeypatch.setitem(sys.modules, "ray.util", types.SimpleNamespace(scheduling_strategies=strategies))
    monkeypatch.setitem(sys.modules, "ray.util.scheduling_strategies", strategies)
    return asked


class _TaskError(Exception):
    """Ray's RayTaskError: what the task raised is its cause."""

    def __init__(self, cause):
        super().__init__(f"ray: {cause}")
        self.cause = cause


def test_a_ray_sweep_records_each_tasks_reply_and_repeats_its_sample_on_its_node_and_slot(tmp_path, monkeypatch):
    """run_ray's side of Ray, with Ray faked: the cluster asked, a task per point with one GPU each (a cluster
    with GPUs), each reply or crash recorded as the point's, and the sample run alone where it ran."""
    spec = sweep.SweepSpec.from_dict({"name": "hz-fake", "sweep": {"update_path": ["copy", "data-copy"]},
                                      "repeat_alone": 1, "point_timeout_s": 60, **{**SMALL, "policy": "both"}})
    ((order, slug, _),) = repeats.sample(spec, 1)

    def answer(params, launcher, cuda, timeout, prefer=None):
        if slug.endswith("=" + params["update_path"]):
            return {"result": None, "error": "no study here", "wall_s": 0.5,
                    "placement": {"node": "n2", "slot": 1}}
        raise _TaskError(LaunchError("the worker's own"))  # the other point's worker crashed

    asked = _fake_ray(monkeypatch, {"GPU": 2.0, "CPU": 16.0}, answer)
    record = sweep_ray.run_ray(spec, tmp_path, address="10.0.0.1:6379", progress=False)
    assert asked["init"] == ["10.0.0.1:6379"] and asked["shutdown"] == 1
    assert (record["executor"], record["wall"]["gpus"], record["wall"]["workers"]) == ("ray at 10.0.0.1:6379", 2, 2)
    assert asked["task"] == {"num_gpus": 1, "num_cpus": 0, "max_calls": 0, "max_retries": 0}
    points = {e["slug"]: e for e in record["points"]}
    assert (points[slug]["status"], points[slug]["error"], points[slug]["placement"]) == (
        "failed", "no study here", {"node": "n2", "slot": 1})
    (other,) = set(points) - {slug}
    assert (points[other]["status"], points[other]["error"]) == ("failed", "the worker's own")
    assert {e["executor"] for e in record["points"]} == {"ray"}
    # the sample alone, twice: on the node its point ran on, asking for that point's slot
    alone = json.loads((tmp_path / sweep.SWEEP_FILE).read_text(encoding="utf-8"))["repeats"]["points"]
    assert [(e["order"], e["run"], e["executor"], e["status"]) for e in alone] == [
        (order, 1, "ray", "failed"), (order, 2, "ray", "failed")]
    assert [(given, args[2:]) for given, args in asked["runs"][2:]] == [
        ({"scheduling_strategy": "on n2"}, (True, 60, 1))] * 2
    assert [args[2:] for _, args in asked["runs"][:2]] == [(True, 60)] * 2  # one GPU per task: CUDA's


def test_a_ray_sweep_starts_its_own_instance_on_the_cpu_and_refuses_a_process_with_ray_running(tmp_path, monkeypatch):
    spec = sweep.SweepSpec.from_dict({"name": "hz-fake", "sweep": {"update_path": ["copy", "data-copy"]},
                                      **{**SMALL, "policy": "both"}})
    reply = {"result": None, "error": "no study here", "wall_s": 0.5, "placement": {}}
    asked = _fake_ray(monkeypatch, {"CPU": 3.0}, lambda *args: reply)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")  # ray job submit sets it; nothing listens there
    record = sweep_ray.run_ray(spec, tmp_path / "own", progress=False)
    assert asked["init"] == ["local"] and record["executor"] == "ray (local instance)"
    assert record["wall"]["workers"] == 3  # a CPU each: as many as Ray's CPUs
    assert asked["task"] == {"num_gpus": 0, "num_cpus": 1, "max_calls": 0, "max_retries": 0}
    asked = _fake_ray(monkeypatch, {"CPU": 3.0}, lambda *args: reply, initialized=True)
    with pytest.raises(ParameterError, match="Ray is already initialized in this process"):
        sweep_ray.run_ray(spec, tmp_path / "again", progress=False)
    assert asked["init"] == []


def test_a_failed_reference_makes_the_cell_failed_not_stale():
    data = hazard_result("copy", {"reuse": "kept"}).to_dict()
    for call in data["calls"]:
        if call["cycle"] == 1 and call["phase"] == "steady_after_update":
            call["parity"] = None  # never checked: its reference could not be computed
    data["failures"] = [{"engine": None, "policy": None, "cycle": 1, "phase": "reference",
                         "error": "OutOfMemoryError: CUDA out of memory"}]
    data["valid"] = False
    (cell,) = hazards.matrix([Result.from_dict(data)])
    assert cell.verdict == "failed" and "out of memory" in cell.detail
    assert hazards.problems([cell])  # a matrix with a failed real cell is not a result


def test_the_cheapest_rl_step_names_every_path_within_the_margin_of_it():
    def cell(path, steady_ms, verdict="kept and valid", diagnostic=False):
        return hazards.HazardCell(path, "reuse", diagnostic, verdict, 2, 0, "12/12", 10.0, 1.0, steady_ms, steady_ms,
                                  "")
    # U=1: 11 + steady. copy 11 + 10 = 21; data-copy 21.5 (2.4% more: within); assign 23 (9.5%: beyond);
    # a diagnostic or wrong cell never counts, however cheap.
    cells = [cell("copy", 10.0), cell("data-copy", 10.5), cell("assign", 12.0), cell("reload", 1.0, diagnostic=True),
             cell("move", 1.0, verdict="STALE")]
    note, *lines = report.cheapest(cells)
    assert note == report.cheapest_note(hazards.proven_right(cells)) and "within 5% of" in note
    assert "its trainer step is that process's update 2 of 2, one sample" in note
    assert lines[0] == ("U=1 rollouts per update: copy with reuse, 21.0 ms per RL step; within 5% of it, unranked: "
                        "data-copy with reuse 21.5")
    assert "assign" not in lines[0] and "reload" not in lines[0] and "move" not in lines[0]
    alone = report.cheapest([cell("copy", 10.0), cell("assign", 12.0)])
    assert alone[1] == "U=1 rollouts per update: copy with reuse, 21.0 ms per RL step"
    many = report.cheapest([cell(f"p{i}", 10.0 + i / 100) for i in range(6)])
    assert many[1].endswith("p1 with reuse 21.0, p2 with reuse 21.0, p3 with reuse 21.0 and 2 more")
    assert report.cheapest([cell("move", 1.0, verdict="STALE")]) == []  # no proven cell: no note either
