"""The result file: schema, atomic write, reading back, DataFrame.

STUDY.md fixes the field names; this module is the only writer and the only reader, so that
notebooks, reports and outside tools see the same shape. Fields may be added freely; renaming
one needs a new `SCHEMA_VERSION`.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
from typing import Any

SCHEMA_VERSION = 1
PHASES = ("first", "steady", "first_after_update", "steady_after_update")
BREAKDOWN = ("allocation", "warmup", "capture", "prefill", "decode", "other")
TOP_LEVEL = ("schema_version", "valid", "metadata", "calls", "updates", "profile", "failures")


class ResultError(ValueError):
    pass


def target_label(engine: str, policy: str | None) -> str:
    """What tables and figures call a measured target: `eager`, `graph[recapture]`, `graph[reuse]`."""
    return engine if policy is None else f"{engine}[{policy}]"


def target_of(call: dict) -> str:
    return target_label(call["engine"], call.get("policy"))


def cold_start_firsts(result: dict) -> dict[str, list[float]]:
    """Each target's first-call times over the fresh cold-start processes.

    Older files ran every target in one process, newer ones one target per process; both list
    the first calls, so grouping by each call's own target reads either.
    """
    firsts: dict[str, list[float]] = {}
    for run in result.get("cold_starts") or []:
        for call in run.get("calls") or []:
            if call["phase"] == "first":
                firsts.setdefault(target_of(call), []).append(call["total_ms"])
    return firsts


def write_atomic(result: dict, path: str) -> str:
    """Write JSON to a temporary file beside `path`, then rename: a crash leaves the old file or none."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=1, allow_nan=False, default=_jsonable)
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


def validate(result: dict, source: str = "result") -> dict:
    missing = [key for key in TOP_LEVEL if key not in result]
    if missing:
        raise ResultError(f"{source}: missing field(s) {', '.join(missing)}")
    if result["schema_version"] != SCHEMA_VERSION:
        raise ResultError(f"{source}: schema_version {result['schema_version']} is not {SCHEMA_VERSION}")
    if result["metadata"].get("label") not in ("synthetic", "pretrained"):
        raise ResultError(f"{source}: metadata.label must be synthetic or pretrained")
    for i, call in enumerate(result["calls"]):
        parts = call["breakdown_ms"]
        if set(parts) != set(BREAKDOWN):
            raise ResultError(f"{source}: call {i} breakdown has {sorted(parts)}, expected {list(BREAKDOWN)}")
        if not math.isclose(sum(parts.values()), call["total_ms"], rel_tol=1e-6, abs_tol=1e-6):
            raise ResultError(f"{source}: call {i} breakdown sums to {sum(parts.values())}, total is {call['total_ms']}")
        if call["phase"] not in PHASES:
            raise ResultError(f"{source}: call {i} has unknown phase {call['phase']!r}")
    return result


def read(path: str) -> dict:
    with open(path, encoding="utf-8") as handle:
        return validate(json.load(handle), path)


def calls_frame(result: dict):
    """One row per measured call, nested blocks flattened, metadata label and model name attached."""
    import pandas as pd

    meta = result["metadata"]
    rows = []
    for call in result["calls"]:
        row = {k: v for k, v in call.items() if k not in ("breakdown_ms", "memory_bytes", "parity")}
        row.update({f"{k}_ms": v for k, v in call["breakdown_ms"].items()})
        row.update({f"memory_{k}": v for k, v in call["memory_bytes"].items()})
        parity = call["parity"] or {}
        row.update({"parity_ok": parity.get("ok"), "parity_tokens": parity.get("tokens"),
                    "parity_attention_mask": parity.get("attention_mask"),
                    "parity_response_offsets": parity.get("response_offsets")})
        row["target"] = target_of(call)
        row["label"] = meta["label"]
        row["model"] = meta["model"]["name"]
        row["run"] = meta.get("run_name")
        rows.append(row)
    return pd.DataFrame(rows)


def summary_rows(result: dict) -> list[dict]:
    """Median per (target, cycle, phase), with IQR and a wide-spread flag, as torch.utils.benchmark quotes."""
    groups: dict[tuple, list[dict]] = {}
    for call in result["calls"]:
        groups.setdefault((target_of(call), call["cycle"], call["phase"]), []).append(call)
    rows = []
    for (target, cycle, phase), calls in groups.items():
        totals = [c["total_ms"] for c in calls]
        median = statistics.median(totals)
        q1, q3 = quartiles(totals)
        rows.append({
            "target": target, "cycle": cycle, "phase": phase, "samples": len(calls),
            "median_ms": median, "iqr_ms": q3 - q1, "wide_iqr": (q3 - q1) > 0.1 * median if len(calls) > 1 else False,
            **{f"{k}_ms": statistics.median(c["breakdown_ms"][k] for c in calls) for k in BREAKDOWN},
            "captures": sum(c["captures"] for c in calls),
            "peak_allocated": max((c["memory_bytes"]["peak_allocated"] or 0) for c in calls) or None,
            "reserved": max((c["memory_bytes"]["reserved"] or 0) for c in calls) or None,
            "tokens_per_s": statistics.median(c["tokens_per_s"] for c in calls)
            if all(c["tokens_per_s"] is not None for c in calls) else None,
            "parity_ok": all(c["parity"]["ok"] for c in calls if c["parity"] is not None),
        })
    return rows


def quartiles(values: list[float]) -> tuple[float, float]:
    """First and third quartile (inclusive method); one sample is its own quartiles."""
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def to_jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=_jsonable))
