"""The hazard matrix: for each update path and graph policy, what happened to the graphs after each sync.

Read from the results of a hazard sweep (one study per update path, every graph policy in each).
A cell's verdict, over the real (non-control) updates of its run:

    STALE            a call after a sync that kept its graphs did not match generate() with the new weights
    WRONG            a call after a sync that recaptured did not match (a bug, not a stale replay)
    refused          the engine could not tell whether its graphs were current and refused to replay
    recaptured       every sync dropped the graphs; parity held
    kept and valid   the graphs were kept, parity held, and the sync changed the tokens (so parity put it to the test)
    kept, unproven   the graphs were kept and parity held, but some sync left every token as it was
    mixed            some syncs kept the graphs and some recaptured; parity held (", unproven" as above)
    failed           a reference or a call after a sync could not be checked

Without CUDA the graph engine runs its steps eagerly and nothing can go stale: verdicts are read
from the engine's decision and say "(no CUDA graph)".
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from .breakeven import rollouts_cost
from .params import DIAGNOSTIC_POLICIES
from .effects import real_cycles
from .record import variant_name
from .result import Result

AFTER = ("first_after_update", "steady_after_update")
KEPT = ("kept", "unchanged")
WRONG = ("STALE", "WRONG", "failed")  # a real policy's cell with one of these fails the matrix
RIGHT = ("recaptured", "kept and valid")  # proven right: parity held and was put to the test
ROLLOUTS_PER_UPDATE = (1, 8, 64)


@dataclass(frozen=True)
class HazardCell:
    path: str
    policy: str
    diagnostic: bool
    verdict: str
    syncs: int  # real updates
    captures: int  # captures in the first calls after those syncs
    parity: str  # "matched/checked" over every call after a sync
    step_ms: float | None  # median trainer step over the updates after the first (see `cell`)
    sync_ms: float | None  # median sync, likewise
    first_ms: float | None  # median first call after a sync
    steady_ms: float | None  # median steady call after a sync
    detail: str  # the first divergence of a stale replay, or the refusal

    @property
    def kind(self) -> str:
        """The verdict without its "(no CUDA graph)" note."""
        return self.verdict.split(" (")[0]

    def rl_step_ms(self, rollouts: int) -> float | None:
        """One RL step: trainer step + sync + first rollout + (rollouts - 1) steady rollouts."""
        if None in (self.step_ms, self.sync_ms, self.first_ms, self.steady_ms):
            return None
        return self.step_ms + self.sync_ms + rollouts_cost(self.first_ms, self.steady_ms, rollouts)


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _divergence(call) -> str:
    mismatch = (call.parity.mismatch if call.parity else None) or {}
    if mismatch.get("kind") != "tokens":
        return f"{call.phase} cycle {call.cycle}: {mismatch.get('kind', 'no parity')}"
    text = (f"cycle {call.cycle} {call.phase}: request {mismatch['request']} step {mismatch['step']}: "
            f"token {mismatch['engine_token']} instead of {mismatch['reference_token']}")
    if mismatch.get("reference_top2_margin") is not None:
        text += f" (reference top-2 margin {mismatch['reference_top2_margin']:.3g})"
    before = call.parity.extra.get("matches_weights_before_update")
    if before is not None:
        text += "; the tokens of the weights before the sync" if before else "; neither old nor new weights' tokens"
    return text


def cell(result: Result, policy: str) -> HazardCell:
    """The verdict of one graph policy in one update path's run."""
    path = result.metadata.get("training", {}).get("update_path", "in-place")
    variant = variant_name("graph", policy)
    real = real_cycles(result)
    updates = [u for u in result.updates if u.cycle in real and u.extra.get("applied", True)]
    after = [c for c in result.calls if c.variant == variant and c.phase in AFTER and c.cycle in real]
    firsts = [c for c in after if c.phase == "first_after_update"]
    # The run's first update pays the process's first backward (kernels loaded, workspaces made):
    # 5-40x a later one on the H200. Step and sync costs come from the later updates where there are any.
    later = updates[1:] or updates
    failures = [f for f in result.failures if f.variant == variant and f.cycle in real]
    bad = [c for c in after if c.parity is not None and not c.parity.ok]
    unchecked = [c for c in after if c.parity is None]
    references = [f for f in result.failures if f.phase == "reference" and f.cycle in real]
    decisions = [c.extra.get("parameter_check") for c in firsts]
    tested = all((u.extra.get("requests_changed") or 0) > 0 for u in updates)
    detail = ""
    if references or unchecked:
        verdict = "failed"
        detail = references[0].error if references else f"{len(unchecked)} call(s) after a sync without parity"
    elif bad:
        first_bad = bad[0]
        first_of_cycle = next((c for c in firsts if c.cycle == first_bad.cycle), None)
        kept = first_of_cycle is not None and first_of_cycle.extra.get("parameter_check") in KEPT
        verdict, detail = ("STALE" if kept else "WRONG"), _divergence(first_bad)
    elif failures:
        refused = [f for f in failures if "GraphRefused" in f.error]
        verdict = "refused" if refused else "failed"
        detail = (refused or failures)[0].error
    elif not firsts:
        verdict, detail = "failed", "no call after a sync"
    elif all(d == "dropped" for d in decisions):
        verdict = "recaptured"
    elif all(d in KEPT for d in decisions):
        verdict = "kept and valid" if tested else "kept, unproven"
        if not tested:
            detail = "a sync left every request's tokens unchanged, so parity could not tell new weights from old"
    else:
        verdict = "mixed" if tested else "mixed, unproven"
        detail = ", ".join(f"cycle {c.cycle}: {c.extra.get('parameter_check')}" for c in firsts)
    if not result.metadata.get("cuda_graph"):
        verdict += " (no CUDA graph)"
    return HazardCell(
        path, policy, policy in DIAGNOSTIC_POLICIES, verdict,
        len(updates), sum(c.captures for c in firsts), f"{sum(c.parity_ok for c in after)}/{len(after)}",
        _median(u.extra.get("step_ms") for u in later), _median(u.extra.get("sync_ms") for u in later),
        _median(c.total_ms for c in firsts), _median(c.total_ms for c in after if c.phase == "steady_after_update"),
        detail)


def graph_policies(result: Result) -> list[str]:
    return [v.split("[", 1)[1].rstrip("]") for v in result.variants() if v.startswith("graph[")]


def matrix(results: list[Result]) -> list[HazardCell]:
    """Every (update path, graph policy) cell of a hazard sweep, paths in the order run."""
    return [cell(result, policy) for result in results for policy in graph_policies(result)]


def eager_parity(result: Result) -> str:
    """generate() after each sync, against its own reference: a determinism check, reported beside the matrix."""
    real = real_cycles(result)
    calls = [c for c in result.calls if c.engine == "eager" and c.phase in AFTER and c.cycle in real]
    return f"{sum(c.parity_ok for c in calls)}/{len(calls)}"


def problems(cells: list[HazardCell]) -> list[str]:
    """What makes a hazard matrix fail: a real policy (recapture, reuse) that is not right on some path."""
    return [f"{c.path} x {c.policy}: {c.verdict}" + (f" ({c.detail})" if c.detail else "")
            for c in cells if not c.diagnostic and c.kind in WRONG]


def proven_right(cells: list[HazardCell]) -> list[HazardCell]:
    """Real-policy cells whose parity was put to the test: recaptured, or kept while the tokens changed."""
    return [c for c in cells if not c.diagnostic and c.kind in RIGHT]


def demonstrated_stale(cells: list[HazardCell]) -> list[HazardCell]:
    return [c for c in cells if c.verdict.startswith("STALE")]
