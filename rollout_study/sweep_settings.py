"""What else a curve sweep varied, besides its curves' axes, and those settings side by side.

A sweep report draws curves over batch size and new tokens, per model. A sweep file may list any other
parameter too (length_bucket, policy, update_path, prompt_len, ...). Two points that differ only there sit at
the same batch and new tokens, so one curve through both would zig-zag between settings, and a table would
list the same place twice with nothing to tell the rows apart. So each combination of those values is a
setting: the report gives each (model, setting) its own section, titled with the setting, and puts a model's
settings side by side here.

    model       as the curves key it: the result's label, model name and dtype (`model_of`), so `dtype: auto`
                and the dtype it resolved to are one model; a failed point, without a result, takes the model of
                the points that share its parameters' model and dtype
    setting     per model: the parameters present in every one of its points' parameters whose values differ
                among them, less the curves' own (batch, requests, new tokens), the name and the engines, and less
                those that move with the engines (an engine-group axis that also sets, say, the policy: that is
                the group, not a setting), with this point's values; () where nothing else varied (every sweep
                published before settings were told apart)
    first       a model's settings in the order its points come in the sweep (the sweep file's), failed points
                included, so the first stays first where its first point failed; the base of the side by side is
                the first with a valid point
    side by side  per model, variant but eager and place (new tokens, batch, requests): each other setting's steady
                median against the first setting's, as first / this with its 95% bootstrap interval (over 1: this
                setting is faster), and beside it eager generate()'s ratio in the same two points: where eager
                ignores the setting (length_bucket), that is how far those points moved run to run, which the
                variant's ratio carries as well.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from .engines import BASELINE, variant_rank
from .param_values import SHAPE_FIELDS
from .stats import Ratio, ratio_interval

# Never a setting: a point's name, its engines (sweep_curves: a sweep may split engines into groups, each a point
# at the same place) and the curves' own axes
NOT_SETTINGS = ("name", "engines", "batch_size", "requests", "max_new_tokens")
NOT_RECORDED = "not recorded"
UNRECORDED = (("setting", NOT_RECORDED),)  # a point without parameters, where its model's others vary
# What eager generate() runs the same whatever these say (the graph engines' buckets, the graph policies' order
# after eager's turn): only there is eager's ratio between two settings the points' drift alone.
EAGER_IGNORES = ("length_bucket", "policy")
NONE_MEANS = {"prompt_len": "auto"}  # how a parameter left unset reads (StudyParams: None is prompt_len's auto)


def model_of(result) -> tuple[str, str, str]:
    """(label, model name, dtype): the model a curve belongs to (sweep_curves.Point.model)."""
    return result.label, result.model_name, result.metadata.get("dtype") or "-"


@dataclass(frozen=True)
class PointSetting:
    setting: tuple  # ((parameter, value), ...)
    rank: int  # its setting's place among its model's, first first
    with_engines: tuple  # parameters that move with its engines: part of its engine group, not of its place
    model: tuple | None = None  # (label, name, dtype) as its result says, or a failed point's twins' (_models)


def per_point(loaded: list[tuple[dict, object]]) -> list[PointSetting]:
    """Each (sweep.json entry, result or None) of a sweep's setting, in the same order."""
    models = _models(loaded)
    groups: dict = {}
    for (entry, _), model in zip(loaded, models):
        if isinstance(entry.get("params"), dict):
            groups.setdefault(model, []).append(entry["params"])
    axes = {model: _axes(all_params) for model, all_params in groups.items()}
    out, order = [], {}
    for (entry, _), model in zip(loaded, models):
        keys, with_engines = axes.get(model, ((), ()))
        params = entry.get("params")
        setting = (tuple((k, _recorded(k, params)) for k in keys) if isinstance(params, dict)
                   else UNRECORDED if keys else ())
        ranks = order.setdefault(model, {})
        out.append(PointSetting(setting, ranks.setdefault(setting, len(ranks)), with_engines, model))
    return out


def _models(loaded) -> list:
    resolved: dict = {}  # what decides a point's model, from its parameters -> the models its results resolved to
    for entry, result in loaded:
        if result is not None and isinstance(entry.get("params"), dict):
            resolved.setdefault(_identity(entry["params"]), set()).add(model_of(result))

    def model(entry, result):
        params = entry.get("params")
        if result is not None:
            return model_of(result)
        if not isinstance(params, dict):
            return None
        found = resolved.get(_identity(params), set())  # a failed point: its twins' model, where they agree
        return next(iter(found)) if len(found) == 1 else ("unresolved",) + _identity(params)
    return [model(entry, result) for entry, result in loaded]


def _identity(params: dict) -> tuple:
    """What decides the model a point resolves to: the model's name, dtype and device, and a synthetic model's
    shape (two `synthetic` points of different layers are two models)."""
    return (params.get("model"), params.get("dtype"), params.get("device")) + tuple(
        _value(k, params.get(k)) for k in SHAPE_FIELDS)


def _axes(all_params: list[dict]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(setting keys, keys that move with the engines) of one model's points' parameters. A key an older record
    lacks says nothing about what that point ran: it varies where the records that have it differ, and reads
    NOT_RECORDED in the others."""
    keys = dict.fromkeys(k for p in all_params for k in p if k not in NOT_SETTINGS)
    varied = [k for k in keys if len({_value(k, p[k]) for p in all_params if k in p}) > 1]
    engines = {_value("engines", p.get("engines")) for p in all_params}
    with_engines = tuple(k for k in varied if len(engines) > 1 and all(
        len({_recorded(k, p) for p in all_params if _value("engines", p.get("engines")) == group}) == 1
        for group in engines))
    return tuple(k for k in varied if k not in with_engines), with_engines


def _recorded(key: str, params: dict) -> str:
    return _value(key, params[key]) if key in params else NOT_RECORDED


def _value(key: str, value) -> str:
    if value is None and key in NONE_MEANS:
        return NONE_MEANS[key]
    if key == "policy" and isinstance(value, list):
        # a list is an order (the instances are built and take their turns in it): '["recapture", "reuse"]' read
        # as the two policies alone
        return " then ".join(value)
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def text(setting: tuple[tuple[str, str], ...]) -> str:
    """'length_bucket 64' ('' for no setting): how titles, stems and tables name a setting."""
    return ", ".join(f"{key} {value}" for key, value in setting)


@dataclass(frozen=True)
class SideBySide:
    variant: str
    new_tokens: int
    batch: int
    requests: int
    base: tuple  # the model's first setting
    setting: tuple
    base_ms: float  # steady median at the first setting
    setting_ms: float  # and at this one
    ratio: Ratio  # base's steady samples over this setting's: over 1, this setting is faster
    eager: Ratio | None  # the same two points' eager generate(), the same way: their drift, where eager ignores it


def in_order(points: list) -> list[tuple]:
    """One model's settings among its points (sweep_curves.Point), the first first."""
    return [setting for _, setting in sorted({(p.setting_rank, p.setting) for p in points})]


def at_first(points: list) -> list:
    """One model's points at its first setting (all of them where it ran one)."""
    first = in_order(points)[:1]
    return [p for p in points if [p.setting] == first]


def side_by_side(points: list) -> list[SideBySide]:
    """One model's valid points (sweep_curves.Point) across its settings: each other setting's steady state at each
    variant but eager and place against the first setting's, and eager's in the same two points. Empty where the
    model ran one setting."""
    ordered = in_order(points)
    if len(ordered) < 2:
        return []
    cells: dict[tuple, dict] = {}  # (variant, tokens, batch, requests) -> {setting: the point that shows it}
    for p in points:
        for variant in p.variants():
            if variant != BASELINE and p.steady(variant):
                cells.setdefault((variant, p.new_tokens, p.batch, p.requests), {})[p.setting] = p
    rows = []
    for (variant, tokens, batch, requests), by_setting in cells.items():
        base = by_setting.get(ordered[0])
        for setting in ordered[1:]:
            if base and (other := by_setting.get(setting)):
                mine, theirs = base.steady(variant), other.steady(variant)
                eager = (ratio_interval(base.steady(BASELINE), other.steady(BASELINE))
                         if base.steady(BASELINE) and other.steady(BASELINE) else None)
                rows.append(SideBySide(variant, tokens, batch, requests, ordered[0], setting, mine.median,
                                       theirs.median, ratio_interval(mine, theirs), eager))
    return sorted(rows, key=lambda r: (ordered.index(r.setting), variant_rank(r.variant), r.new_tokens, r.batch))


def moves_eager(setting: tuple, base: tuple) -> str | None:
    """Why eager's ratio between two settings is not their points' drift alone (a seed draws other weights and
    prompts for eager too); None where eager runs the same in both (EAGER_IGNORES)."""
    if UNRECORDED in (setting, base):
        return "a point's parameters were not recorded, so what its setting changes is unknown"
    theirs = dict(base)
    moved = [name for name, value in setting if theirs.get(name) != value and name not in EAGER_IGNORES]
    return f"{', '.join(moved)} changes eager's run too" if moved else None
