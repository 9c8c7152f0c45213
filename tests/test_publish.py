"""publish.py: new runs never overwrite published reports; publishing is explicit, guarded and atomic."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from result_fixture import make_invalid_result, make_result, write_sweep_folder
from rollout_study import publish
from rollout_study.publish import PublishError

REPO = Path(__file__).resolve().parent.parent


REPORT_NOTEBOOK = '{"cells": [], "metadata": {"papermill": {"exception": null}}, "nbformat": 4, "nbformat_minor": 5}'


def _run_folder(root: Path, name: str, result) -> Path:
    """A finished run: its result and what its report step writes."""
    folder = root / name
    folder.mkdir(parents=True)
    result.write(folder / "result.json")
    (folder / "report.html").write_text(f"<p>{name}</p>", encoding="utf-8")
    for other, text in (("study.html", "<p>study</p>"), ("summary.md", "# summary\n"),
                        ("report.ipynb", REPORT_NOTEBOOK)):
        (folder / other).write_text(text, encoding="utf-8")
    return folder


def test_runs_get_unique_folders_and_never_a_published_name(tmp_path):
    a = publish.finish_run(publish.start_run(tmp_path, "reference-tiny"), "reference-tiny")
    b = publish.finish_run(publish.start_run(tmp_path, "reference-tiny"), "reference-tiny")
    assert a != b and a.name.startswith("reference-tiny-") and b.name.startswith("reference-tiny-")
    assert a.name != "reference-tiny" and not any(p.name.startswith(".") for p in tmp_path.iterdir())


def test_a_run_whose_report_step_failed_is_not_published(tmp_path):
    """A valid result.json alone is what a run leaves when its report failed: refused, naming what is missing."""
    folder = _run_folder(tmp_path / "runs", "fixture-20260101", make_result(cuda_graph=True))
    (folder / "summary.md").unlink()
    (folder / "study.html").unlink()
    with pytest.raises(PublishError, match=r"its report is incomplete \(no study.html; no summary.md\): the run's "
                                           r"report step failed; rebuild it \(python -m rollout_study report "):
        publish.publish(folder, tmp_path / "reports")
    _run_folder(tmp_path / "runs2", "fixture-20260101", make_result(cuda_graph=True))
    folder = tmp_path / "runs2" / "fixture-20260101"
    (folder / "report.ipynb").write_text(REPORT_NOTEBOOK.replace("null", "true"), encoding="utf-8")
    (folder / "report.html").write_text('<img src="figures/a.png"><img src="data:image/png;base64,AA">',
                                        encoding="utf-8")
    with pytest.raises(PublishError, match=r"\(report.ipynb stopped at a failing cell; no figures/a.png \(report"):
        publish.publish(folder, tmp_path / "reports")
    assert not (tmp_path / "reports" / "fixture").exists()
    from rollout_study import cli

    assert cli.main(["publish", str(folder), "--reports-root", str(tmp_path / "reports")]) == cli.EXIT_BAD_INPUT


def test_run_and_report_folders_are_for_everyone_to_read(tmp_path, monkeypatch):
    """mkdtemp makes folders 0700, and copytree passes the mode on: the files in them (0644) were unreadable."""
    import os
    import stat

    def mode(path: Path) -> int:
        return stat.S_IMODE(os.stat(path).st_mode)

    run = publish.finish_run(publish.start_run(tmp_path / "runs", "fixture"), "fixture")
    assert mode(run) == 0o755
    assert mode(publish.standalone_run_folder("fixture", tmp_path / "by-hand")) == 0o755
    old = _run_folder(tmp_path / "runs", "old-20260101", make_result(cuda_graph=True))
    old.chmod(0o700)  # a run made before
    assert mode(publish.publish(old, tmp_path / "reports")) == 0o755
    from rollout_study import cli, pipeline

    old.chmod(0o700)
    monkeypatch.setattr(pipeline, "report_step", lambda work, progress: [])
    assert cli.main(["report", str(old), "--quiet"]) == cli.EXIT_OK and mode(old) == 0o755


def test_publish_copies_the_run_and_rebuilds_the_index(tmp_path):
    run = _run_folder(tmp_path / "runs", "fixture-20260101", make_result(cuda_graph=True))
    target = publish.publish(run, tmp_path / "reports")
    assert target == (tmp_path / "reports" / "fixture").resolve()
    assert (target / "report.html").read_text(encoding="utf-8") == "<p>fixture-20260101</p>"
    assert "fixture/report.html" in (tmp_path / "reports" / "index.html").read_text(encoding="utf-8")
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == [".lock", "fixture", "index.html"]  # no debris


def test_a_sweeps_lock_file_is_never_published(tmp_path):
    from rollout_study.sweep_lock import LOCK_FILE

    run = _run_folder(tmp_path / "runs", "fixture-20260101", make_result(cuda_graph=True))
    (run / LOCK_FILE).write_text('{"pid": 1}', encoding="utf-8")  # left by a crash (sweep_lock.py)
    target = publish.publish(run, tmp_path / "reports")
    names = sorted(p.name for p in target.iterdir())
    assert LOCK_FILE not in names and "result.json" in names


def test_a_cpu_run_never_replaces_a_gpu_report(tmp_path):
    gpu = _run_folder(tmp_path / "runs", "gpu", make_result(cuda_graph=True))
    publish.publish(gpu, tmp_path / "reports")
    cpu = _run_folder(tmp_path / "runs", "cpu", make_result(cuda_graph=False))
    with pytest.raises(PublishError, match="GPU result"):
        publish.publish(cpu, tmp_path / "reports")
    assert (tmp_path / "reports" / "fixture" / "report.html").read_text(encoding="utf-8") == "<p>gpu</p>"
    publish.publish(cpu, tmp_path / "reports", name="fixture-cpu")  # under another name it is fine
    newer_gpu = _run_folder(tmp_path / "runs", "gpu2", make_result(cuda_graph=True))
    publish.publish(newer_gpu, tmp_path / "reports")  # a GPU result may replace a GPU result
    assert (tmp_path / "reports" / "fixture" / "report.html").read_text(encoding="utf-8") == "<p>gpu2</p>"


def test_a_commits_fingerprint_is_read_by_its_own_code_relative_imports_and_all(tmp_path):
    # ae287e5's environment.py imported a sibling module at its top (`from . import numa`): read as a lone file
    # it could not run, and publish refused that commit's results
    from rollout_study import environment

    (tmp_path / "rollout_study").mkdir()
    (tmp_path / "rollout_study" / "helper.py").write_text("FINGERPRINT = 'of the commit'\n")
    # a sibling imported at the top, and another inside the function that computes the fingerprint
    (tmp_path / "rollout_study" / "late.py").write_text("SUFFIX = ', read late'\n")
    (tmp_path / "rollout_study" / "environment.py").write_text(
        "from . import helper\n\n\ndef code_fingerprint(root):\n    from . import late\n\n"
        "    return helper.FINGERPRINT + late.SUFFIX\n")
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c"]):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)
    commit = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    finders = set(sys.path_importer_cache)
    assert environment.commit_fingerprint(commit, root=str(tmp_path)) == ("of the commit, read late", "")
    assert not [name for name in sys.modules if name.startswith("_rollout_study_at_commit")]  # nothing left
    assert set(sys.path_importer_cache) - finders == set()  # nor a finder for the commit's tree, gone with it


def test_a_result_whose_code_is_not_the_commit_it_names_is_not_published(tmp_path, monkeypatch):
    from rollout_study import environment

    def named(commit, fingerprint):
        result = make_result(cuda_graph=True)
        result.metadata["git"] = {"commit": commit, "dirty": None, "source": "ROLLOUT_STUDY_COMMIT",
                                  "code_sha256": fingerprint}
        return result

    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    at_head, why = environment.commit_fingerprint(head)
    assert at_head and len(at_head) == 64 and why == ""
    clean = not subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "rollout_study", "notebooks"],
                               capture_output=True, text=True).stdout.strip()
    if clean:  # what a run at HEAD records is what the archive gives (on CI's clean checkout, always)
        assert at_head == environment.code_fingerprint()
    for bad in ("--output=/tmp/x", "HEAD", None, "0" * 41):  # not handed to git: not a commit's hex name
        assert environment.commit_fingerprint(bad) == (None, f"names no commit ({bad!r}: 7 to 40 lowercase hex digits)")
    stale = _run_folder(tmp_path / "runs", "stale", named(head, "f" * 64))  # code of another commit than named
    with pytest.raises(PublishError, match=f"not commit {head[:12]}'s"):
        publish.publish(stale, tmp_path / "reports")
    unknown = _run_folder(tmp_path / "runs", "unknown", named("0" * 40, at_head))
    with pytest.raises(PublishError, match="which this repository does not have"):
        publish.publish(unknown, tmp_path / "reports")
    assert not (tmp_path / "reports" / "fixture").exists()
    publish.publish(_run_folder(tmp_path / "runs", "right", named(head, at_head)), tmp_path / "reports")
    # an older result (no fingerprint kept) and a package outside any repository: nothing to check against
    publish.publish(_run_folder(tmp_path / "runs", "old", named("0" * 40, None)), tmp_path / "reports")
    monkeypatch.setattr(environment, "in_repository", lambda: False)
    publish.publish(unknown, tmp_path / "reports")


@pytest.mark.parametrize("make, message", [
    (lambda root: _run_folder(root, "bad", make_invalid_result()), "invalid"),
    (lambda root: root, "no result.json"),
])
def test_invalid_or_missing_results_are_not_published(tmp_path, make, message):
    (tmp_path / "runs").mkdir()
    with pytest.raises(PublishError, match=message):
        publish.publish(make(tmp_path / "runs"), tmp_path / "reports")
    assert not (tmp_path / "reports").exists()


def test_a_forged_valid_flag_is_not_published(tmp_path):
    from result_fixture import make_invalid_result_dict
    from rollout_study.result import Result

    forged = make_invalid_result_dict()
    forged["valid"] = True  # says valid beside a failed parity check
    run = _run_folder(tmp_path / "runs", "forged", Result.from_dict(forged))
    with pytest.raises(PublishError, match="contradict"):
        publish.publish(run, tmp_path / "reports")


def test_an_unreadable_published_result_is_not_replaced_blindly(tmp_path):
    (tmp_path / "reports" / "fixture").mkdir(parents=True)
    (tmp_path / "reports" / "fixture" / "result.json").write_text("null", encoding="utf-8")
    run = _run_folder(tmp_path / "runs", "new", make_result(cuda_graph=True))
    with pytest.raises(PublishError, match="cannot be read"):
        publish.publish(run, tmp_path / "reports")


def test_names_that_clash_with_index_files_are_refused():
    for name in ("index.html", "../x", ".hidden", ""):
        with pytest.raises(PublishError):
            publish.check_name(name)


def test_swap_keeps_a_complete_folder_when_the_copy_fails(tmp_path, monkeypatch):
    gpu = _run_folder(tmp_path / "runs", "gpu", make_result(cuda_graph=True))
    publish.publish(gpu, tmp_path / "reports")

    def broken_copy(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(publish.shutil, "copytree", broken_copy)
    again = _run_folder(tmp_path / "runs", "gpu-again", make_result(cuda_graph=True))
    with pytest.raises(OSError):
        publish.publish(again, tmp_path / "reports")
    assert (tmp_path / "reports" / "fixture" / "report.html").read_text(encoding="utf-8") == "<p>gpu</p>"
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == [".lock", "fixture", "index.html"]


def test_what_the_readme_commands_write_is_ignored_by_git():
    paths = ["runs/cpu-smoke-20260101-000000/result.json", "runs/index.html", "rollout-first-call.json",
             "notebooks/study.nbconvert.ipynb", "out.ipynb"]  # the README's nbconvert --execute and papermill
    done = subprocess.run(["git", "check-ignore", *paths], cwd=REPO, capture_output=True, text=True)
    assert done.stdout.split() == paths
    assert publish.RUNS_ROOT == REPO / "runs"


def _sweep_folder(folder: Path, cuda_graph: bool) -> Path:
    """A sweep folder as `sweep` leaves it: one valid point."""
    write_sweep_folder(folder, [{"device": "cuda" if cuda_graph else "cpu", "cuda_graph": cuda_graph}])
    return folder


def test_a_cpu_run_never_replaces_a_gpu_sweep_report(tmp_path):
    # a published sweep holds sweep.json, no result.json: its GPU points are guarded as a run's result is
    target = _sweep_folder(tmp_path / "reports" / "sweep", cuda_graph=True)
    with pytest.raises(PublishError, match="holds a GPU result"):
        publish.refuse_downgrade(target, make_result(cuda_graph=False))
    publish.refuse_downgrade(target, make_result(cuda_graph=True))
    publish.refuse_downgrade(_sweep_folder(tmp_path / "reports" / "cpu", cuda_graph=False),
                             make_result(cuda_graph=False))


def test_a_sweep_without_its_report_notebook_is_not_published(tmp_path):
    folder = _sweep_folder(tmp_path / "runs" / "sweep", cuda_graph=True)
    for name in ("report.html", "summary.md"):
        (folder / name).write_text("x", encoding="utf-8")
    assert publish.report_gaps(folder) == ["no sweep.ipynb"]  # the spec's report names it, not report.ipynb
    (folder / "sweep.ipynb").write_text(REPORT_NOTEBOOK.replace("null", "true"), encoding="utf-8")
    assert publish.report_gaps(folder) == ["sweep.ipynb stopped at a failing cell"]


def test_only_byte_identical_point_files_become_links(tmp_path):
    # same name, size and modification time, other bytes: a shallow comparison would link another result
    reports = tmp_path / "reports"
    (reports / "other" / "points").mkdir(parents=True)
    (tmp_path / "incoming" / "points").mkdir(parents=True)
    published, incoming = reports / "other" / "points" / "p.json", tmp_path / "incoming" / "points" / "p.json"
    published.write_text('{"ms": 1}', encoding="utf-8")
    incoming.write_text('{"ms": 2}', encoding="utf-8")
    os.utime(incoming, ns=(os.stat(published).st_atime_ns, os.stat(published).st_mtime_ns))
    assert publish.link_copies(tmp_path / "incoming", reports, "new") == 0
    assert not incoming.is_symlink() and incoming.read_text(encoding="utf-8") == '{"ms": 2}'
    incoming.write_text('{"ms": 1}', encoding="utf-8")
    # a time of its own: on a coarse clock the rewrite keeps the first stat, and filecmp answers from its cache
    os.utime(incoming, ns=(os.stat(published).st_atime_ns, os.stat(published).st_mtime_ns + 10**9))
    assert publish.link_copies(tmp_path / "incoming", reports, "new") == 1 and incoming.is_symlink()


def test_a_failed_swap_puts_the_old_report_back(tmp_path, monkeypatch):
    target, incoming = tmp_path / "reports" / "fixture", tmp_path / "reports" / ".fixture.incoming"
    target.mkdir(parents=True)
    (target / "report.html").write_text("old", encoding="utf-8")
    incoming.mkdir()
    replace = os.replace

    def failing(source, destination):
        if Path(source) == incoming:
            raise OSError("rename failed")
        replace(source, destination)

    monkeypatch.setattr(publish.os, "replace", failing)
    with pytest.raises(OSError, match="rename failed"):
        publish.swap_in(incoming, target)
    assert (target / "report.html").read_text(encoding="utf-8") == "old"


def test_a_name_longer_than_a_folder_name_allows_is_refused(tmp_path):
    longest = "a" * publish.MAX_NAME
    assert publish.check_name(longest) == longest
    # the longest allowed name still makes a run's partial and final folders
    assert publish.finish_run(publish.start_run(tmp_path, longest), longest).is_dir()
    with pytest.raises(PublishError, match="at most"):
        publish.check_name(longest + "a")
