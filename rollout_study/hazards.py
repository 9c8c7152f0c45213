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

Engines without a refresh policy (hf-compile, hf-continuous) get cells of their own, one column
per engine. Their verdict comes from parity after each sync and from what each first call after
a sync did to its compiled or captured state (its notes' `refresh`), with the compilations and
CUDA-graph recordings of the calls after each sync:

    STALE / WRONG    a call after a sync did not match: STALE where it reproduced the weights before the sync
    recompiled       dynamo compiled again after every sync; parity held
    re-recorded      no compilation, but CUDA graphs recorded again after every sync; parity held
    rebuilt          the engine built its state again after every sync (hf-continuous's manager); parity held
    kept and valid   nothing compiled or recorded again, parity held and was put to the test (", unproven" as above)
    valid            an engine that reports nothing about its state; parity held
    mixed            the syncs did different things; parity held
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from .breakeven import rollouts_cost
from .param_values import DIAGNOSTIC_POLICIES
from .effects import real_cycles
from .record import variant_name
from .result import Result

AFTER = ("first_after_update", "steady_after_update")
KEPT = ("kept", "unchanged")
WRONG = ("STALE", "WRONG", "failed")  # a real policy's cell with one of these fails the matrix
RIGHT = ("recaptured", "kept and valid")  # proven right: parity held and was put to the test
GRAPH = "graph"
# What a peer engine's first call after a sync did (its notes' `refresh`), as its verdict reads.
PEER_REFRESH = {"compiled": "recompiled", "recorded": "re-recorded", "rebuilt": "rebuilt", "kept": "kept and valid"}
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
    engine: str = GRAPH  # a peer engine's cell has its engine's name as `policy` too
    compiles: tuple = ()  # peers: dynamo compilations in the calls after each sync, one entry per sync
    recordings: tuple = ()  # peers: CUDA-graph recordings likewise
    first_calls: int = 0  # timed calls `first_ms` is the median of (one per sync)
    steady_calls: int = 0  # timed calls `steady_ms` is the median of, over every sync

    @property
    def peer(self) -> bool:
        """A cell of an engine without refresh policies (hf-compile, hf-continuous), not of the graph engine."""
        return self.engine != GRAPH

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
    if call.parity is None:
        return f"cycle {call.cycle} {call.phase}: no parity checked"
    text = f"cycle {call.cycle} {call.phase}: {call.parity.describe_mismatch()}"
    before = call.parity.extra.get("matches_weights_before_update")
    if before is not None:
        text += "; the tokens of the weights before the sync" if before else "; neither old nor new weights' tokens"
    return text


@dataclass
class _AfterSyncs:
    """What one variant's run shows after its real syncs: the calls, the failures, the updates."""

    path: str
    updates: list
    after: list
    firsts: list
    failures: list
    bad: list  # calls after a sync whose parity failed
    unchecked: list  # calls after a sync without parity
    references: list  # references that could not be computed
    tested: bool  # every sync changed some request's tokens


def _after_syncs(result: Result, variant: str) -> _AfterSyncs:
    real = real_cycles(result)
    after = [c for c in result.calls if c.variant == variant and c.phase in AFTER and c.cycle in real]
    updates = [u for u in result.updates if u.cycle in real]  # real_cycles leaves out every failed update
    return _AfterSyncs(
        result.metadata.get("training", {}).get("update_path", "in-place"), updates, after,
        [c for c in after if c.phase == "first_after_update"],
        [f for f in result.failures if f.variant == variant and f.cycle in real],
        [c for c in after if c.parity is not None and not c.parity.ok], [c for c in after if c.parity is None],
        [f for f in result.failures if f.phase == "reference" and f.cycle in real],
        all((u.extra.get("requests_changed") or 0) > 0 for u in updates))


def _unchecked_verdict(seen: _AfterSyncs) -> tuple[str, str] | None:
    """'failed' where parity could not be checked after a sync, else None."""
    if seen.references or seen.unchecked:
        return "failed", (seen.references[0].error if seen.references
                          else f"{len(seen.unchecked)} call(s) after a sync without parity")
    return None


def _failure_verdict(seen: _AfterSyncs) -> tuple[str, str] | None:
    if seen.failures:
        refused = [f for f in seen.failures if "GraphRefused" in f.error]
        return ("refused" if refused else "failed"), (refused or seen.failures)[0].error
    if not seen.firsts:
        return "failed", "no call after a sync"
    return None


def _cell(result: Result, seen: _AfterSyncs, policy: str, verdict: str, detail: str, **peer) -> HazardCell:
    # The run's first update pays the process's first backward (kernels loaded, workspaces made):
    # 5-40x a later one on the H200. Step and sync costs come from the later updates where there are any.
    later = seen.updates[1:] or seen.updates
    if not result.metadata.get("cuda_graph"):
        verdict += " (no CUDA graph)"
    firsts = [c.total_ms for c in seen.firsts if c.total_ms is not None]
    steady = [c.total_ms for c in seen.after if c.phase == "steady_after_update" and c.total_ms is not None]
    return HazardCell(
        seen.path, policy, policy in DIAGNOSTIC_POLICIES, verdict, len(seen.updates),
        sum(c.captures for c in seen.firsts), f"{sum(c.parity_ok for c in seen.after)}/{len(seen.after)}",
        _median(u.extra.get("step_ms") for u in later), _median(u.extra.get("sync_ms") for u in later),
        _median(firsts), _median(steady), detail, first_calls=len(firsts), steady_calls=len(steady), **peer)


def cell(result: Result, policy: str) -> HazardCell:
    """The verdict of one graph policy in one update path's run."""
    seen = _after_syncs(result, variant_name(GRAPH, policy))
    decisions = [c.extra.get("parameter_check") for c in seen.firsts]
    detail = ""
    if found := _unchecked_verdict(seen):
        verdict, detail = found
    elif seen.bad:
        first_bad = seen.bad[0]
        first_of_cycle = next((c for c in seen.firsts if c.cycle == first_bad.cycle), None)
        kept = first_of_cycle is not None and first_of_cycle.extra.get("parameter_check") in KEPT
        verdict, detail = ("STALE" if kept else "WRONG"), _divergence(first_bad)
    elif found := _failure_verdict(seen):
        verdict, detail = found
    elif all(d == "dropped" for d in decisions):
        verdict = "recaptured"
    elif all(d in KEPT for d in decisions):
        verdict = "kept and valid" if seen.tested else "kept, unproven"
        if not seen.tested:
            detail = "a sync left every request's tokens unchanged, so parity could not tell new weights from old"
    else:
        verdict = "mixed" if seen.tested else "mixed, unproven"
        detail = ", ".join(f"cycle {c.cycle}: {c.extra.get('parameter_check')}" for c in seen.firsts)
    return _cell(result, seen, policy, verdict, detail)


def _per_sync(seen: _AfterSyncs, key: str) -> tuple:
    """A count from the engine notes, summed over the calls after each sync (None where no call noted it)."""
    cycles = sorted({c.cycle for c in seen.after})
    counts = []
    for cycle in cycles:
        noted = [(c.extra.get("engine_notes") or {}).get(key) for c in seen.after if c.cycle == cycle]
        noted = [n for n in noted if n is not None]
        counts.append(sum(noted) if noted else None)
    return tuple(counts)


def peer_cell(result: Result, engine: str) -> HazardCell:
    """The verdict of an engine without refresh policies in one update path's run (see the module's doc)."""
    seen = _after_syncs(result, engine)
    refreshes = [(c.extra.get("engine_notes") or {}).get("refresh") for c in seen.firsts]
    detail = ""
    if found := _unchecked_verdict(seen):
        verdict, detail = found
    elif seen.bad:
        before = seen.bad[0].parity.extra.get("matches_weights_before_update")
        verdict, detail = ("STALE" if before else "WRONG"), _divergence(seen.bad[0])
    elif found := _failure_verdict(seen):
        verdict, detail = found
    elif None in refreshes:
        verdict = "valid" if seen.tested else "valid, unproven"
    elif len(set(refreshes)) == 1 and refreshes[0] in PEER_REFRESH:
        verdict = PEER_REFRESH[refreshes[0]]
        if refreshes[0] == "kept" and not seen.tested:
            verdict = "kept, unproven"
            detail = "a sync left every request's tokens unchanged, so parity could not tell new weights from old"
    else:
        verdict = "mixed" if seen.tested else "mixed, unproven"
        detail = ", ".join(f"cycle {c.cycle}: {r}" for c, r in zip(seen.firsts, refreshes))
    return _cell(result, seen, engine, verdict, detail, engine=engine,
                 compiles=_per_sync(seen, "dynamo_compiles"), recordings=_per_sync(seen, "cudagraph_recordings"))


def graph_policies(result: Result) -> list[str]:
    return [v.split("[", 1)[1].rstrip("]") for v in result.variants() if v.startswith("graph[")]


def peer_engines(result: Result) -> list[str]:
    """Engines without refresh policies that ran beside the graph engine, except the eager baseline."""
    return [v for v in result.variants() if "[" not in v and v != "eager"]


def matrix(results: list[Result]) -> list[HazardCell]:
    """Every (update path, graph policy) cell of a hazard sweep, then the peer engines' cells, paths in the order
    run."""
    return [c for result in results
            for c in [cell(result, p) for p in graph_policies(result)]
                     + [peer_cell(result, e) for e in peer_engines(result)]]


def eager_parity(result: Result) -> str:
    """generate() after each sync, against its own reference: a determinism check, reported beside the matrix."""
    real = real_cycles(result)
    calls = [c for c in result.calls if c.engine == "eager" and c.phase in AFTER and c.cycle in real]
    return f"{sum(c.parity_ok for c in calls)}/{len(calls)}"


def problems(cells: list[HazardCell]) -> list[str]:
    """What makes a hazard matrix fail: a real policy (recapture, reuse) that is not right on some path.

    Peer engines' cells are findings about those engines; a parity failure of theirs already makes
    its point's run invalid."""
    return [f"{c.path} x {c.policy}: {c.verdict}" + (f" ({c.detail})" if c.detail else "")
            for c in cells if not c.diagnostic and not c.peer and c.kind in WRONG]


def proven_right(cells: list[HazardCell]) -> list[HazardCell]:
    """Real-policy cells whose parity was put to the test: recaptured, or kept while the tokens changed."""
    return [c for c in cells if not c.diagnostic and not c.peer and c.kind in RIGHT]


def demonstrated_stale(cells: list[HazardCell]) -> list[HazardCell]:
    return [c for c in cells if c.verdict.startswith("STALE") and not c.peer]
