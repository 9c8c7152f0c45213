"""The resume rule of a sweep (sweep.py): which results already in its folder a run into it keeps rather than
measuring their points again. Its callers import it from sweep.py, which re-exports it."""
from __future__ import annotations

import sys
from pathlib import Path

from .param_values import ParameterError
from .params import StudyParams
from .record import ResultError
from .result import Result

KEPT = "kept from an earlier run"


def was_kept(entry: dict) -> bool:
    """Whether a point's entry in sweep.json was kept from an earlier run (valid or not: kept_status) rather than
    run by this invocation."""
    return str(entry.get("status", "")).endswith(KEPT)


def kept_status(folder: Path, file: str, params: StudyParams, current: dict | None = None) -> str | None:
    """The status of a point (or repeat) kept on resume, saying whether its result is valid; None where it runs.

    A result of this point from the same code on the same kind of device is kept, valid or not.

    An invalid one too where parity alone failed: the same code measuring again gives a lost parity (a
    near-tie, say) another draw, and running a point until it passes would pick the results. A point that
    failed (no result), or whose result records a failure (out of memory in a phase), runs again.

    On a GPU, the same model of GPU where nvidia-smi names this host's (else the device type alone; MIG
    slices of one card model are not told apart; under Ray, the head's GPUs are the host's).
    The same code: the same fingerprint of the code that measures (environment.code_fingerprint: the
    package and the study notebook, less what only presents), so edits elsewhere between the sessions
    of a long sweep keep it; for a result that predates the fingerprint, the same commit, clean then
    and now. And the same torch and Transformers.
    `current`: this process's `git_commit()`, when the caller took it once for many points."""
    from .environment import git_commit, gpu_names, package_version

    try:
        result = Result.read(folder / file)
    except (OSError, ResultError, ValueError):  # not there, or unreadable (a name too long): it runs
        return None
    current, recorded = current or git_commit(), result.metadata.get("git") or {}
    if recorded.get("code_sha256") and current.get("code_sha256"):
        same_code = recorded["code_sha256"] == current["code_sha256"]
    else:
        same_code = recorded.get("commit") == current.get("commit") and recorded.get("dirty") is False \
            and current.get("dirty") is False
    versions = result.metadata.get("software") or {}
    same_code = same_code and all(versions.get(name) == package_version(name) for name in ("torch", "transformers"))
    try:
        device = params.resolved_device()
    except ParameterError:  # asks for CUDA where this process has none (a CPU-only Ray head): run it again
        return None
    if not (kept_on_resume(result) and same_code and result.metadata.get("device") == device):
        return None
    recorded_gpu = (result.metadata.get("hardware") or {}).get("gpu")
    here = gpu_names() if device == "cuda" else None
    if recorded_gpu and here and _card(recorded_gpu) not in {_card(name) for name in here}:
        print(f"{file}: measured on {recorded_gpu}, this host has {', '.join(here)}: runs again", file=sys.stderr)
        return None
    return KEPT if result.is_valid else f"invalid, {KEPT}"


def kept_on_resume(result: Result) -> bool:
    """Whether a resume keeps this result, by what it records (its code, torch and Transformers, device and GPU
    checked apart): valid, or invalid for parity alone. A failure the study caught (out of memory in a phase, say)
    may pass on another try, as a failed process's may: run again."""
    return result.is_valid or (not result.failures and all(run.valid for run in result.cold_starts))


def _card(name: str) -> str:
    """A GPU's model: CUDA names a MIG slice after its card ("... MIG 1g.18gb"), nvidia-smi the card."""
    return name.split(" MIG ", 1)[0].strip()
