"""What else a curve sweep varied, besides its curves' axes, and those settings side by side.

A sweep report draws curves over batch size and new tokens, per model. A sweep file may list any other
parameter too (length_bucket, policy, update_path, prompt_len, ...). Two points that differ only there sit at
the same batch and new tokens, so one curve through both would zig-zag between settings, and a table would
list the same place twice with nothing to tell the rows apart. So each combination of those values is a
setting: the report gives each (model, setting) its own section, titled with the setting, and puts a model's
settings side by side here.

    setting     per model (name and dtype, as the points' parameters give them): the parameters whose values
                differ among its points, less the curves' own (CURVE_KEYS), with this point's values; () where
                nothing else varied (every sweep published before settings were told apart)
    side by side  per model, variant and place (new tokens, batch, requests): each other setting's steady median
                against the model's first setting's (the sweep file's order), as first / other with its 95%
                bootstrap interval (over 1: faster than the first setting). eager generate() is in it too:
                it ignores most settings, so its ratio says how far two points moved run to run.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from .engines import variant_rank
from .stats import Ratio, ratio_interval

# The curves' axes and what is not a setting: a point's name, and the engines of its group (sweep_curves: a
# sweep may split engines into groups, each a point at the same place)
CURVE_KEYS = ("name", "engines", "model", "dtype", "batch_size", "requests", "max_new_tokens")


def _model(params: dict) -> tuple:
    return params.get("model"), params.get("dtype")


def _value(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def varied(entries: list[dict]) -> dict[tuple, tuple[str, ...]]:
    """Per model (name, dtype): the parameters other than CURVE_KEYS whose values differ among its points, in the
    order the points' parameters list them. Entries without parameters (older records) vary nothing."""
    by_model: dict[tuple, list[dict]] = {}
    for entry in entries:
        if isinstance(params := entry.get("params"), dict):
            by_model.setdefault(_model(params), []).append(params)
    out = {}
    for model, all_params in by_model.items():
        keys = dict.fromkeys(k for params in all_params for k in params if k not in CURVE_KEYS)
        out[model] = tuple(k for k in keys if len({_value(p.get(k)) for p in all_params}) > 1)
    return out


def setting_of(entry: dict, keys_by_model: dict[tuple, tuple[str, ...]]) -> tuple[tuple[str, str], ...]:
    """The point's setting: (parameter, value) for each parameter its model's points vary besides the curves'."""
    params = entry.get("params")
    if not isinstance(params, dict):
        return ()
    return tuple((key, _value(params.get(key))) for key in keys_by_model.get(_model(params), ()))


def setting_ranks(entries: list[dict], keys_by_model: dict[tuple, tuple[str, ...]]) -> dict[tuple, int]:
    """Each setting's place among the settings of the entries (the spec's order: the sweep file's), failed points
    included, so the first setting stays first where its first point failed."""
    return {setting: rank for rank, setting in enumerate(dict.fromkeys(setting_of(e, keys_by_model) for e in entries))}


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
    base_ms: float
    steady_ms: float
    ratio: Ratio  # base's steady samples over this setting's: over 1, this setting is faster


def side_by_side(points: list) -> list[SideBySide]:
    """One model's valid points (sweep_curves.Point) across its settings: each other setting's steady state at each
    variant and place against the first setting's. Empty where the model ran one setting."""
    order = [setting for _, setting in sorted({(p.setting_rank, p.setting) for p in points})]
    if len(order) < 2:
        return []
    cells: dict[tuple, dict] = {}  # (variant, tokens, batch, requests) -> {setting: steady samples}
    for p in points:
        for variant in p.variants():
            if steady := p.steady(variant):
                cells.setdefault((variant, p.new_tokens, p.batch, p.requests), {})[p.setting] = steady
    rows = []
    for (variant, tokens, batch, requests), by_setting in cells.items():
        base = by_setting.get(order[0])
        for setting in order[1:]:
            if base and (other := by_setting.get(setting)):
                rows.append(SideBySide(variant, tokens, batch, requests, order[0], setting, base.median, other.median,
                                       ratio_interval(base, other)))
    return sorted(rows, key=lambda r: (order.index(r.setting), variant_rank(r.variant), r.new_tokens, r.batch))
