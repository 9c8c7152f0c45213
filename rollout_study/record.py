"""The typed result record: one dataclass per thing a run measures, each with `from_dict`/`to_dict`.

STUDY.md fixes the JSON field names; this module is the only writer and the only reader of result
files, so notebooks, reports and outside tools all see the same shape. Fields may be added freely;
renaming one needs a new `SCHEMA_VERSION` (and this module keeps reading the old one). Keys a
reader does not know are kept in `extra` and written back unchanged, so a file survives a round
trip through an older or newer version of the package.

`Samples` owns the statistics of repeated measurements (median, quartiles, IQR, the wide-spread
flag), as `torch.utils.benchmark.Measurement` does: every table and check asks it, none recomputes.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import tempfile
from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 1
LABELS = ("synthetic", "pretrained")
PHASES = ("first", "steady", "first_after_update", "steady_after_update")
PARTS = ("allocation", "warmup", "capture", "prefill", "decode", "other")
WIDE_IQR = 0.10  # an IQR above this fraction of the median is flagged, as torch.utils.benchmark does


class ResultError(ValueError):
    """A result file is not in the schema (missing field, wrong type, unknown phase)."""


class InvalidResult(RuntimeError):
    """The study finished but its result is not valid (parity mismatch, failed phase): a failed run."""


def variant_name(engine: str, policy: str | None) -> str:
    """What tables and figures call one engine with one refresh policy: `eager`, `graph[reuse]`."""
    return engine if policy is None else f"{engine}[{policy}]"


# -- statistics -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Samples:
    """Replicates of one measurement (ms); the one place medians, quartiles and spread are computed."""

    values: tuple[float, ...]

    def __post_init__(self):
        object.__setattr__(self, "values", tuple(float(v) for v in self.values))
        if not self.values:
            raise ValueError("Samples needs at least one value")

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def quartiles(self) -> tuple[float, float]:
        """First and third quartile (inclusive method); one sample is its own quartiles."""
        if self.n < 2:
            return self.values[0], self.values[0]
        q = statistics.quantiles(self.values, n=4, method="inclusive")
        return q[0], q[2]

    @property
    def iqr(self) -> float:
        low, high = self.quartiles
        return high - low

    @property
    def wide(self) -> bool:
        return self.n > 1 and self.iqr > WIDE_IQR * self.median

    @property
    def min(self) -> float:
        return min(self.values)

    @property
    def max(self) -> float:
        return max(self.values)


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
        if not isinstance(parts, dict) or set(parts) != set(PARTS):
            raise ResultError(f"{source}: breakdown has {sorted(parts) if isinstance(parts, dict) else parts!r}, "
                              f"expected {list(PARTS)}")
        if not math.isclose(sum(parts.values()), known["total_ms"], rel_tol=1e-6, abs_tol=1e-6):
            raise ResultError(f"{source}: breakdown sums to {sum(parts.values())}, total is {known['total_ms']}")
        parity = known.get("parity")
        known["parity"] = None if parity is None else Parity.from_dict(parity, f"{source} parity")
        return cls(**known, extra=extra)

    def to_dict(self) -> dict:
        out = _plain(self)
        out["parity"] = None if self.parity is None else self.parity.to_dict()
        return out

    @property
    def parity_ok(self) -> bool:
        return self.parity is not None and self.parity.ok


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
    extra: dict = field(default_factory=dict)

    @property
    def variant(self) -> str:
        return variant_name(self.engine, self.policy)

    @classmethod
    def from_dict(cls, data: dict, source: str = "profile") -> "Profile":
        known, extra = _split(cls, data, source)
        return cls(**known, extra=extra)

    def to_dict(self) -> dict:
        return _plain(self)


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


@dataclass
class Result:
    valid: bool
    metadata: dict
    calls: list[Call]
    updates: list[Update]
    profile: dict[str, Profile]
    failures: list[Failure]
    cold_starts: list[ColdStart] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION
    extra: dict = field(default_factory=dict)

    # -- reading and writing --------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Any, source: str = "result") -> "Result":
        if not isinstance(data, dict):
            raise ResultError(f"{source}: expected a JSON object, got {type(data).__name__}")
        known, extra = _split(cls, data, source)
        if known.get("schema_version") != SCHEMA_VERSION:
            raise ResultError(f"{source}: schema_version {known.get('schema_version')!r} is not {SCHEMA_VERSION}")
        if not isinstance(known["valid"], bool):
            raise ResultError(f"{source}: valid must be true or false, got {known['valid']!r}")
        meta = known["metadata"]
        if not isinstance(meta, dict) or meta.get("label") not in LABELS:
            raise ResultError(f"{source}: metadata.label must be one of {', '.join(LABELS)}")
        for key in ("calls", "updates", "failures"):
            if not isinstance(known[key], list):
                raise ResultError(f"{source}: {key} must be a list, got {type(known[key]).__name__}")
        if not isinstance(known["profile"], dict):
            raise ResultError(f"{source}: profile must be an object, got {type(known['profile']).__name__}")
        known["calls"] = [Call.from_dict(c, f"{source}: call {i}") for i, c in enumerate(known["calls"])]
        known["updates"] = [Update.from_dict(u, f"{source}: update {i}") for i, u in enumerate(known["updates"])]
        known["failures"] = [Failure.from_dict(f, f"{source}: failure {i}") for i, f in enumerate(known["failures"])]
        known["profile"] = {name: Profile.from_dict(p, f"{source}: profile {name}")
                            for name, p in known["profile"].items()}
        known["cold_starts"] = [ColdStart.from_dict(r, f"{source}: cold start {i}")
                                for i, r in enumerate(known.get("cold_starts") or [])]
        return cls(**known, extra=extra)

    def to_dict(self) -> dict:
        out = {"schema_version": self.schema_version, "valid": self.valid, "metadata": self.metadata,
               "calls": [c.to_dict() for c in self.calls], "updates": [u.to_dict() for u in self.updates],
               "profile": {name: p.to_dict() for name, p in self.profile.items()},
               "failures": [f.to_dict() for f in self.failures]}
        if self.cold_starts:
            out["cold_starts"] = [r.to_dict() for r in self.cold_starts]
        return {**out, **self.extra}

    @classmethod
    def read(cls, path: str | os.PathLike) -> "Result":
        with open(path, encoding="utf-8") as handle:
            try:
                data = json.load(handle)
            except json.JSONDecodeError as err:
                raise ResultError(f"{path}: not valid JSON: {err}") from None
        return cls.from_dict(data, str(path))

    def write(self, path: str | os.PathLike) -> str:
        return write_json_atomic(self.to_dict(), path)

    # -- what readers ask -------------------------------------------------------------------
    @property
    def label(self) -> str:
        return self.metadata["label"]

    @property
    def run_name(self) -> str:
        return self.metadata.get("run_name") or "run"

    @property
    def model_name(self) -> str:
        model = self.metadata.get("model") or {}
        return model.get("display_name") or model.get("name") or "-"

    @property
    def cuda_graph(self) -> bool:
        return bool(self.metadata.get("cuda_graph"))

    @property
    def machine(self) -> str:
        hardware = self.metadata.get("hardware") or {}
        return hardware["gpu"] if hardware.get("gpu") else f"CPU: {hardware.get('cpu') or 'unknown'}"

    def variants(self) -> list[str]:
        """Every variant with measured calls, in the engine registry's order."""
        from .engines import variant_rank

        return sorted({c.variant for c in self.calls}, key=variant_rank)

    def phase_groups(self) -> list[tuple[int, str]]:
        """The (cycle, phase) pairs of the run, in run order."""
        return sorted({(c.cycle, c.phase) for c in self.calls}, key=lambda cp: run_order(*cp))

    def calls_of(self, variant: str, cycle: int | None = None, phase: str | tuple[str, ...] | None = None) -> list[Call]:
        phases = (phase,) if isinstance(phase, str) else phase
        return [c for c in self.calls if c.variant == variant and (cycle is None or c.cycle == cycle)
                and (phases is None or c.phase in phases)]

    def samples(self, variant: str, cycle: int | None = None,
                phase: str | tuple[str, ...] | None = None) -> Samples | None:
        calls = self.calls_of(variant, cycle, phase)
        return Samples([c.total_ms for c in calls]) if calls else None

    def cold_start_samples(self, with_initialization: bool = False) -> dict[str, Samples]:
        """Each variant's first-call times over the fresh cold-start processes.

        `with_initialization` adds what that process spent initializing CUDA and the model's
        libraries before the call (which a real first call pays too). Older files ran every variant
        in one process, newer ones one per process; grouping by each call's own variant reads either.
        """
        firsts: dict[str, list[float]] = {}
        for run in self.cold_starts:
            init = (run.startup or {}).get("initialization_ms") if with_initialization else 0.0
            if init is None:
                continue
            for call in run.calls:
                if call.phase == "first":
                    firsts.setdefault(call.variant, []).append(call.total_ms + init)
        return {variant: Samples(values) for variant, values in firsts.items()}

    def unmatched_calls(self) -> list[Call]:
        return [c for c in self.calls if not c.parity_ok]

    def validity_problems(self) -> list[str]:
        """Why this result is not valid, derived from its calls, failures and cold starts; [] when valid.

        The stored `valid` flag is never trusted on its own: a file that says valid beside a failed
        parity check or a failure is reported as a contradiction.
        """
        problems = []
        unmatched = self.unmatched_calls()
        if unmatched:
            problems.append(f"{len(unmatched)} call(s) without parity (first: {unmatched[0].variant} "
                            f"cycle {unmatched[0].cycle} {unmatched[0].phase} #{unmatched[0].index})")
        if self.failures:
            problems.append(f"{len(self.failures)} failure(s) (first: {self.failures[0].variant} "
                            f"{self.failures[0].phase}: {self.failures[0].error})")
        bad_cold = [run for run in self.cold_starts if not run.valid or any(not c.parity_ok for c in run.calls)]
        if bad_cold:
            problems.append(f"{len(bad_cold)} cold-start run(s) invalid")
        if not self.calls:
            problems.append("no measured calls")
        if self.valid and problems:
            problems.insert(0, "the file says valid, but its records contradict it")
        elif not self.valid and not problems:
            problems.append("the file says invalid")
        return problems

    @property
    def is_valid(self) -> bool:
        return not self.validity_problems()


# Run order inside a cycle: cycle 0 runs first and steady; every cycle runs its update, then the
# phases after it. Sorting by (cycle, stage) reproduces that order.
RUN_STAGE = {"first": 0, "steady": 1, "update": 2, "first_after_update": 3, "steady_after_update": 4}


def run_order(cycle: int, phase: str) -> tuple[int, int]:
    return cycle, RUN_STAGE[phase]


# -- files ------------------------------------------------------------------------------------
def write_json_atomic(data: dict, path: str | os.PathLike) -> str:
    """Write JSON to a uniquely named temporary file beside `path`, then rename over it."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1, allow_nan=False, default=_jsonable)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it owner-only; a published result is for everyone to read
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def _jsonable(value):
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")
