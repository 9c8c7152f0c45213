"""The unfinished sweeps kept in the tree resume as they are; tools/keep_sweep.py brings a pack home safely."""
import importlib.util
import json
import os
import tarfile
from pathlib import Path

import pytest

from rollout_study.environment import code_fingerprint
from rollout_study.sweep import SweepSpec, point_hash

ROOT = Path(__file__).resolve().parent.parent
KEPT = sorted(p for p in (ROOT / "sweeps-in-progress").glob("*") if p.is_dir())

spec = importlib.util.spec_from_file_location("keep_sweep", ROOT / "tools" / "keep_sweep.py")
keep_sweep = importlib.util.module_from_spec(spec)
spec.loader.exec_module(keep_sweep)


@pytest.mark.parametrize("folder", KEPT, ids=[p.name for p in KEPT])
def test_a_kept_sweep_resumes_at_this_code(folder):
    with open(folder / "sweep.json", encoding="utf-8") as handle:
        record = json.load(handle)
    assert record["spec"]["name"] == folder.name
    sweep = SweepSpec.from_yaml(str(ROOT / "params" / f"{folder.name}.yaml"))
    assert (sweep.name, sweep.report) == (record["spec"]["name"], record["spec"]["report"])
    # Every kept file is one of the sweep's points now: a point its parameter file no longer has is never reported.
    files = {f"points/{slug}-{point_hash(params)}.json" for slug, params in sweep.points()}
    listed = {entry["file"] for entry in record["points"]}
    on_disk = {f"points/{p.name}" for p in (folder / "points").iterdir()}
    assert on_disk <= listed <= files
    # Measured by other code, they would all run again at the resume, their time counted in the sweep's: a
    # change to the measuring code while a sweep is kept has to drop the sweep (git rm -r) knowingly.
    fingerprint = code_fingerprint()
    for name in sorted(on_disk):
        with open(folder / name, encoding="utf-8") as handle:
            recorded = json.load(handle)["metadata"]["git"]["code_sha256"]
        assert recorded == fingerprint, (
            f"{folder.name}/{name} was measured by code {recorded[:8]}, the code is now {fingerprint[:8]}: revert "
            f"the change to the measuring code, or drop the kept sweep (git rm -r sweeps-in-progress/{folder.name})")


def _sweep_folder(parent: Path, name: str, folder_name: str, points: int) -> Path:
    folder = parent / folder_name
    (folder / "points").mkdir(parents=True)
    entries = []
    for index in range(points):
        file = f"points/p{index}.json"
        (folder / file).write_text("{}", encoding="utf-8")
        entries.append({"order": index, "file": file, "status": "valid"})
    entries.append({"order": points, "file": "points/failed.json", "status": "failed"})
    (folder / "sweep.json").write_text(json.dumps({"spec": {"name": name}, "points": entries}), encoding="utf-8")
    return folder


def _pack(tmp_path: Path, *folders: tuple[str, str, int]) -> Path:
    source = tmp_path / f"source-{len(list(tmp_path.glob('source-*')))}"
    source.mkdir()
    pack = source.with_suffix(".tgz")
    with tarfile.open(pack, "w:gz") as archive:
        for name, folder_name, points in folders:
            archive.add(_sweep_folder(source, name, folder_name, points), arcname=folder_name)
    return pack


def test_keep_puts_an_unfinished_sweep_in_the_tree_and_never_loses_points(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    keep_sweep.keep(_pack(tmp_path, ("sw", ".sw.partial-abc", 3)), root)
    kept = root / "sweeps-in-progress" / "sw"
    assert keep_sweep.measured_points(kept) == 3 and not (root / "runs").exists()

    with pytest.raises(keep_sweep.KeepError, match="holds 3 measured points, the pack 2"):
        keep_sweep.keep(_pack(tmp_path, ("sw", ".sw.partial-old", 2)), root)
    assert keep_sweep.measured_points(kept) == 3

    keep_sweep.keep(_pack(tmp_path, ("sw", ".sw.partial-def", 5)), root)
    assert keep_sweep.measured_points(kept) == 5
    assert sorted(os.listdir(root / "sweeps-in-progress")) == ["sw"]  # no staging folder left behind


def test_keep_puts_a_finished_sweep_in_runs_for_publishing(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    lines = keep_sweep.keep(_pack(tmp_path, ("sw", "sw-20261202T1000Z", 4)), root)
    assert keep_sweep.measured_points(root / "runs" / "sw-20261202T1000Z") == 4
    assert "publish runs/sw-20261202T1000Z" in lines[0] and "git rm -r sweeps-in-progress/sw" in lines[0]
    with pytest.raises(keep_sweep.KeepError, match="exists already"):
        keep_sweep.keep(_pack(tmp_path, ("sw", "sw-20261202T1000Z", 4)), root)


def test_keep_refuses_a_folder_that_is_not_the_sweep_it_names(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    with pytest.raises(keep_sweep.KeepError, match="which its name does not say"):
        keep_sweep.keep(_pack(tmp_path, ("other", ".sw.partial-abc", 1)), root)
    assert not (root / "sweeps-in-progress").exists()
