"""The fork-server launcher: each sweep point still runs in a fresh process, forked from a server that
has imported the study once.

A new interpreter per point spends seconds before its study starts: on the H200 (2026-12-02) the tiny
model's first 26 points took 11-19 s each to start (interpreter, torch and transformers imports, CUDA
set-up), 375 of the 940 s they took in all. The server is Python's multiprocessing fork server: it
imports torch, transformers' Llama and the package once (`_server_imports`), and each point is a child
forked from it, a new process with its own CUDA context, caching allocator and compile caches, as a new
interpreter has; only the imports are done already.

The server must never set up CUDA: a process forked after that cannot use it. It imports only, with
PYTORCH_NVML_BASED_CUDA_CHECK set so that torch.cuda.is_available(), which an import may call, asks NVML
and not the CUDA driver. Each child takes the caller's environment (without that variable, unless the
caller has it) and cores before its study starts, and stops with an error if torch says its CUDA state
came from the server. Its output goes to a file whose head and tail a failure quotes, as a new
interpreter's does.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import tempfile

from .launch import LaunchError, die_with_parent, run_request
from .params import StudyParams
from .record import excerpt
from .result import Result

COMMAND = "fresh process (fork server)"
_context = None


def _server():
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        # Imported once by the server when the first child is asked for (a failed import is skipped there
        # by multiprocessing: the child then imports what it needs itself, slower but the same).
        _context.set_forkserver_preload(["rollout_study._server_imports"])
    return _context


def run_forked(params: StudyParams, mode: str, timeout: float | None = None) -> Result:
    """Run the protocol in a child of the fork server; its result comes back typed, its errors as LaunchError."""
    context = _server()
    receive, send = context.Pipe(duplex=False)
    with tempfile.NamedTemporaryFile("w+", prefix="rollout-study-point-", suffix=".log", delete=False) as log:
        path = log.name
    try:
        # The caller's environment and cores, as a new interpreter would inherit them: the server's are those of
        # its own start, and a Ray task's (CUDA_VISIBLE_DEVICES, its share of the cores) are set per task.
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        child = context.Process(target=_child, args=({"params": params.to_dict(), "mode": mode}, send, path,
                                                     dict(os.environ), cores))
        child.start()
        send.close()  # the child holds the only writing end: EOF once it is gone, whatever ended it
        payload = None
        if receive.poll(timeout):
            try:
                payload = receive.recv_bytes()
            except EOFError:
                pass
        child.join(None if payload is not None or timeout is None else 5)
        if child.is_alive():
            child.kill()
            child.join()
        receive.close()
        with open(path, encoding="utf-8", errors="replace") as handle:
            output = handle.read()
    finally:
        os.unlink(path)
    if child.exitcode != 0 or payload is None:
        raise LaunchError(f"fork-server child exited {child.exitcode}: {excerpt(output)}")
    return Result.from_dict(json.loads(payload), "fork-server child")


def _child(request: dict, send, log_path: str, environ: dict, cores: list[int] | None) -> None:
    """The child's side: its output to the log, the study, the result JSON through the pipe, then out."""
    code = 1
    try:
        with open(log_path, "w", encoding="utf-8") as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
        die_with_parent()
        # Before CUDA is set up here: the caller's variables (not the server's NVML switch), cores
        os.environ.clear()
        os.environ.update(environ, TEARDOWN_CUPTI="1")
        if cores:
            os.sched_setaffinity(0, cores)
        import torch

        if torch.cuda._is_in_bad_fork():
            raise LaunchError("the fork server set up CUDA before forking this child; run the sweep with "
                              "launcher: fresh")
        result = run_request(request, COMMAND)
        send.send_bytes(json.dumps(result.to_dict(), allow_nan=False).encode())
        code = 0
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        # As the new interpreter does (launch.main): the result is out, and teardown could only lose it
        os._exit(code)
