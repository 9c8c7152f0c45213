"""The code, software and machine line of sweep and hazard reports, the commit a run's summary names, and one
result's code (commit, tree, fingerprint) as the index and a run's Metadata table both say it."""
import hashlib
import io
import os
import re
import subprocess
from pathlib import Path

import pytest

from rollout_study import environment, sweep
from rollout_study.present import provenance
from rollout_study.result import Result
from result_fixture import make_result_dict

REPORTS = Path(__file__).resolve().parent.parent / "reports"


def _result(commit: str, fingerprint: str | None = None, dirty=None, gpu: str | None = "NVIDIA H200",
            boot: str | None = None) -> Result:
    data = make_result_dict(cuda_graph=gpu is not None)
    data["metadata"]["git"] = {"commit": commit, "dirty": dirty,
                               **({"code_sha256": fingerprint} if fingerprint else {})}
    data["metadata"]["hardware"] = {"gpu": gpu, "driver": "580.1", "cuda": "13.0", "cpu": "Xeon",
                                    **({"boot": boot} if boot else {})}
    data["metadata"]["software"] = {"torch_build": "2.11.0+cu130", "transformers": "5.20.1", "python": "3.12.3"}
    return Result.from_dict(data)


def test_a_commit_with_uncommitted_changes_says_so_and_a_missing_one_says_not_recorded():
    assert provenance.commit_text({"commit": "69e5e9e50e7a23f2", "dirty": True}) == (
        "commit 69e5e9e50e (with uncommitted changes)")
    # a lent machine's commit, named by ROLLOUT_STUDY_COMMIT, whose tree nobody asked: not read as clean
    assert provenance.commit_text({"commit": "373dc2e38a8edeea", "dirty": None, "source": "ROLLOUT_STUDY_COMMIT"}) == (
        "commit 373dc2e38a, tree unknown (source: ROLLOUT_STUDY_COMMIT)")
    assert provenance.commit_text({"commit": "373dc2e38a8edeea", "dirty": False}) == "commit 373dc2e38a"
    assert provenance.commit_text(None) == "commit not recorded"
    assert provenance.fingerprint_text({"code_sha256": "864c0d6104f01baa"}) == "864c0d6104"
    assert provenance.fingerprint_text({"commit": "abc"}) == "not recorded"


def test_one_value_is_named_once_and_values_that_differ_are_counted():
    same = provenance.provenance_line([_result("aaaaaaaaaaaa", "f" * 64, dirty=False)] * 3)
    assert same == ("code: fingerprint ffffffffff (of the code that measures); commit aaaaaaaaaa; software: torch "
                    "2.11.0+cu130, transformers 5.20.1, Python 3.12.3; machine: NVIDIA H200 (driver 580.1, CUDA 13.0)")
    unknown = provenance.provenance_line([_result("aaaaaaaaaaaa", "f" * 64)])  # dirty None: nobody asked git
    assert "; commit aaaaaaaaaa, tree unknown (source: not recorded); software: " in unknown
    mixed = provenance.provenance_line([_result("a" * 12, "f" * 64, dirty=False),
                                        _result("b" * 12, "f" * 64, dirty=False),
                                        _result("b" * 12, None, dirty=False, gpu=None)])
    assert "fingerprint ffffffffff (2 point(s)), not recorded (1 point(s))" in mixed
    assert "commit aaaaaaaaaa (1 point(s)), commit bbbbbbbbbb (2 point(s))" in mixed
    assert "NVIDIA H200 (driver 580.1, CUDA 13.0) (2 point(s)), CPU: Xeon (1 point(s))" in mixed
    assert provenance.provenance_line([]).endswith("no result to read them from")


def test_two_machines_of_one_kind_are_told_apart_by_their_boot():
    line = provenance.provenance_line([_result("a" * 12, boot="0123456789ab"), _result("a" * 12, boot="ba9876543210"),
                                       _result("a" * 12, gpu=None, boot="0123456789ab")])
    assert ("machine: NVIDIA H200 (driver 580.1, CUDA 13.0, boot 0123456789ab) (1 point(s)), NVIDIA H200 (driver "
            "580.1, CUDA 13.0, boot ba9876543210) (1 point(s)), CPU: Xeon, boot 0123456789ab (1 point(s))") in line


def test_the_boot_digest_is_a_digest_of_the_hosts_boot_id_or_none(tmp_path):
    from rollout_study import environment
    boot_id = tmp_path / "boot_id"
    boot_id.write_text("042239bc-ef08-406c-996e-219c0d0bc75a\n", encoding="ascii")
    digest = environment.boot_digest(str(boot_id))
    assert digest == hashlib.sha256(b"042239bc-ef08-406c-996e-219c0d0bc75a").hexdigest()[:12]
    assert "042239bc" not in digest  # the id itself is not kept
    boot_id.write_text("", encoding="ascii")
    assert environment.boot_digest(str(boot_id)) is None
    assert environment.boot_digest(str(tmp_path / "missing")) is None


@pytest.mark.parametrize("folder", sorted(p.parent for p in REPORTS.glob("*/sweep.json")), ids=lambda p: p.name)
def test_every_published_sweep_names_the_code_of_each_of_its_points(folder):
    # Before, a sweep or hazard report said only "on NVIDIA H200": which code to check out was in no report.
    results = sweep.finished(sweep.load(folder)[1])
    text = (folder / "summary.md").read_text(encoding="utf-8")
    for result in results:
        git = result.metadata["git"]
        assert provenance.commit_text(git) in text and f"fingerprint {provenance.fingerprint_text(git)}" in text
    assert "driver 580.159.04, CUDA 13.0" in text and "transformers 5.20.1" in text


def test_a_results_code_says_commit_tree_and_fingerprint_in_one_wording():
    assert provenance.code_text({"commit": "69e5e9e50e7a23f2", "dirty": True}) == (
        "commit 69e5e9e50e, tree dirty (source: not recorded), fingerprint not recorded")
    assert provenance.code_text({"commit": "b5a791144a14", "dirty": None, "source": "ROLLOUT_STUDY_COMMIT"}) == (
        "commit b5a791144a, tree unknown (source: ROLLOUT_STUDY_COMMIT), fingerprint not recorded")
    assert provenance.code_text({"commit": "a" * 40, "dirty": False, "source": "git", "code_sha256": "8af489cf0d99"}) \
        == "commit aaaaaaaaaa, tree clean (source: git), fingerprint 8af489cf0d"
    assert provenance.code_text(None) == (
        "commit not recorded, tree unknown (source: not recorded), fingerprint not recorded")
    # a state neither git nor a lent machine writes is shown as written: never read as a clean tree
    assert provenance.tree_text({"dirty": "no", "source": "git"}) == "tree 'no' (source: git)"
    assert provenance.commit_text({"commit": "a" * 40, "dirty": "no", "source": "git"}) == (
        "commit aaaaaaaaaa, tree 'no' (source: git)")  # not "with uncommitted changes": the two texts agree
    lines = provenance.code_lines([_result("a" * 12, "f" * 64), _result("a" * 12, "f" * 64), _result("b" * 12)])
    assert lines == [
        "commit aaaaaaaaaa, tree unknown (source: not recorded), fingerprint ffffffffff: 2 of 3 point(s)",
        "commit bbbbbbbbbb, tree unknown (source: not recorded), fingerprint not recorded: 1 of 3 point(s)"]
    assert provenance.code_lines([_result("a" * 12)] * 2) == [
        "commit aaaaaaaaaa, tree unknown (source: not recorded), fingerprint not recorded"]


@pytest.mark.parametrize("folder", sorted(p.parent for p in REPORTS.glob("*/result.json")), ids=lambda p: p.name)
def test_a_published_runs_metadata_table_names_the_fingerprint_its_summary_gives(folder):
    # report.html's Metadata table named the commit alone, while summary.md gave the fingerprint too.
    from rollout_study.present import tables

    result = Result.read(folder / "result.json")
    git = result.metadata.get("git")
    assert f"code fingerprint {provenance.fingerprint_text(git)}" in (folder / "summary.md").read_text(encoding="utf-8")
    code = dict(tables.metadata_rows(result))["code"]
    assert f"fingerprint {provenance.fingerprint_text(git)}" in code
    shown = re.sub(r"<wbr/?>", "", (folder / "report.html").read_text(encoding="utf-8"))  # a break opportunity
    assert code in shown  # the published page shows it


def test_a_commit_named_by_whoever_copied_the_tree_wins_and_an_unreadable_status_is_not_clean(monkeypatch):
    # a copy on another machine can carry a stale .git; and a status git could not give says nothing of the tree
    monkeypatch.setattr(environment, "code_fingerprint", lambda: "c" * 64)
    monkeypatch.setattr(environment, "_git", lambda *args: None if args[0] == "status" else "b" * 40)
    monkeypatch.setenv("ROLLOUT_STUDY_COMMIT", "a" * 40)
    assert environment.git_commit() == {"commit": "a" * 40, "dirty": None, "source": "ROLLOUT_STUDY_COMMIT",
                                        "code_sha256": "c" * 64}
    monkeypatch.delenv("ROLLOUT_STUDY_COMMIT")
    assert environment.git_commit() == {"commit": "b" * 40, "dirty": None, "source": "git", "code_sha256": "c" * 64}
    monkeypatch.setattr(environment, "_git", lambda *args: "" if args[0] == "status" else "b" * 40)
    assert environment.git_commit()["dirty"] is False


def test_gpu_names_from_a_failed_nvidia_smi_are_none(monkeypatch):
    # a sweep keeps results only from the GPU model the host has: an error's text must not pass for a model
    def smi(returncode):
        return lambda *args, **kwargs: subprocess.CompletedProcess(args, returncode, "NVIDIA H200\n", "")
    environment.gpu_names.cache_clear()
    monkeypatch.setattr(environment.subprocess, "run", smi(9))
    try:
        assert environment.gpu_names() is None
        environment.gpu_names.cache_clear()
        monkeypatch.setattr(environment.subprocess, "run", smi(0))
        assert environment.gpu_names() == ("NVIDIA H200",)
    finally:
        environment.gpu_names.cache_clear()


def test_the_process_age_is_in_milliseconds(monkeypatch):
    # started 150 clock ticks (1.5 s at 100 per second) after boot, read 4 s after boot
    files = {"/proc/self/stat": "77 (python3 (x)) S " + " ".join(["0"] * 18 + ["150", "0"]), "/proc/uptime": "4.0 1.0"}
    monkeypatch.setattr(environment, "open", lambda path, **kwargs: io.StringIO(files[path]), raising=False)
    monkeypatch.setattr(os, "sysconf", lambda name: 100)
    assert environment.process_age_ms() == pytest.approx(2500.0)
