"""Two result files side by side: the same workload? the same tokens, call by call?

    python -m rollout_study compare A/result.json B/result.json

Each measured call records a SHA-256 of its generated tokens, so determinism across runs, machines
or versions can be checked from the files alone. Parameters that do not change what is generated
(name, sampling counts, profiling, cold starts) are left out of "same workload".
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .result import Result

# Parameters that change how much is measured, not what is generated.
# Cycles stay in: calls are matched by cycle, and control cycles shift the real updates' numbers.
NOT_WORKLOAD = ("name", "iterations", "cold_starts", "profile", "device", "policy", "engines")


@dataclass
class Comparison:
    same_workload: bool
    workload_differences: dict = field(default_factory=dict)  # parameter -> (a, b)
    compared: int = 0  # calls present in both, with token hashes
    matching: int = 0
    first_difference: str | None = None

    @property
    def tokens_match(self) -> bool:
        return self.compared > 0 and self.matching == self.compared

    def text(self) -> str:
        lines = [("same workload" if self.same_workload else "different workloads: " + ", ".join(
            f"{k} {a!r} vs {b!r}" for k, (a, b) in self.workload_differences.items()))]
        if not self.compared:
            lines.append("no calls to compare (no token hashes in one of the files, or no common calls)")
        else:
            lines.append(f"tokens: {self.matching}/{self.compared} common calls match"
                         + ("" if self.tokens_match else f"; first difference: {self.first_difference}"))
        return "\n".join(lines)


def _workload(result: Result) -> dict:
    params = dict(result.metadata.get("params") or {})
    params["dtype"] = result.metadata.get("dtype")
    params["model"] = (result.metadata.get("model") or {}).get("name")
    params["prompt_len"] = (result.metadata.get("workload") or {}).get("prompt_len")
    return {k: v for k, v in params.items() if k not in NOT_WORKLOAD}


def compare(a: Result, b: Result) -> Comparison:
    wa, wb = _workload(a), _workload(b)
    differences = {k: (wa.get(k), wb.get(k)) for k in sorted(set(wa) | set(wb)) if wa.get(k) != wb.get(k)}
    hashes_b = {(c.variant, c.cycle, c.phase, c.index): c.extra.get("tokens_sha256") for c in b.calls}
    comparison = Comparison(not differences, differences)
    for call in a.calls:
        key = (call.variant, call.cycle, call.phase, call.index)
        mine, theirs = call.extra.get("tokens_sha256"), hashes_b.get(key)
        if mine is None or theirs is None:
            continue
        comparison.compared += 1
        if mine == theirs:
            comparison.matching += 1
        elif comparison.first_difference is None:
            comparison.first_difference = f"{call.variant} cycle {call.cycle} {call.phase} #{call.index}"
    return comparison
