"""Every committed parameter file validates, and the H200 smoke sweep's points are the H200 sweep's own."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rollout_study.params import StudyParams
from rollout_study.sweep import SweepSpec, point_hash

PARAMS = Path(__file__).resolve().parent.parent / "params"
FILES = sorted(PARAMS.glob("*.yaml"))


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_every_parameter_file_validates(path):
    # A sweep file validates every point (the product of its lists); a study file its one set.
    with open(path, encoding="utf-8") as handle:
        is_sweep = "sweep" in yaml.safe_load(handle)
    if is_sweep:
        assert SweepSpec.from_yaml(str(path)).points()
    else:
        StudyParams.from_yaml(str(path))


def _keys(name: str) -> list[str]:
    # What a resumed sweep keeps a point by: its file name, the slug and the hash of its parameters.
    return [f"{slug}-{point_hash(params)}" for slug, params in SweepSpec.from_yaml(str(PARAMS / name)).points()]


def test_the_smoke_sweep_runs_the_h200_sweeps_heaviest_points_with_their_parameters():
    smoke, full = _keys("sweep-h200-smoke.yaml"), _keys("sweep-h200.yaml")
    assert len(smoke) == 6 and set(smoke) <= set(full)
    assert all("batch_size=64" in key and "max_new_tokens=512" in key for key in smoke)
    assert sorted({key.split("-dtype=")[0] for key in smoke}) == [
        "model=smollm2-135m-instruct", "model=synthetic-llama-3.2-1b"]  # the two larger models, not the tiny one


def test_the_h200_sweeps_per_model_subsets_are_its_points_split_by_model():
    parts = [_keys(f"sweep-h200-{model}.yaml") for model in ("tiny", "smollm2", "1b")]
    assert sorted(key for part in parts for key in part) == sorted(_keys("sweep-h200.yaml"))
    assert [{key.split("-dtype=")[0] for key in part} for part in parts] == [
        {"model=synthetic"}, {"model=smollm2-135m-instruct"}, {"model=synthetic-llama-3.2-1b"}]


def test_the_h200_sweep_runs_every_gpu_engine_once_per_place_in_groups_each_with_eager():
    from rollout_study.engines import REGISTRY

    spec = SweepSpec.from_yaml(str(PARAMS / "sweep-h200.yaml"))
    groups = spec.axes["engines"]
    assert all(group[0] == "eager" for group in groups)  # each group's speed-ups have their own base
    named = [engine for group in groups for engine in group[1:]]
    assert sorted(named) == sorted(set(named)) == sorted(e for e in REGISTRY if e != "eager")


def _published_tiny_points() -> set[str]:
    return {path.stem for path in (PARAMS.parent / "reports" / "sweep-h200-tiny" / "points").glob("*.json")}


def test_the_ray_smoke_runs_points_the_published_tiny_sweep_measured_with_the_local_executor():
    # So each Ray point can be set beside the same point measured locally (same file name: slug and hash).
    smoke = _keys("sweep-h200-ray-smoke.yaml")
    assert len(smoke) == 2 and set(smoke) <= _published_tiny_points()


def test_the_two_gpu_tiny_sweep_runs_exactly_the_published_one_gpu_tiny_sweeps_points():
    # `compare` then sets the two wall times side by side over the same points (its "same points" is this).
    assert sorted(_keys("sweep-h200-tiny-ray2.yaml")) == sorted(_published_tiny_points())
