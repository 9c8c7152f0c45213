"""The fork-server launcher: each sweep point still runs in a fresh process, forked from a server that
has imported the study once.

A new interpreter per point spends seconds before its study starts: on the H200 (2026-12-02) the tiny
model's first 26 points took 11-19 s each to start (interpreter, torch and transformers imports, CUDA
set-up), 375 of the 940 s they took in all. The server is Python's multiprocessing fork server: it
imports torch, transformers' Llama and the package once (`_server_imports`), and each point is a child
forked from it, a new process with its own CUDA context, caching allocator and compile caches, as a new
interpreter has; only the imports are done already.

What a child shares with its server besides the imports: the values of the variables read at import
(`READ_AT_IMPORT`; a child whose caller has other values stops with an error) and the hash seed. The
server must never set up CUDA: a process forked after that cannot use it. It imports only, with
PYTORCH_NVML_BASED_CUDA_CHECK set so that torch.cuda.is_available(), which an import may call, asks NVML
and not the CUDA driver. Each child takes the caller's environment (without that variable, unless the
caller has it, and with those the imports set) and cores before its study starts, and stops with an error
where torch says its CUDA state came from the server, or where CUDA, there for the caller, is not there
for it. Its output goes to a file whose head and tail a failure quotes, as a new interpreter's does; it
ends when its caller ends. A script that calls it guards its main code (`if __name__ == "__main__"`), as
multiprocessing asks: the child imports the caller's main module.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import select
import signal
import tempfile
import threading
from multiprocessing import forkserver

from .launch import LaunchError, die_with_parent, kill_group, run_request
from .params import StudyParams
from .record import excerpt
from .result import Result

COMMAND = "fresh process (fork server)"
_context = None


# Variables read once, when the server imports torch, transformers or huggingface_hub (OpenMP's thread count
# among them): a child whose caller has other values than the server had at its start would run with the
# server's, so it stops instead.
READ_AT_IMPORT = ("TORCH", "PYTORCH", "HF_", "TRANSFORMERS", "HUGGINGFACE", "XDG_CACHE_HOME", "PYTHONHASHSEED", "MKL_",
                  "OMP_", "KMP_", "GOMP_", "OPENBLAS_")
SERVER_OWN = ("PYTORCH_NVML_BASED_CUDA_CHECK",)  # _server_imports.py's


def _server():
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        # Imported once by the server when the first child is asked for. multiprocessing skips an ImportError
        # there (the child then imports what it needs itself, slower but the same); any other error ends the
        # server, and every point then fails with it.
        _context.set_forkserver_preload(["rollout_study._server_imports"])
    return _context


def run_forked(params: StudyParams, mode: str, timeout: float | None = None) -> Result:
    """Run the protocol in a child of the fork server; its result comes back typed, its errors as LaunchError
    (the child killed where it outlives `timeout` seconds, or where this call ends any other way). With a
    timeout the child leads a process group of its own, killed whole: what it started too (launch.fresh_process)."""
    import torch

    from .environment import allowed_cores

    context = _server()
    receive, send = context.Pipe(duplex=False)
    # The child's lifeline: this end is held here only, so the child sees EOF once this call is over or this
    # process is gone, however either ended (its parent is the server, which outlives this process a while).
    lifeline, holder = context.Pipe(duplex=False)
    with tempfile.NamedTemporaryFile("w+", prefix="rollout-study-point-", suffix=".log", delete=False) as log:
        path = log.name
    child, payload, own_group, timed_out = None, None, timeout is not None, False
    try:
        # What a new interpreter would inherit: the caller's environment and cores (the server's are those of
        # its own start; a Ray task's CUDA_VISIBLE_DEVICES and share of the cores are set per task), and
        # whether CUDA is there, which the child checks (a driver set up in the server would hide it).
        caller = {"environ": dict(os.environ), "cores": allowed_cores(), "cuda": torch.cuda.is_available(),
                  "own_group": own_group}
        child = context.Process(target=_child, args=({"params": params.to_dict(), "mode": mode}, send, lifeline,
                                                     path, caller))
        child.start()
        send.close()  # the child holds the only writing end: EOF once it is gone, whatever ended it
        lifeline.close()
        if receive.poll(timeout):  # data, or EOF: the child is ending; else the time is up, and it is killed
            try:
                payload = receive.recv_bytes()
            except EOFError:
                pass
            child.join(60)
        else:
            timed_out = True
    finally:
        holder.close()  # a child still running (or forked after an interrupted start) ends itself on this
        if child is not None and child.is_alive():
            if own_group:  # before its leader goes; a child killed before it made the group has started nothing
                kill_group(child.pid)
            child.kill()
            child.join()
        for end in (send, receive, lifeline):
            end.close()
        with open(path, encoding="utf-8", errors="replace") as handle:
            output = handle.read()
        os.unlink(path)
    if timed_out:
        raise LaunchError(f"fork-server child timed out after {timeout:.10g} s and was killed with the processes "
                          f"it started: {excerpt(output)}")
    if child.exitcode != 0 or payload is None:
        raise LaunchError(f"fork-server child exited {child.exitcode}: {excerpt(output)}")
    return Result.from_dict(json.loads(payload), "fork-server child")


def _end_with(lifeline) -> None:
    """End this process once its caller lets go of the lifeline (run_forked is over, or the caller is gone):
    a study left running after its sweep was stopped would share the GPU with the next one's points."""
    def watch():
        select.select([lifeline], [], [])  # readable at EOF; no wake-ups before
        os.kill(os.getpid(), signal.SIGKILL)  # no handler of any library can hold it up

    threading.Thread(target=watch, name="end-with-caller", daemon=True).start()


def _differs_from_server(environ: dict, started_with: dict, now: dict) -> list[str]:
    """Variables read at import whose caller's value is neither the one the server started with nor the one
    its imports set (the caller's own imports may have set it the same way since)."""
    keys = {k for k in (*environ, *started_with) if k.startswith(READ_AT_IMPORT) and k not in SERVER_OWN}
    return sorted(k for k in keys if environ.get(k) != started_with.get(k)
                  and not (now.get(k) != started_with.get(k) and environ.get(k) == now.get(k)))


def _child(request: dict, send, lifeline, log_path: str, caller: dict) -> None:
    """The child's side: its output to the log, the study, the result JSON through the pipe, then out."""
    code = 1
    try:
        if caller.get("own_group"):  # first: whatever it starts is in the group its caller's timeout kills
            os.setpgid(0, 0)
        with open(log_path, "w", encoding="utf-8") as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
        _end_with(lifeline)
        die_with_parent()
        # multiprocessing hands each child the caller's end of the pipe whose closing tells the server its caller
        # is gone: held here, it would keep the server alive after the caller died
        alive = getattr(forkserver._forkserver, "_forkserver_alive_fd", None)
        if alive is not None:
            os.close(alive)
            forkserver._forkserver._forkserver_alive_fd = None
        from . import _server_imports as server  # imported by the server (or now, where its preload failed)

        stale = _differs_from_server(caller["environ"], server.STARTED_WITH, dict(os.environ))
        if stale:
            values = "; ".join(f"{k}: {caller['environ'].get(k)!r} here, {server.STARTED_WITH.get(k)!r} there"
                               for k in stale)
            raise LaunchError(f"the caller's {', '.join(stale)} differ from the fork server's, which read them at "
                              f"import ({values}); run the sweep with launcher: fresh, or start it with these values")
        # Before CUDA is set up here: the caller's variables, and those the server's imports set where the caller
        # left them as the server started (a new interpreter's imports would set them the same), and cores
        environ = dict(caller["environ"])
        environ.update({k: v for k, v in os.environ.items() if k not in SERVER_OWN and server.STARTED_WITH.get(k) != v
                        and caller["environ"].get(k) == server.STARTED_WITH.get(k)})
        environ["TEARDOWN_CUPTI"] = "1"
        os.environ.clear()
        os.environ.update(environ)
        if caller["cores"]:
            os.sched_setaffinity(0, caller["cores"])
        import torch

        if torch.cuda._is_in_bad_fork() or (caller["cuda"] and not torch.cuda.is_available()):
            raise LaunchError("CUDA is not usable in this child of the fork server (the server set it up before "
                              "forking, or its driver did); run the sweep with launcher: fresh")
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
