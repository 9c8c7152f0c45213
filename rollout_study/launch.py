"""Launchers: where a study runs. In this process, or in a fresh one that reports back a `Result`.

A fresh process is `python -m rollout_study.launch`: it reads `{"params": {...}, "mode": ...}` on
standard input (a protocol mode, or "study": the whole study of a sweep point), runs it and
writes the result JSON to its standard output (anything the run itself prints goes to standard
error). The study uses it for cold starts (one fresh process per variant and repeat, so each first
call pays what a real first call pays, alone), sweeps (one process per point) and
profiling (a process of its own, so the profiler never shares a process with a measured call).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from .engines import variants
from .param_values import DIAGNOSTIC_POLICIES
from .params import StudyParams
from .record import ColdStart, Failure, excerpt, variant_name
from .result import Result


STUDY_MODE = "study"
# How a sweep starts its points (a sweep file's `launcher:`): a new interpreter each, or a child of the
# fork server that imported the study once (forkserver.py); either way a fresh process per point.
LAUNCHERS = ("fresh", "fork-server")


class LaunchError(RuntimeError):
    """A fresh process ended without a result."""


def fresh_process(params: StudyParams, mode: str = "measure", timeout: float | None = None) -> Result:
    """Run the protocol in a new interpreter; its result comes back typed, its errors as LaunchError.

    Past `timeout` seconds it is killed with every process it started (cold starts, profiling, compile workers):
    with a timeout it leads a process group of its own. Without one it stays in its caller's group, so a point's
    timeout reaches the cold-start processes its study starts this way."""
    request = json.dumps({"params": params.to_dict(), "mode": mode})
    env = {**os.environ, "TEARDOWN_CUPTI": "1"}
    own_group = timeout is not None
    with subprocess.Popen([sys.executable, "-m", "rollout_study.launch"], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                          preexec_fn=die_with_parent, process_group=0 if own_group else None) as child:
        try:
            stdout, stderr = child.communicate(request, timeout=timeout)
        except subprocess.TimeoutExpired as err:
            kill_group(child.pid)
            child.wait()
            raise LaunchError(f"fresh process timed out after {timeout:.10g} s and was killed with the processes "
                              f"it started: {excerpt(_text(err.stderr) or _text(err.output))}") from None
        except BaseException:  # interrupted: nothing it started may run on beside the next point
            if own_group:
                kill_group(child.pid)
            child.kill()
            raise
    if child.returncode != 0 or not stdout.strip():
        raise LaunchError(f"fresh process exited {child.returncode}: {excerpt(stderr or stdout)}")
    return Result.from_dict(json.loads(stdout), "fresh process")


def _text(output: bytes | str | None) -> str:
    """A timed-out process's output so far: bytes, whatever the process's text mode (subprocess)."""
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def kill_group(pid: int) -> None:
    """SIGKILL the process group `pid` leads (its members share the id after the leader is gone)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # all gone already (or the group never formed)
        pass


def point_launcher(kind: str = "fresh", timeout_s: float | None = None):
    """`launcher(params) -> Result`: one sweep point's whole study in a fresh process of the kind asked, killed
    with what it started after `timeout_s` seconds (a sweep file's point_timeout_s; None: no limit)."""
    if kind not in LAUNCHERS:
        raise ValueError(f"launcher must be one of {', '.join(LAUNCHERS)}, got {kind!r}")
    limit = {} if timeout_s is None else {"timeout": timeout_s}  # so a stand-in fresh_process(params, mode) fits
    if kind == "fork-server":
        from .forkserver import run_forked

        return lambda params: run_forked(params, STUDY_MODE, **limit)
    return lambda params: fresh_process(params, mode=STUDY_MODE, **limit)


def sweep_launcher(kind: str, given=None, timeout_s: float | None = None):
    """(name, launcher) a sweep's points run by: `given` (a test's function, named "given", run as it is), else
    the sweep file's `kind` with its `timeout_s`; the name goes into each point's entry in sweep.json."""
    return ("given", given) if given is not None else (kind, point_launcher(kind, timeout_s))


def die_with_parent() -> None:
    """In a child (before exec, or a fork server's child): ask Linux to end it when its parent dies, so none
    is orphaned."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: subprocess.run still kills the child when the parent is interrupted


def cold_starts(params: StudyParams, processes: int, progress: bool = False) -> list[ColdStart]:
    """Repeat each variant's first call alone in fresh processes.

    In one process the variants share lazily loaded CUDA modules and library handles, so the
    second graph engine's first call looks cheaper than it is alone. A fresh process per variant
    and repeat gives first-call figures a spread and removes that order effect.
    """
    runs = []
    for process in range(processes):
        for engine, policy in variants(params.engines, params.policies):
            if policy in DIAGNOSTIC_POLICIES:
                continue  # they show a hazard; their first calls are not a cost anyone pays
            variant = variant_name(engine, policy)
            alone = StudyParams.from_dict({**params.to_dict(), "cold_starts": 0, "engines": [engine],
                                           "policy": policy or params.policy}, source=f"cold start {variant}")
            try:
                child = fresh_process(alone, mode="first_only")
            except LaunchError as err:
                runs.append(ColdStart(process, variant, False, error=str(err)))
                continue
            runs.append(ColdStart(process, variant, child.valid, child.calls, child.metadata.get("startup"),
                                  child.failures))
            if progress:
                first = runs[-1].first_ms
                print(f"cold start {process + 1}/{processes}: {variant} "
                      f"{first if first is not None else float('nan'):.1f} ms", file=sys.stderr)
    return runs


def run_study(params: StudyParams, progress: bool = False, command: str | None = None) -> Result:
    """The whole study: the measured protocol in this process, then profiling and cold starts in fresh ones."""
    from .protocol import run_in_process

    result = run_in_process(params, progress, command)
    if params.profile and result.metadata["device"] == "cuda":
        try:
            profiled = fresh_process(params, mode="profile")
            result.profile = profiled.profile
            result.extra["profiles"] = profiled.extra.get("profiles", [])
            for measured in ("bandwidth", "tracing"):  # the profiling process's own measurements
                if measured in profiled.extra:
                    result.extra[measured] = profiled.extra[measured]
            result.failures += [f for f in profiled.failures if f.phase.startswith("profile")]
        except LaunchError as err:
            result.failures.append(Failure(None, None, None, "profile", str(err)))
        result.valid = result.valid and not result.failures
    if params.cold_starts:
        result.cold_starts = cold_starts(params, params.cold_starts, progress)
        result.valid = result.valid and all(run.valid for run in result.cold_starts)
    return result


def run_request(request: dict, command: str) -> Result:
    """What a fresh process runs: `{"params": {...}, "mode": ...}`, "study" being the whole study of one
    sweep point (with its own profiling and cold-start processes)."""
    from .protocol import run_in_process

    params = StudyParams.from_dict(request["params"], source="launcher")
    mode = request.get("mode", "measure")
    if mode == STUDY_MODE:
        return run_study(params, progress=False, command=command)
    return run_in_process(params, progress=False, command=command, mode=mode)


def worker() -> int:
    """The fresh process's side: parameters on stdin, result JSON on stdout."""
    request = json.loads(sys.stdin.read())
    out = sys.stdout
    sys.stdout = sys.stderr  # the result is the only thing on the real stdout
    try:
        result = run_request(request, "fresh process (rollout_study.launch)")
    finally:
        sys.stdout = out
    json.dump(result.to_dict(), out, allow_nan=False)
    out.flush()
    return 0


def main() -> None:
    code = worker()
    # The result is out and flushed; the interpreter's teardown can only lose it. Once (a tiny point at batch 64
    # on the H200, 2026-12-01) a CUDA memory pool's destructor aborted the process at exit, after the result
    # was written, and the point was recorded as failed, its measurements lost. So the process ends here.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
