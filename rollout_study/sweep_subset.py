"""A sweep file that runs some of another sweep file's points, with the same parameters and so the same hashes.

    name: sweep-h200-tiny
    subset_of: sweep-h200.yaml      # a full sweep file, relative to this file's folder
    repeat_alone: 0                 # the subset's own (default 0)
    launcher: fresh                 # optional: the subset's own, else the full file's; nothing else may be set
    sweep:                          # axes of that file, each cut to some of its values
      model:
        - {model: synthetic, dtype: float32}

Everything else is taken from the full file when the subset is read, so a subset's point is the full
sweep's point of the same values, and no copy of its parameters can drift from it. `--keep-from` copies
a finished subset's results into the full sweep, measured once: one model's curves can be published
while the others are still running, and a smoke run of the far corner is not measured twice.
"""
from __future__ import annotations

import os
from pathlib import Path

from .param_values import ParameterError

ALLOWED = ("name", "subset_of", "repeat_alone", "launcher", "sweep")  # launcher: how, not what, a point runs


def _same(a, b) -> bool:
    """One value of an axis: equal values match (512 and 512.0), a boolean never a number (True == 1 in Python)."""
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def resolve(values: dict, path: str) -> dict:
    """The sweep file's values as a full sweep file's: the full file's keys with the subset's axes cut."""
    from .files import read_yaml
    from .sweep import SweepSpec  # the full file is validated as any sweep file

    extra = sorted(set(values) - set(ALLOWED))
    if extra:
        raise ParameterError(f"{path}: a subset file (subset_of) sets only {', '.join(ALLOWED)}; got "
                             f"{', '.join(extra)} (every other parameter is the full sweep's, so its points keep "
                             "their hashes)")
    named = values["subset_of"]
    full_path = os.path.join(os.path.dirname(path), named) if isinstance(named, str) else None
    if full_path is None or os.path.basename(named) != named or not os.path.isfile(full_path):
        raise ParameterError(f"{path}: subset_of must name a sweep file in the same folder, got {named!r}")
    full = read_yaml(full_path, f"{path}: subset_of's sweep file")
    if not isinstance(full, dict) or not isinstance(full.get("sweep"), dict) or "subset_of" in full:
        raise ParameterError(f"{path}: subset_of {named!r} is not a full sweep file (a 'sweep:' mapping, no "
                             "subset_of of its own)")
    full.setdefault("name", Path(full_path).stem)
    SweepSpec.from_dict(dict(full), source=full_path)  # the full file valid first, with its own messages
    name = values.get("name") or Path(path).stem
    if name == full["name"]:  # its folders would pass for the full sweep's (--into checks the name)
        raise ParameterError(f"{path}: name must differ from the full sweep's ({full['name']!r}), got {name!r}")
    axes, cut = values.get("sweep"), dict(full["sweep"])
    if not isinstance(axes, dict) or not axes:
        raise ParameterError(f"{path}: a subset file needs a 'sweep:' mapping of some of {named}'s axes to some "
                             f"of their values; its axes: {', '.join(cut)}")
    for key, options in axes.items():
        if key not in cut:
            raise ParameterError(f"{path}: sweep.{key} is no axis of {named}; allowed: {', '.join(cut)}")
        if not isinstance(options, list) or not options:
            raise ParameterError(f"{path}: sweep.{key} must be a non-empty list of values of {named}'s "
                                 f"sweep.{key} ({cut[key]!r}), got {options!r}")
        unknown = [option for option in options if not any(_same(option, value) for value in cut[key])]
        if unknown:  # YAML reads 1e-4 as text: 1.0e-4 is the number
            raise ParameterError(f"{path}: sweep.{key} has {unknown!r}, not among {named}'s sweep.{key}; allowed: "
                                 f"{cut[key]!r}")
        repeated = [option for i, option in enumerate(options) if any(_same(option, o) for o in options[:i])]
        if repeated:
            raise ParameterError(f"{path}: sweep.{key} lists {repeated!r} more than once; allowed: each value once")
        cut[key] = [value for value in cut[key] if any(_same(option, value) for option in options)]  # full's order
    kept = {key: value for key, value in full.items() if key not in ("name", "repeat_alone", "sweep")}
    launcher = {"launcher": values["launcher"]} if "launcher" in values else {}
    return {**kept, "name": name, "subset_of": named, "repeat_alone": values.get("repeat_alone", 0), **launcher,
            "sweep": cut}
