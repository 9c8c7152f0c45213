"""The engine registry: every engine the study can run, in the order tables and figures show them.

Adding an engine is one new file in this folder (a subclass of `Engine`) plus one line in
`REGISTRY`; parameters, protocol, cold starts, tables, figures and the README tables all read
their engines from here.
"""
from __future__ import annotations

from ..record import variant_name
from .base import Engine, RolloutOutput
from .eager import EagerEngine
from .graph import GraphEngine
from .graph_compiled import GraphCompiledEngine
from .hf_compile import HFCompileEngine
from .hf_continuous import HFContinuousEngine

BASELINE = EagerEngine.name  # Hugging Face generate(): the parity reference, every other engine compared with it
REGISTRY: dict[str, type[Engine]] = {
    EagerEngine.name: EagerEngine,
    GraphEngine.name: GraphEngine,
    GraphCompiledEngine.name: GraphCompiledEngine,
    HFCompileEngine.name: HFCompileEngine,  # opt-in peers: not in the default `engines`
    HFContinuousEngine.name: HFContinuousEngine,
}
FALLBACK_COLORS = ("#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf")

__all__ = ["BASELINE", "Engine", "RolloutOutput", "REGISTRY", "variants", "expand", "variant_rank", "variant_color"]


def _policies_of(engine: type[Engine], policies: tuple[str, ...]) -> list[str | None]:
    return [p for p in policies if p in engine.policies] if engine.policies else [None]


def variants(engine_names, policies: tuple[str, ...]) -> list[tuple[str, str | None]]:
    """(engine, policy) pairs the parameters ask for, in registry order; an engine's policies in the order `policy`
    lists them, which is the order they are built in and take their turns in."""
    ordered = [name for name in REGISTRY if name in engine_names]
    return [(name, policy) for name in ordered for policy in _policies_of(REGISTRY[name], policies)]


def expand(params, loaded, device) -> list[Engine]:
    """The engines of one run, built from the parameters: one per engine and refresh policy."""
    return [REGISTRY[name].build(loaded, device, params, policy) for name, policy in variants(params.engines,
                                                                                              params.policies)]


def _all_variants() -> list[str]:
    return [variant_name(name, policy) for name, engine in REGISTRY.items()
            for policy in (engine.policies or (None,))]


def variant_rank(variant: str) -> tuple:
    """Registry order; variants no registered engine makes (an old file, say) come last, by name."""
    known = _all_variants()
    return (known.index(variant), "") if variant in known else (len(known), variant)


def variant_color(variant: str) -> str:
    engine, _, policy = variant.partition("[")
    policy = policy.rstrip("]") or None
    colors = getattr(REGISTRY.get(engine), "colors", {}) or {}
    if policy in colors:
        return colors[policy]
    return FALLBACK_COLORS[sum(map(ord, variant)) % len(FALLBACK_COLORS)]
