"""The unfinished sweeps kept in the tree resume as they are; tools/keep_sweep.py brings a pack home safely."""
import json
import shutil
import tarfile
from pathlib import Path

import pytest
from tool_module import load

from rollout_study.environment import code_fingerprint

ROOT = Path(__file__).resolve().parent.parent
KEPT = sorted((ROOT / "sweeps-in-progress").glob("*.tgz"))

keep_sweep = load("keep_sweep")


@pytest.mark.parametrize("pack", KEPT, ids=[p.stem for p in KEPT])
def test_a_kept_sweep_resumes_at_its_code(pack, tmp_path):
    # Its points are its parameter file's, measured by the measuring code as it is now (or, for a pinned
    # sweep, as its pin's commit had it: tools/sweep_pin.py), with the device's Transformers, at the commit
    # they name: a change to that code fails here until the kept sweep is pinned or dropped knowingly (git
    # rm), since the resume would run every point again.
    folder = keep_sweep.kept_folder(pack, tmp_path)
    assert folder.name == keep_sweep.KEPT_FOLDER.format(name=pack.stem)
    assert keep_sweep.sweep_name(folder) == pack.stem
    assert keep_sweep.problems(folder) == []
    assert keep_sweep.measured_points(folder, keep_sweep.held_code(pack.stem)[0]) > 0


@pytest.fixture(scope="module")
def tiny_sweep_folder(tmp_path_factory):
    """The tiny sweep's raw folder as a resume takes it (record and points, under a partial folder's name):
    from the kept pack while it is unfinished, else from the published sweep."""
    pack, into = ROOT / "sweeps-in-progress" / "sweep-h200-tiny.tgz", tmp_path_factory.mktemp("kept")
    if pack.is_file():
        return keep_sweep.kept_folder(pack, into)
    published = ROOT / "reports" / "sweep-h200-tiny"
    if not (published / "sweep.json").is_file():
        pytest.skip("the tiny sweep is neither kept nor published")
    folder = into / keep_sweep.KEPT_FOLDER.format(name="sweep-h200-tiny")
    shutil.copytree(published / "points", folder / "points")
    shutil.copy(published / "sweep.json", folder)
    return folder


def _repack(folder: Path, into: Path, name: str) -> Path:
    pack = into / f"{name}.tgz"
    with tarfile.open(pack, "w:gz") as archive:
        archive.add(folder, arcname=name)
    return pack


def test_the_checks_find_a_point_of_other_code_and_one_the_sweep_does_not_list(tiny_sweep_folder, tmp_path):
    folder = tmp_path / ".sweep-h200-tiny.partial-x"
    shutil.copytree(tiny_sweep_folder, folder)
    first = sorted((folder / "points").iterdir())[0]
    result = json.loads(first.read_text())
    result["metadata"]["git"]["code_sha256"] = "0" * 64
    first.write_text(json.dumps(result))
    (folder / "points" / "stray.json").write_text("{}")
    found = keep_sweep.problems(folder)
    assert any("points/stray.json: on disk, not listed" in line for line in found)
    assert any(first.name in line and "measured by code 00000000" in line for line in found)
    # keep leaves the unlisted file out, then refuses the point of other code, writing nothing
    root = tmp_path / "repo"
    root.mkdir()
    with pytest.raises(keep_sweep.KeepError, match="measured by code 00000000"):
        keep_sweep.keep(_repack(folder, tmp_path, folder.name), root=root,
                        check=lambda f, _: keep_sweep.problems(f))  # this repository's checks, another root
    assert not (root / "sweeps-in-progress").exists()


def test_the_checks_find_another_record_a_stray_repeat_a_point_no_reader_takes_and_another_transformers(
        tiny_sweep_folder, tmp_path):
    from rollout_study.environment import _git

    folder = tmp_path / ".sweep-h200-tiny.partial-x"
    shutil.copytree(tiny_sweep_folder, folder)
    record = json.loads((folder / "sweep.json").read_text())
    record["spec"]["report"] = "another"
    (folder / "sweep.json").write_text(json.dumps(record))
    (folder / "repeats").mkdir(exist_ok=True)
    (folder / "repeats" / "stray.json").write_text("{}")
    unread, other, elsewhere = sorted((folder / "points").iterdir())[:3]
    unread.write_text("{}")
    for path, section, key, value in ((other, "software", "transformers", "0.0.0"),
                                      (elsewhere, "git", "commit", "e" * 40)):
        result = json.loads(path.read_text())
        result["metadata"][section][key] = value
        path.write_text(json.dumps(result))
    found = keep_sweep.problems(folder)
    assert "params/sweep-h200-tiny.yaml is sweep 'sweep-h200-tiny' (sweep), the folder's is another" in found
    assert "repeats/stray.json: on disk, not listed in sweep.json" in found
    assert any(line.startswith(f"points/{unread.name}: not a result (") for line in found)
    assert any(line.startswith(f"points/{other.name}: measured with another Transformers than tools/device-wheels")
               for line in found)
    if _git("rev-parse", "--is-shallow-repository") != "true":  # a shallow clone lacks the commits points name
        assert any(line.endswith("names commit eeeeeeeeeeee, which this repository does not have") for line in found)
    # no Transformers pinned for the device: said, not read as any version
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "params", root / "params")
    (root / "tools").mkdir()
    wheels = (ROOT / "tools" / "device-wheels.txt").read_text()
    (root / "tools" / "device-wheels.txt").write_text(wheels.replace("\ntransformers==", "\n# transformers=="))
    assert keep_sweep.problems(folder, root)[-1] == (
        "tools/device-wheels.txt pins no transformers: the device's version is unknown")


def _sweep_folder(parent: Path, name: str, folder_name: str, points: int, fingerprint: str, repeats: int = 0) -> Path:
    folder = parent / folder_name
    (folder / "points").mkdir(parents=True)
    (folder / "repeats").mkdir()
    entries, repeated = [], []
    for kind, count, into in (("points", points, entries), ("repeats", repeats, repeated)):
        for index in range(count):
            file = f"{kind}/p{index}.json"
            (folder / file).write_text(json.dumps({"metadata": {"git": {"code_sha256": fingerprint}}}))
            into.append({"order": index, "file": file, "status": "valid"})
    entries.append({"order": points, "file": "points/failed.json", "status": "failed"})
    record = {"spec": {"name": name}, "points": entries, "repeats": {"points": repeated}}
    (folder / "sweep.json").write_text(json.dumps(record))
    return folder


class Repo:
    """An empty repository root, and packs of hand-made sweep folders measured by its (empty) code."""

    def __init__(self, tmp_path: Path):
        self.root, self.tmp, self.packs = tmp_path / "repo", tmp_path, 0
        self.root.mkdir(parents=True)
        self.fingerprint = "a" * 64

    def pack(self, *folders: tuple) -> Path:
        """Each folder (sweep name, folder name, points[, repeats])."""
        self.packs += 1
        source = self.tmp / f"source-{self.packs}"
        source.mkdir()
        with tarfile.open(source.with_suffix(".tgz"), "w:gz") as archive:
            for name, folder_name, *counts in folders:
                made = _sweep_folder(source, name, folder_name, counts[0], self.fingerprint, *counts[1:])
                archive.add(made, arcname=folder_name)
        return source.with_suffix(".tgz")

    def keep(self, pack: Path) -> list[str]:
        return keep_sweep.keep(pack, self.root, check=lambda folder, root: [], fingerprint=self.fingerprint)

    def kept(self, name: str) -> int:
        folder = keep_sweep.kept_folder(self.root / "sweeps-in-progress" / f"{name}.tgz",
                                        self.tmp / f"out-{self.packs}")
        return keep_sweep.measured_points(folder, self.fingerprint)


def test_keep_puts_an_unfinished_sweep_in_the_tree_and_never_loses_points(tmp_path):
    repo = Repo(tmp_path)
    repo.keep(repo.pack(("sw", ".sw.partial-abc", 3)))
    assert repo.kept("sw") == 3 and not (repo.root / "runs").exists()
    assert (repo.root / "sweeps-in-progress" / "sw.tgz").stat().st_mode & 0o777 == 0o644  # not mkstemp's 0600
    repo.keep(repo.pack(("sw", ".sw.partial-again", 3)))  # as many points: not an older pack

    older = r"holds 3 results \(points and repeats\) measured by this code, the pack 2"
    with pytest.raises(keep_sweep.KeepError, match=older):
        repo.keep(repo.pack(("sw", ".sw.partial-old", 2)))
    assert repo.kept("sw") == 3

    # two unfinished folders of one sweep in a pack: the one with the most points, whatever their names' order
    repo.keep(repo.pack(("sw", ".sw.partial-aaaa", 5), ("sw", ".sw.partial-zzzz", 4)))
    assert repo.kept("sw") == 5
    assert sorted(p.name for p in (repo.root / "sweeps-in-progress").iterdir()) == ["sw.tgz"]  # nothing staged left


def test_keep_counts_only_points_of_this_code(tmp_path):
    repo = Repo(tmp_path)
    repo.keep(repo.pack(("sw", ".sw.partial-abc", 3)))
    repo.fingerprint = "b" * 64  # the measuring code changed: the kept points would all run again
    repo.keep(repo.pack(("sw", ".sw.partial-new", 1)))
    assert repo.kept("sw") == 1


def test_keep_puts_a_finished_sweep_in_runs_and_leaves_its_older_partials_out(tmp_path):
    repo = Repo(tmp_path)
    repo.keep(repo.pack(("sw", ".sw.partial-abc", 6)))
    (repo.root / "sweeps-in-progress" / "sw.pin").write_text("")  # a pinned sweep's pin goes with its pack
    lines = repo.keep(repo.pack(("sw", "sw-20261202-100000", 8), ("sw", ".sw.partial-old", 2)))
    assert (repo.root / "runs" / "sw-20261202-100000" / "sweep.json").is_file()
    assert "publish runs/sw-20261202-100000" in lines[0]
    assert "`git rm sweeps-in-progress/sw.tgz sweeps-in-progress/sw.pin`" in lines[0]
    assert "report reports/sw`" in lines[0]  # the device drew it with the measuring (pinned) code
    assert "1 unfinished folder(s) of it in the pack left out" in lines[0]
    assert repo.kept("sw") == 6  # untouched until the finished sweep is published
    with pytest.raises(keep_sweep.KeepError, match="exists already"):
        repo.keep(repo.pack(("sw", "sw-20261202-100000", 8)))


def test_keep_of_a_sweep_finished_in_its_first_call_names_nothing_to_git_rm(tmp_path):
    # sweep-h200-pair's few minutes end in the call after `sweep`: nothing of it was kept in the tree
    repo = Repo(tmp_path)
    lines = repo.keep(repo.pack(("sw", "sw-20261202-100000", 8)))
    assert (repo.root / "runs" / "sw-20261202-100000" / "sweep.json").is_file()
    assert "publish runs/sw-20261202-100000" in lines[0] and "report reports/sw`" in lines[0]
    assert "git rm" not in lines[0]


@pytest.mark.parametrize("name, folder, why", [
    ("other", ".sw.partial-abc", "which its name does not say"),
    ("sw", "sw-tiny-20261202-100000", "which its name does not say"),  # another sweep's finished folder
    ("sw", "sw-20261202-100000-old", "which its name does not say"),  # a finished folder's name, and more
    ("sw", ".sw.old", "which its name does not say"),  # no partial folder's name
    (".", "..partial-abc", "the sweep's name '.'"),
])
def test_keep_refuses_a_folder_that_is_not_the_sweep_it_names(tmp_path, name, folder, why):
    repo = Repo(tmp_path)
    with pytest.raises(keep_sweep.KeepError, match=why):
        repo.keep(repo.pack((name, folder, 1)))
    assert list(repo.root.iterdir()) == []


@pytest.mark.parametrize("member", ["link", "outside"])
def test_keep_refuses_a_pack_with_a_link_or_a_file_outside_it(tmp_path, member):
    repo = Repo(tmp_path)
    pack = tmp_path / "link.tgz"
    with tarfile.open(pack, "w:gz") as archive:
        if member == "link":
            link = tarfile.TarInfo(".sw.partial-abc")
            link.type, link.linkname = tarfile.SYMTYPE, "/etc"
            archive.addfile(link)
        else:  # refused by the check itself, where Python's tarfile has no data filter
            archive.addfile(tarfile.TarInfo("../.sw.partial-abc"))
    with pytest.raises(keep_sweep.KeepError, match="not a plain file or folder"):
        repo.keep(pack)
    assert list(repo.root.iterdir()) == []


def test_keep_counts_repeats_and_refuses_a_sweep_with_nothing_measured(tmp_path):
    repo = Repo(tmp_path)
    repo.keep(repo.pack(("sw", ".sw.partial-abc", 3, 2)))
    assert repo.kept("sw") == 5
    older = r"holds 5 results \(points and repeats\) measured by this code, the pack 4"
    with pytest.raises(keep_sweep.KeepError, match=older):
        repo.keep(repo.pack(("sw", ".sw.partial-old", 3, 1)))  # the same points, a repeat fewer
    with pytest.raises(keep_sweep.KeepError, match="no point measured by this code"):
        Repo(tmp_path / "empty").keep(repo.pack(("sw", ".sw.partial-new", 0)))


def test_keep_refuses_a_pack_of_no_sweep_of_two_finished_folders_of_one_or_with_a_point_not_named(tmp_path):
    repo = Repo(tmp_path)
    none = tmp_path / "none.tgz"
    with tarfile.open(none, "w:gz") as archive:
        archive.addfile(tarfile.TarInfo("notes.txt"))
    with pytest.raises(keep_sweep.KeepError, match="holds no sweep folder"):
        repo.keep(none)
    with pytest.raises(keep_sweep.KeepError, match="2 finished folders of sw; bring them home one at a time"):
        repo.keep(repo.pack(("sw", "sw-20261202-100000", 1), ("sw", "sw-20261202-110000", 1)))
    folder = _sweep_folder(tmp_path / "unnamed", "sw", ".sw.partial-abc", 2, repo.fingerprint)
    record = json.loads((folder / "sweep.json").read_text())
    del record["points"][1]["file"]
    (folder / "sweep.json").write_text(json.dumps(record))
    with pytest.raises(keep_sweep.KeepError, match=r"not a sweep folder \(ValueError: a point entry without its file"):
        repo.keep(_repack(folder, tmp_path, folder.name))
    assert list(repo.root.iterdir()) == []


def test_keep_refuses_a_sweep_with_one_problem_and_leaves_out_the_point_files_it_does_not_list(tmp_path):
    repo = Repo(tmp_path)
    folder = _sweep_folder(tmp_path / "stray", "sw", ".sw.partial-abc", 2, repo.fingerprint)
    (folder / "points" / "stray.json").write_text((folder / "points" / "p0.json").read_text())  # of this code
    pack = _repack(folder, tmp_path, folder.name)
    with pytest.raises(keep_sweep.KeepError, match=r"cannot be kept \(1 problem\(s\)\); nothing kept; first: why"):
        keep_sweep.keep(pack, repo.root, check=lambda folder, root: ["why"], fingerprint=repo.fingerprint)
    assert list(repo.root.iterdir()) == []
    assert repo.keep(pack) == ["kept sweeps-in-progress/sw.tgz (2 points measured by this code; 1 unlisted point "
                               "file(s) left out): commit it; `h200-reports.sh resume` resumes it"]
    assert repo.kept("sw") == 2
    with tarfile.open(repo.root / "sweeps-in-progress" / "sw.tgz") as archive:
        assert ".sw.partial-kept/points/stray.json" not in archive.getnames()


def test_a_kept_pack_of_two_folders_is_refused(tmp_path):
    pack = tmp_path / "two.tgz"
    with tarfile.open(pack, "w:gz") as archive:
        for name in (".sw.partial-a", ".sw.partial-b"):
            folder = tarfile.TarInfo(name)
            folder.type = tarfile.DIRTYPE
            archive.addfile(folder)
    (tmp_path / "into").mkdir()
    with pytest.raises(keep_sweep.KeepError, match="holds 2 folders, a kept sweep one"):
        keep_sweep.kept_folder(pack, tmp_path / "into")


def test_the_command_says_how_it_is_used_and_fails_with_a_message(tmp_path, capsys):
    assert keep_sweep.main([]) == 2 and keep_sweep.main(["a.tgz", "b.tgz"]) == 2
    assert "python3 tools/keep_sweep.py PACK.tgz" in capsys.readouterr().err
    assert keep_sweep.main([str(tmp_path / "missing.tgz")]) == 1
    said = capsys.readouterr().err
    assert said.startswith("error: ") and "missing.tgz" in said


def test_keep_refuses_a_cut_off_pack_with_a_message(tmp_path):
    repo = Repo(tmp_path)
    whole = repo.pack(("sw", ".sw.partial-abc", 3)).read_bytes()
    cut = tmp_path / "cut.tgz"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(keep_sweep.KeepError, match="not a whole tgz"):
        repo.keep(cut)
    assert list(repo.root.iterdir()) == []


def test_a_kept_sweep_resumes_without_measuring_its_points_again(tmp_path, monkeypatch):
    # The whole way on the CPU: a sweep stopped after one of its two points, packed as sweep-pack packs it,
    # kept by keep_sweep with this repository's checks, unpacked as bring_partial (tools/device-functions.sh) does,
    # and resumed: the measured point (and nothing it needs) survived the trip, so only the other one runs.
    import subprocess

    from rollout_study import environment, sweep
    from rollout_study.protocol import run_in_process

    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    monkeypatch.setattr(environment, "git_commit",
                        lambda: {"commit": head, "dirty": None, "code_sha256": code_fingerprint()})
    spec = sweep.SweepSpec.from_yaml(str(ROOT / "params" / "sweep-cpu.yaml"))
    folder = tmp_path / "device" / ".sweep-cpu.partial-abc"
    folder.mkdir(parents=True)
    ran = []

    def first_only(params):
        ran.append(params.batch_size)
        if len(ran) > 1:
            raise KeyboardInterrupt  # the session's device time ran out
        return run_in_process(params)

    with pytest.raises(KeyboardInterrupt):
        sweep.run_local(spec, folder, progress=False, launcher=first_only)
    pack = _repack(folder, tmp_path, folder.name)
    root = tmp_path / "repo"
    root.mkdir()
    keep_sweep.keep(pack, root, check=lambda f, _: keep_sweep.problems(f))
    resumed, again = keep_sweep.kept_folder(root / "sweeps-in-progress" / "sweep-cpu.tgz", tmp_path / "runs"), []
    assert resumed.name == ".sweep-cpu.partial-kept"
    record = sweep.run_local(spec, resumed, progress=False, launcher=lambda params: again.append(params.batch_size)
                             or run_in_process(params))
    assert ran == [1, 2] and again == [2]
    statuses = [entry["status"] for entry in sorted(record["points"], key=lambda e: e["order"])]
    assert statuses == [sweep.KEPT, "valid"]
