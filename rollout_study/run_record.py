"""What a finished run records about itself (protocol.Study.run's last step): the typed `Result` with its metadata,
the workload, training, machine, software and code it ran with, and the profiling process's extras.
"""
from __future__ import annotations

from . import environment
from .result import Result


def result(study, started: str, dtype: str, startup: dict, clocks_at_start: dict | None) -> Result:
    """The run's `Result`: its calls, updates, profiles and failures, and the metadata that says what ran where."""
    params, info = study.params, study.loaded.info
    parity_ok = all(c.parity_ok for c in study.calls if not c.diagnostic)
    cuda_graph = study.device.type == "cuda"
    metadata = {
        "label": info["label"],
        "run_name": params.name,
        "model": info,
        "attention_implementation": params.attn,
        "device": study.device.type,
        "dtype": dtype,
        "cuda_graph": cuda_graph,
        "graph_note": None if cuda_graph else "no CUDA graph: the graph engine ran its static-cache step eagerly",
        "hardware": environment.hardware(study.device),
        "software": environment.software(),
        "workload": {"requests": params.requests, "batch_size": params.batch_size, "prompt_len": params.prompt_len,
                     "prompt_len_requested": study.requested_prompt_len or "auto",
                     "max_new_tokens": params.max_new_tokens, "iterations": params.iterations,
                     "cycles": params.cycles, "seed": params.seed, **study.workload.describe()},
        "training": {"optimizer": params.optimizer, "lr": params.lr,
                     "control_cycles": params.control_cycles, "control_placement": params.control_placement,
                     "turn_order": params.turn_order,
                     **study.trainer.describe(),
                     "loss": "mean negative log-likelihood of the latest rollout's response tokens"},
        "mode": study.mode,
        "threads": environment.threads(),
        "gpu_clocks": {"start": clocks_at_start, "end": environment.gpu_clocks()},
        "host_speed": study.host_speed,
        "engines": [e.describe() for e in study.engines],
        "startup": startup,
        # The rest of the run's wall time (time_start to time_end) went to the measured calls, the
        # profiles and instrumented calls where there were any, and the engines' and trainer's set-up.
        "untimed_ms": dict(study.untimed_ms),
        "old_garbage": study.collector.old_garbage,
        "git": environment.git_commit(),
        "command": study.command,
        "time_start": started,
        "time_end": environment.now(),
        "params": params.to_dict(),
    }
    extra = {}
    if study.profiles:
        extra["profiles"] = [p.to_dict() for p in study.profiles]
    if study.instrumented:
        extra["instrumented_calls"] = study.instrumented
    if study.bandwidth is not None:
        extra["bandwidth"] = study.bandwidth
    if study.tracing is not None:
        extra["tracing"] = study.tracing
    profile = {p.variant: p for p in study.profiles if (p.cycle, p.phase) == (0, "steady")}
    return Result(parity_ok and not study.failures, metadata, study.calls, study.updates, profile,
                  study.failures, extra=extra)
