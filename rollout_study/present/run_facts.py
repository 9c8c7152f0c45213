"""What a run's Run block states, per line, for reports of several runs (a hazard matrix, a sweep): each setting once
where every run shares it, and one that differs in the report's own words (per update path, or its values).
Code, software and machine are each report's provenance line.
"""
from __future__ import annotations

from typing import Callable

from ..result import Result
from .text import counted, number


def recorded(value: str) -> bool:
    """Not `number(None)`'s "-": what a run did not record is left out of its line, not stated as "-"."""
    return value != "-"


def facts(result: Result) -> dict[str, list[tuple[str, str, str]]]:
    """What a single run's Run block states (markdown._facts), of one run, per line: (name, value, as it reads
    where every run shares it)."""
    meta = result.metadata
    wl, training = meta.get("workload") or {}, meta.get("training") or {}
    controls = training.get("control_cycles") or 0

    # The text is made from the value alone: points with equal values must read alike, or one stated once would hide
    # a difference.
    def said(name: str, value, template: str = "") -> tuple[str, str, str]:
        value = number(value)
        return name, value, (template or f"{name} {{}}").format(value)

    def count(name: str, noun: str, value, after: str = "") -> tuple[str, str, str]:
        return name, number(value), counted(value, noun) + after
    return {
        "model": [said("model", f"{result.label} {result.model_name}", "{}"), said("dtype", meta.get("dtype")),
                  said("attention", meta.get("attention_implementation"))],
        "device": [said("device", f"{meta.get('device')}, {result.machine}", "{}")],
        "workload": [count("requests", "request", wl.get("requests")),
                     said("prompts", wl.get("prompt_source"), "{} prompts"),
                     said("batch size", wl.get("batch_size")),
                     said("batches", " + ".join(map(str, wl.get("batch_sizes") or [])) or None),
                     said("prompt length", wl.get("prompt_len")),
                     count("new tokens", "new token", wl.get("max_new_tokens")),
                     count("iterations", "iteration", wl.get("iterations"), " per phase"),
                     count("cycles", "cycle", wl.get("cycles")),
                     ("control cycles", number(controls),
                      counted(controls, "control cycle") if controls else "no control cycle"),
                     said("seed", wl.get("seed"))],
        "update": [said("optimizer", training.get("optimizer"), "{}"), said("lr", training.get("lr")),
                   said("update path", training.get("update_path", "in-place")),
                   said("master weights", training.get("master_dtype", "none"))]}


def lines(results: list[Result], differing: Callable[[str, list[str]], str]) -> list[str]:
    """One line per fact group: the facts every run shares as they read, then each that differs as
    `differing(name, each run's value)` says it."""
    each = [facts(r) for r in results]
    out = []
    for group in each[0]:
        shared, varying = [], []
        for index, (name, _, text) in enumerate(each[0][group]):
            values = [f[group][index][1] for f in each]
            if len(set(values)) == 1:
                if recorded(values[0]):
                    shared.append(text)
            else:
                varying.append(differing(name, values))
        out.append(f"{group}: " + "; ".join(filter(None, [", ".join(shared), *varying])))
    return out


SHOWN = 8  # values of a differing setting named before the rest are counted


def _values(values: list[str]) -> str:
    """A differing setting's values, each once, numbers in order (batch 1, 2, 4 ...), others as they came."""
    def key(value: str):
        try:
            return 0, float(value.replace(",", "")), ""
        except ValueError:
            return 1, 0.0, ""
    distinct = sorted(dict.fromkeys(values), key=key)
    more = f" and {len(distinct) - SHOWN} more" if len(distinct) > SHOWN else ""
    return ", ".join(distinct[:SHOWN]) + more


def sweep_lines(results: list[Result]) -> list[str]:
    """A sweep's Run block: what its points share, once, and what they vary (the curves' axes among it)."""
    if not results:
        return ["no point has a result to read its settings from"]
    return lines(results, lambda name, values: f"{name} per point: {_values(values)}")
