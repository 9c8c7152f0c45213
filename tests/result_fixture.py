"""The one factory of test results: a small hand-made result in the result-file schema.

`make_result_dict` gives the JSON form (for tests of reading, forging and old files);
`make_result` gives the typed `Result` every reader takes. Per variant, every sample of a phase
takes the same time (see TIMES): the break-even and timeline figures can be worked out on paper.
"""
from __future__ import annotations

import copy

from rollout_study.result import Result

# target -> phase -> ms of each sample
TIMES = {
    "eager": {"first": 200.0, "steady": 50.0, "first_after_update": 100.0, "steady_after_update": 50.0},
    "graph[recapture]": {"first": 300.0, "steady": 10.0, "first_after_update": 130.0, "steady_after_update": 10.0},
    "graph[reuse]": {"first": 300.0, "steady": 10.0, "first_after_update": 60.0, "steady_after_update": 10.0},
}
UPDATE_MS = (40.0, 20.0)
ITERATIONS = 3
CYCLES = 2
MODELS = {"synthetic": "tiny-llama-fixture", "pretrained": "SmolLM2-135M-Instruct (Q4_1 dequantized)"}


def _split(total_ms: float, first_call: bool, graph: bool) -> dict:
    parts = {"allocation": 0.0, "warmup": 0.0, "capture": 0.0, "prefill": 0.1 * total_ms, "decode": 0.6 * total_ms}
    if first_call and graph:
        parts.update(allocation=0.05 * total_ms, warmup=0.1 * total_ms, capture=0.1 * total_ms)
    parts["other"] = total_ms - sum(parts.values())
    return parts


def make_call(variant: str, cycle: int, phase: str, index: int, total_ms: float, graph_capture: bool) -> dict:
    engine, _, policy = variant.partition("[")
    policy = policy.rstrip("]") or None
    first = phase.startswith("first")
    captures = 2 if graph_capture and policy is not None and (phase == "first" or
                                                              (policy == "recapture" and first)) else 0
    memory = ({"allocated": 100 * 2 ** 20, "reserved": 128 * 2 ** 20, "peak_allocated": 110 * 2 ** 20}
              if graph_capture else {"allocated": None, "reserved": None, "peak_allocated": None})
    return {"engine": engine, "policy": policy, "cycle": cycle, "phase": phase, "index": index, "total_ms": total_ms,
            "breakdown_ms": _split(total_ms, first, policy is not None), "captures": captures, "memory_bytes": memory,
            "generated_tokens": 48, "tokens_per_s": 48 / (total_ms / 1e3), "parameter_check": None,
            "parity": {"ok": True, "tokens": True, "attention_mask": True, "response_offsets": True, "mismatch": None}}


def _phases():
    """(cycle, phase, samples) in run order, without the updates."""
    yield 0, "first", 1
    yield 0, "steady", ITERATIONS
    for cycle in range(CYCLES):
        yield cycle, "first_after_update", 1
        yield cycle, "steady_after_update", ITERATIONS


def make_result_dict(label: str = "synthetic", run_name: str = "fixture", cuda_graph: bool = False) -> dict:
    calls = [make_call(target, cycle, phase, index, TIMES[target][phase], cuda_graph)
             for cycle, phase, samples in _phases() for target in TIMES for index in range(samples)]
    updates = [{"cycle": c, "optimizer": "sgd", "lr": 0.01, "loss": 6.0 - c, "ms": UPDATE_MS[c]} for c in range(CYCLES)]
    cold_starts = [{"process": p, "target": target, "valid": True,
                    "calls": [make_call(target, 0, "first", 0, TIMES[target]["first"] + 10.0 * p, cuda_graph)],
                    "startup": {"process_startup_ms": 1000.0}, "failures": []}
                   for p in range(3) for target in TIMES]
    profile = ({target: {"engine": target.split("[")[0], "policy": target.partition("[")[2].rstrip("]") or None,
                         "cycle": 0, "phase": "steady", "wall_ms": TIMES[target]["steady"] + 1, "kernel_ms": 5.0,
                         "kernels": 1000, "copy_ms": 0.1}
                for target in TIMES} if cuda_graph else {})
    metadata = {
        "label": label, "run_name": run_name,
        "model": {"label": label, "name": MODELS[label], "architecture": "LlamaForCausalLM", "layers": 2,
                  "hidden_size": 128, "heads": 4, "kv_heads": 2, "vocab": 1024, "parameters": 557696},
        "attention_implementation": "sdpa", "device": "cuda" if cuda_graph else "cpu",
        "dtype": "float16" if cuda_graph else "float32", "cuda_graph": cuda_graph,
        "hardware": {"cpu": "Fixture CPU", "cores": 2, "gpu": "NVIDIA H200" if cuda_graph else None, "cuda": None},
        "software": {"python": "3.11", "torch": "2.13"},
        "workload": {"requests": 6, "batch_size": 4, "prompt_len": 16, "max_new_tokens": 8, "iterations": ITERATIONS,
                     "cycles": CYCLES, "seed": 0, "batch_sizes": [4, 2]},
        "training": {"optimizer": "sgd", "lr": 0.01}, "startup": {"process_startup_ms": 1000.0},
        "git": {"commit": "0" * 40, "dirty": False}, "command": "fixture", "time_start": "2026-01-01T00:00:00+00:00",
        "time_end": "2026-01-01T00:01:00+00:00",
    }
    return {"schema_version": 1, "valid": True, "metadata": metadata, "calls": calls, "updates": updates,
            "profile": profile, "failures": [], "cold_starts": cold_starts}


def make_result(label: str = "synthetic", run_name: str = "fixture", cuda_graph: bool = False) -> Result:
    return Result.from_dict(make_result_dict(label, run_name, cuda_graph), "fixture")


def make_invalid_result_dict() -> dict:
    """The fixture with one parity mismatch on graph[recapture]'s first call after the first update."""
    result = copy.deepcopy(make_result_dict(run_name="fixture-invalid"))
    for call in result["calls"]:
        if call["policy"] == "recapture" and call["phase"] == "first_after_update" and call["cycle"] == 0:
            call["parity"] = {"ok": False, "tokens": False, "attention_mask": True, "response_offsets": True,
                              "mismatch": {"kind": "tokens", "request": 1, "step": 3, "engine_token": 17,
                                           "reference_token": 42, "reference_top2_tokens": [42, 17],
                                           "reference_top2_margin": 0.01}}
    result["valid"] = False
    return result


def make_invalid_result() -> Result:
    return Result.from_dict(make_invalid_result_dict(), "fixture")


# -- variations of the fixture dict, for tests that need another timing or another engine ----------
def retime(data: dict, variant: str, phase: str, ms: float, cycle: int | None = None) -> dict:
    """The fixture dict with every call of one variant and phase taking `ms` (its breakdown rescaled)."""
    for call in data["calls"]:
        name = call["engine"] if call["policy"] is None else f"{call['engine']}[{call['policy']}]"
        if name == variant and call["phase"] == phase and (cycle is None or call["cycle"] == cycle):
            scale = ms / call["total_ms"]
            call["breakdown_ms"] = {k: v * scale for k, v in call["breakdown_ms"].items()}
            call["breakdown_ms"]["other"] += ms - sum(call["breakdown_ms"].values())
            call["total_ms"] = ms
    return data


def rename_engine(data: dict, old: str, new: str) -> dict:
    for record in data["calls"] + [c for run in data["cold_starts"] for c in run["calls"]]:
        if record["engine"] == old:
            record["engine"] = new
    data["profile"] = {key.replace(old, new, 1): {**p, "engine": new if p["engine"] == old else p["engine"]}
                       for key, p in data["profile"].items()}
    for run in data["cold_starts"]:
        run["target"] = run["target"].replace(old, new, 1)
    return data


def add_engine(data: dict, like: str, engine: str) -> dict:
    """The fixture dict with one more engine, unknown to the registry, timed like variant `like`."""
    base, _, policy = like.partition("[")
    policy = policy.rstrip("]") or None
    copies = [{**copy.deepcopy(c), "engine": engine} for c in data["calls"]
              if c["engine"] == base and c["policy"] == policy]
    data["calls"] += copies
    return data


# -- the protocol's newer records: control cycles, instrumented calls, all profiles, timing checks --
def _variant(call: dict) -> str:
    return call["engine"] if call["policy"] is None else f"{call['engine']}[{call['policy']}]"


def with_control(data: dict, cycles: int = 1) -> dict:
    """The fixture dict with `cycles` control cycles first (indices 0..cycles-1) and the real ones after.

    A control cycle's update takes no optimizer step; its calls take the times of a real cycle (TIMES),
    so the real cycles' after/before ratios equal the controls' until a test retimes one of them.
    """
    after = [c for c in data["calls"] if c["phase"] in ("first_after_update", "steady_after_update")]
    template = [copy.deepcopy(c) for c in after if c["cycle"] == 0]
    for record in after + data["updates"]:
        record["cycle"] += cycles
    for cycle in range(cycles):
        data["calls"] += [{**copy.deepcopy(c), "cycle": cycle} for c in template]
        data["updates"].append({"cycle": cycle, "optimizer": "sgd", "lr": 0.01, "loss": 6.5, "ms": 15.0,
                                "control": True})
    for update in data["updates"]:
        update.setdefault("control", False)
    data["updates"].sort(key=lambda u: u["cycle"])
    data["metadata"]["training"]["control_cycles"] = cycles
    return data


def set_samples(data: dict, variant: str, cycle: int, phase: str, values: list[float]) -> dict:
    """Give the phase's calls (in index order) these totals, breakdowns rescaled: a spread of samples."""
    calls = sorted([c for c in data["calls"] if _variant(c) == variant and c["cycle"] == cycle
                    and c["phase"] == phase], key=lambda c: c["index"])
    assert len(calls) == len(values), f"{variant} c{cycle} {phase} has {len(calls)} calls"
    for call, ms in zip(calls, values):
        scale = ms / call["total_ms"]
        call["breakdown_ms"] = {k: v * scale for k, v in call["breakdown_ms"].items()}
        call["breakdown_ms"]["other"] += ms - sum(call["breakdown_ms"].values())
        call["total_ms"] = ms
    return data


# The instrumented eager calls of `with_instruments`: untouched median 51, instrumented median 55, cost 4.
INSTRUMENTED = {"engine": "eager", "policy": None, "untouched_ms": [50.0, 52.0, 51.0],
                "instrumented_ms": [55.0, 56.0, 54.0],
                "breakdown_ms": {"allocation": 0.0, "warmup": 0.0, "capture": 0.0, "prefill": 5.0, "decode": 40.0,
                                 "other": 10.0},
                "instrument_cost_ms": 4.0}


def with_instruments(data: dict, flagged: int = 0) -> dict:
    """The records a current run adds: untouched eager calls (all in `other`) with instrumented ones beside
    them, a timing check on every call (the first `flagged` calls flagged), and a profile of every variant
    after the cycle-0 steady phase and after each cycle's steady phase (kernel time 5 ms, wall steady + 1)."""
    for i, call in enumerate(data["calls"]):
        if call["engine"] == "eager":
            call["breakdown_ms"] = {**{k: 0.0 for k in call["breakdown_ms"]}, "other": call["total_ms"]}
        overlap = 0.02 * call["total_ms"] if i < flagged else 0.0
        call["timing_check"] = {"parts_ms": call["total_ms"] - call["breakdown_ms"]["other"] + overlap,
                                "overlap_ms": overlap, "flagged": i < flagged}
        call["parity"]["reference"] = ("repeat of generate() (determinism)" if call["engine"] == "eager"
                                       else "generate() with the same weights")
    data["instrumented_calls"] = [copy.deepcopy(INSTRUMENTED)]
    groups = sorted({(c["cycle"], c["phase"]) for c in data["calls"] if c["phase"] in ("steady", "steady_after_update")
                     and not (c["phase"] == "steady" and c["cycle"] != 0)})
    data["profiles"] = [{"engine": target.split("[")[0], "policy": target.partition("[")[2].rstrip("]") or None,
                         "cycle": cycle, "phase": phase, "wall_ms": TIMES[target]["steady"] + 1, "kernel_ms": 5.0,
                         "kernels": 1000, "copy_ms": 0.1} for cycle, phase in groups for target in TIMES]
    return data


# -- sweep points -----------------------------------------------------------------------------------
PHASES = ("first", "steady", "first_after_update", "steady_after_update")


def sweep_point(batch: int, tokens: int, times: dict, label: str = "synthetic", requests: int | None = None,
                steady_samples: dict | None = None) -> Result:
    """A GPU result of one sweep point (the sweep report's tests); `times`: variant -> (first, steady,
    first after update, steady after)."""
    data = make_result_dict(label=label, cuda_graph=True)
    data["calls"], data["cold_starts"], data["profile"] = [], [], {}
    reserved = 0
    for cycle, phase in ((0, "first"), (0, "steady"), (0, "first_after_update"), (0, "steady_after_update")):
        for variant, ms in times.items():
            values = (steady_samples or {}).get((variant, phase)) or (
                [ms[PHASES.index(phase)]] * (3 if phase.startswith("steady") else 1))
            for index, value in enumerate(values):
                call = make_call(variant, cycle, phase, index, value, True)
                if phase == "first":
                    reserved += 10 * 2 ** 20 * batch
                    call["memory_bytes"] = {"allocated": (50 + batch) * 2 ** 20, "reserved": reserved,
                                            "peak_allocated": (60 + 2 * batch) * 2 ** 20,
                                            "phase_start_allocated": 50 * 2 ** 20}
                data["calls"].append(call)
    data["updates"] = [{"cycle": 0, "optimizer": "sgd", "lr": 0.01, "loss": 1.0, "ms": 20.0}]
    data["metadata"]["workload"].update(batch_size=batch, requests=requests or batch, max_new_tokens=tokens)
    return Result.from_dict(data)


def sweep_entries(results: dict, params: dict | None = None) -> list:
    """(sweep.json entry, result) pairs as the sweep report reads them, all valid; `params`: slug -> the point's
    parameters, for a test that varies one the curves key on."""
    return [({"order": i, "slug": slug, "status": "valid",
              **({"params": params[slug]} if slug in (params or {}) else {})},
             r) for i, (slug, r) in enumerate(results.items())]


def write_sweep_folder(folder, metadata: list[dict]) -> None:
    """A curve sweep's folder as `sweep` leaves it: one valid point per metadata given (each over the point's own)."""
    from rollout_study.files import write_json_atomic

    entries = []
    for order, extra in enumerate(metadata):
        result = sweep_point(order + 1, 16, {"eager": (1, 100.0, 1, 1), "graph[reuse]": (5, 10.0, 1, 1)})
        result.metadata.update(extra)
        result.write(folder / "points" / f"p{order}.json")
        entries.append({"order": order, "slug": f"batch_size={order + 1}", "file": f"points/p{order}.json",
                        "status": "valid", "params": {"batch_size": order + 1}})
    write_json_atomic({"spec": {"name": folder.name, "report": "sweep",
                                "sweep": {"batch_size": [p + 1 for p in range(len(metadata))]}},
                       "points": entries}, folder / "sweep.json")
