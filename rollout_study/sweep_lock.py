"""One sweep at a time per sweep folder: an exclusive lock held for a whole invocation (points, repeats, report).

Two sweeps into one folder once raced: both ran a point, and one's failure deleted the other's valid result.
The lock is `fcntl.flock` on `.sweep.lock` in the folder, which names its holder (pid, host, start, command)
for the refusal's message. The kernel lets go of a flock when its holder's process ends, however it ends, so a
crash leaves no stale lock: at most the file, which the next sweep takes over (it is also in packs taken while a
sweep runs, resumed on another machine). The file moves with the folder when a run is renamed; it is removed at
the end, is no point (not in points/, not JSON) and is not published (publish.py leaves it out).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

from .param_values import ParameterError

LOCK_FILE = ".sweep.lock"


class SweepLockedError(ParameterError):
    """Another process is sweeping into the folder."""


class Lock:
    """A held lock; `moved(folder)` after its folder was renamed, so the end removes the file where it is."""

    def __init__(self, fd: int, folder: Path):
        self.fd, self.folder = fd, folder

    def moved(self, folder: Path) -> None:
        self.folder = Path(folder)

    def release(self) -> None:
        path = self.folder / LOCK_FILE
        # Removed before it is let go, and only where it is still this lock's file: a sweep that opened it in
        # between finds it gone (_take checks) rather than holding a lock nobody else can see.
        with contextlib.suppress(OSError):
            if _identity(os.stat(path)) == _identity(os.fstat(self.fd)):
                path.unlink()
        _held.pop(_identity(os.fstat(self.fd)), None)
        os.close(self.fd)


_held: dict[tuple[int, int], Lock] = {}  # this process's locks by their file: run_local inside `sweep` is one


def _identity(stat: os.stat_result) -> tuple[int, int]:
    return stat.st_dev, stat.st_ino


@contextlib.contextmanager
def locked(folder: str | os.PathLike):
    """Hold `folder`'s sweep lock (the folder made where it is not there); SweepLockedError, before anything is
    written, where another process holds it. Re-entered by this process's holder, it is the same lock."""
    folder = Path(folder)
    try:
        held = _held.get(_identity(os.stat(folder / LOCK_FILE)))
    except OSError:
        held = None
    if held is not None:
        yield held
        return
    folder.mkdir(parents=True, exist_ok=True)
    lock = _take(folder)
    try:
        yield lock
    finally:
        lock.release()


def _take(folder: Path) -> Lock:
    path = folder / LOCK_FILE
    for _ in range(5):  # its holder removed the file between our open and our flock: take the new one
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise SweepLockedError(
                f"sweep folder {folder} is in use by another sweep ({holder}); allowed: one sweep at a time per "
                f"folder: wait for it to end or stop it. Its lock ({path}) ends with its process, however that "
                "ends") from None
        try:
            same = _identity(os.stat(path)) == _identity(os.fstat(fd))
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)  # a file left by a crash is taken over: the holder is now this process
            os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                     "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                     "command": " ".join(sys.argv)}).encode())
            lock = Lock(fd, folder)
            _held[_identity(os.fstat(fd))] = lock
            return lock
        os.close(fd)
    raise SweepLockedError(f"sweep folder {folder}: its lock ({path}) kept being replaced by other sweeps; "
                           "allowed: one sweep at a time per folder")


def _holder(fd: int) -> str:
    try:
        holder = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError):
        holder = {}
    if not isinstance(holder, dict) or "pid" not in holder:
        return "its holder not recorded yet"
    return (f"pid {holder['pid']} on host {holder.get('host', '?')} since {holder.get('started', '?')}: "
            f"{holder.get('command', '?')}")
