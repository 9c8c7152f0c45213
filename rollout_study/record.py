"""The typed records of a run: one dataclass per thing a run measures, each with `from_dict`/`to_dict`.

STUDY.md fixes the JSON field names; these records and the `Result` that holds them (result.py)
are the only writer and the only reader of result files, so notebooks, reports and outside tools
all see the same shape. Fields may be added freely;
renaming one needs a new `SCHEMA_VERSION` (and this module keeps reading the old one). Keys a
reader does not know are kept in `extra` and written back unchanged, so a file survives a round
trip through an older or newer version of the package.

Repeated measurements come back as `Samples` (stats.py), which own their statistics.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from .param_values import DIAGNOSTIC_POLICIES


SCHEMA_VERSION = 1
LABELS = ("synthetic", "pretrained")
PHASES = ("first", "steady", "first_after_update", "steady_after_update")
PARTS = ("allocation", "warmup", "compile", "capture", "prefill", "decode", "other")
# Files written before torch.compile engines existed have no compile part: it was zero there.
PARTS_ADDED_LATER = ("compile",)


def excerpt(text: str, each: int = 1500) -> str:
    """The first and the last `each` characters of a failure's text (a failed process's output, say): the
    error's own message is often at the start, and the tail of a native abort is its stack frames alone."""
    if len(text) <= 2 * each:
        return text
    return f"{text[:each]}\n[... {len(text) - 2 * each} characters left out ...]\n{text[-each:]}"


class ResultError(ValueError):
    """A result file is not in the schema (missing field, wrong type, unknown phase)."""


class InvalidResult(RuntimeError):
    """The study finished but its result is not valid (parity mismatch, failed phase): a failed run."""


def variant_name(engine: str, policy: str | None) -> str:
    """What tables and figures call one engine with one refresh policy: `eager`, `graph[reuse]`."""
    return engine if policy is None else f"{engine}[{policy}]"


# -- records ----------------------------------------------------------------------------------
def _split(cls, data: dict, source: str) -> tuple[dict, dict]:
    """Known fields of `cls` and the rest (kept in `extra`); a missing required field is an error."""
    if not isinstance(data, dict):
        raise ResultError(f"{source}: expected an object, got {type(data).__name__}")
    names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
    required = {f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    missing = sorted(required - set(data))
    if missing:
        raise ResultError(f"{source}: missing field(s) {', '.join(missing)}")
    return {k: v for k, v in data.items() if k in names}, {k: v for k, v in data.items() if k not in names}


def _plain(record, skip: tuple[str, ...] = ()) -> dict:
    out = {f.name: getattr(record, f.name) for f in dataclasses.fields(record) if f.name not in ("extra",) + skip}
    return {**out, **record.extra}


@dataclass
class Parity:
    ok: bool
    tokens: bool
    attention_mask: bool
    response_offsets: bool
    mismatch: dict | None = None
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict, source: str = "parity") -> "Parity":
        known, extra = _split(cls, data, source)
        for key in ("ok", "tokens", "attention_mask", "response_offsets"):
            if not isinstance(known[key], bool):
                raise ResultError(f"{source}: {key} must be true or false, got {known[key]!r}")
        return cls(**known, extra=extra)

    def to_dict(self) -> dict:
        return _plain(self)

    def describe_mismatch(self) -> str:
        """The first difference from generate(), in words; a token's carries the reference's top-2 margin, which
        tells a near-tie flipped by the last bit of FP arithmetic (margin near zero) from an engine's error."""
        m = self.mismatch or {}
        kind = m.get("kind")
        if kind == "tokens":
            text = (f"request {m.get('request')} step {m.get('step')}: "
                    f"token {m.get('engine_token')} instead of {m.get('reference_token')}")
            if m.get("reference_top2_margin") is not None:
                text += f" (reference top-2 margin {m['reference_top2_margin']:.3g})"
            return text
        if kind == "response_offset":
            if m.get("engine") == m.get("reference"):  # the offset is right, what stands before it is not
                return f"request {m.get('request')}: the prompt before its response (at {m.get('engine')}) differs"
            return f"request {m.get('request')}: response at {m.get('engine')} instead of {m.get('reference')}"
        if kind == "attention_mask":
            return f"request {m.get('request')}: attention mask differs at position {m.get('position')}"
        if kind == "batches":
            return f"{m.get('engine')} batch(es) instead of generate()'s {m.get('reference')}"
        return kind or "no mismatch recorded"


@dataclass
class Call:
    engine: str
    policy: str | None
    cycle: int
    phase: str
    index: int
    total_ms: float
    breakdown_ms: dict
    captures: int
    memory_bytes: dict
    generated_tokens: int
    tokens_per_s: float | None
    parity: Parity | None = None
    extra: dict = field(default_factory=dict)

    @property
    def variant(self) -> str:
        return variant_name(self.engine, self.policy)

    @classmethod
    def from_dict(cls, data: dict, source: str = "call") -> "Call":
        known, extra = _split(cls, data, source)
        if known["phase"] not in PHASES:
            raise ResultError(f"{source}: unknown phase {known['phase']!r}; phases: {', '.join(PHASES)}")
        parts = known["breakdown_ms"]
        filled = tuple(set(PARTS) - set(parts)) if isinstance(parts, dict) else ()
        if filled and set(filled) <= set(PARTS_ADDED_LATER) and set(parts) <= set(PARTS):
            parts = known["breakdown_ms"] = {part: parts.get(part, 0.0) for part in PARTS}
        if not isinstance(parts, dict) or set(parts) != set(PARTS):
            raise ResultError(f"{source}: breakdown has {sorted(parts) if isinstance(parts, dict) else parts!r}, "
                              f"expected {list(PARTS)}")
        if not math.isclose(sum(parts.values()), known["total_ms"], rel_tol=1e-6, abs_tol=1e-6):
            raise ResultError(f"{source}: breakdown sums to {sum(parts.values())}, total is {known['total_ms']}")
        parity = known.get("parity")
        known["parity"] = None if parity is None else Parity.from_dict(parity, f"{source} parity")
        call = cls(**known, extra=extra)
        call._filled_parts = filled
        return call

    def to_dict(self) -> dict:
        out = _plain(self)
        out["parity"] = None if self.parity is None else self.parity.to_dict()
        # An old file is written back as it was read: a part it never had stays out while still zero.
        for part in getattr(self, "_filled_parts", ()):
            if out["breakdown_ms"].get(part) == 0.0:
                out["breakdown_ms"] = {k: v for k, v in out["breakdown_ms"].items() if k != part}
        return out

    @property
    def parity_ok(self) -> bool:
        return self.parity is not None and self.parity.ok

    @property
    def diagnostic(self) -> bool:
        """A call of a diagnostic policy (version-only, unchecked): its parity failures are the finding
        of a hazard study (STALE), never a failure of the run."""
        return self.policy in DIAGNOSTIC_POLICIES


@dataclass
class Update:
    cycle: int
    optimizer: str
    lr: float
    loss: float | None
    ms: float | None
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict, source: str = "update") -> "Update":
        known, extra = _split(cls, data, source)
        return cls(**known, extra=extra)

    def to_dict(self) -> dict:
        return _plain(self)


@dataclass
class Profile:
    """One profiled call of a variant, outside the measured samples."""

    engine: str
    policy: str | None
    wall_ms: float
    kernel_ms: float
    kernels: int
    cycle: int = 0
    phase: str = "steady"
    copy_ms: float | None = None
    # the kernels with the most summed time: {"name", "ms", "count"}, most first (none in older results)
    top_kernels: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    @property
    def variant(self) -> str:
        return variant_name(self.engine, self.policy)

    @classmethod
    def from_dict(cls, data: dict, source: str = "profile") -> "Profile":
        known, extra = _split(cls, data, source)
        top = known.get("top_kernels", [])
        if not isinstance(top, list) or not all(isinstance(k, dict) and {"name", "ms", "count"} <= set(k) for k in top):
            raise ResultError(f"{source}: top_kernels must be a list of {{name, ms, count}} objects")
        return cls(**known, extra=extra)

    def to_dict(self) -> dict:
        # An empty list (a CPU profile) is left out, as results from before kernels were kept have none:
        # those files are written back as they were read.
        return _plain(self, skip=() if self.top_kernels else ("top_kernels",))


@dataclass
class Failure:
    """A phase (or an update, or a profiled call) that could not run, with the error."""

    engine: str | None
    policy: str | None
    cycle: int | None
    phase: str
    error: str
    extra: dict = field(default_factory=dict)

    @property
    def variant(self) -> str:
        return variant_name(self.engine, self.policy) if self.engine else "-"

    @classmethod
    def from_dict(cls, data: dict, source: str = "failure") -> "Failure":
        known, extra = _split(cls, data, source)
        return cls(**known, extra=extra)

    def to_dict(self) -> dict:
        return _plain(self)


@dataclass
class ColdStart:
    """One variant's first call alone in a fresh process (the JSON key `target` is kept for old readers)."""

    process: int
    variant: str
    valid: bool
    calls: list[Call] = field(default_factory=list)
    startup: dict | None = None
    failures: list[Failure] = field(default_factory=list)
    error: str | None = None
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict, source: str = "cold start") -> "ColdStart":
        if not isinstance(data, dict):
            raise ResultError(f"{source}: expected an object, got {type(data).__name__}")
        data = dict(data)
        if "target" in data:
            data["variant"] = data.pop("target")
        known, extra = _split(cls, data, source)
        if not isinstance(known["valid"], bool):
            raise ResultError(f"{source}: valid must be true or false, got {known['valid']!r}")
        known["calls"] = [Call.from_dict(c, f"{source} call {i}") for i, c in enumerate(known.get("calls") or [])]
        known["failures"] = [Failure.from_dict(f, f"{source} failure {i}")
                             for i, f in enumerate(known.get("failures") or [])]
        return cls(**known, extra=extra)

    def to_dict(self) -> dict:
        out = {"process": self.process, "target": self.variant, "valid": self.valid,
               "calls": [c.to_dict() for c in self.calls], "startup": self.startup,
               "failures": [f.to_dict() for f in self.failures]}
        if self.error is not None:
            out["error"] = self.error
        return {**out, **self.extra}

    @property
    def first_ms(self) -> float | None:
        firsts = [c.total_ms for c in self.calls if c.phase == "first"]
        return firsts[0] if firsts else None


# Run order inside a cycle: cycle 0 runs first and steady; every cycle runs its update, then the
# phases after it. Sorting by (cycle, stage) reproduces that order.
RUN_STAGE = {"first": 0, "steady": 1, "update": 2, "first_after_update": 3, "steady_after_update": 4}


def run_order(cycle: int, phase: str) -> tuple[int, int]:
    return cycle, RUN_STAGE[phase]
