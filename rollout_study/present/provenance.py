"""What code, software and machine a set of results ran on, in one line a report can carry; and one result's code
(commit, clean or dirty tree, fingerprint) in the words the index and a run's Metadata table both use.

A result names its commit (with uncommitted changes, where git said so) and the fingerprint of the code
that measures; a sweep's points may name several commits of one fingerprint (a long sweep's sessions each
name their own HEAD while running the same pinned measuring code). Without this line a sweep or hazard
report said only "on NVIDIA H200", and a reader could not tell which code to check out to reproduce it.
"""
from __future__ import annotations

from collections import Counter

from ..result import Result


def _commit(git: dict) -> str:
    return f"commit {str(git['commit'])[:10]}" if git.get("commit") else "commit not recorded"


def commit_text(git: dict | None) -> str:
    """'commit 69e5e9e50e (with uncommitted changes)': the commit a result names, as it names it; where nobody could
    tell the tree's state, that too (a bare commit would read as clean)."""
    git = git or {}
    if not isinstance(git.get("dirty"), bool) and git.get("commit"):  # unknown, or a state as written
        return f"{_commit(git)}, {tree_text(git)}"
    return _commit(git) + (" (with uncommitted changes)" if git.get("dirty") is True else "")


# git.dirty as recorded: True or False where `git status` was asked; None where nobody could tell, as on a lent
# machine whose commit is named by ROLLOUT_STUDY_COMMIT (its .git may be stale, so it is not asked at all).
TREE = {True: "dirty", False: "clean", None: "unknown"}


def tree_text(git: dict | None) -> str:
    """'tree unknown (source: ROLLOUT_STUDY_COMMIT)': clean, dirty or unknown, and who said so. Results from before
    the source was recorded name none: said, not guessed."""
    git = git or {}
    dirty = git.get("dirty")
    state = TREE[dirty] if isinstance(dirty, bool) or dirty is None else repr(dirty)  # anything else, as written
    return f"tree {state} (source: {git.get('source') or 'not recorded'})"


def code_text(git: dict | None) -> str:
    """One result's code, the same words wherever it is shown (the index, a run's Metadata table):
    'commit 014be1bc8c, tree unknown (source: ROLLOUT_STUDY_COMMIT), fingerprint 8af489cf0d'."""
    git = git or {}
    return f"{_commit(git)}, {tree_text(git)}, fingerprint {fingerprint_text(git)}"


def fingerprint_text(git: dict | None) -> str:
    """The first 10 hex digits of the fingerprint of the code that measures (results since it was recorded)."""
    git = git or {}
    return str(git["code_sha256"])[:10] if git.get("code_sha256") else "not recorded"


def _counted(values: list[str], noun: str) -> str:
    """Each distinct value once, with how many results hold it where they differ."""
    counts = Counter(values)
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{value} ({n} {noun})" for value, n in counts.items())


def _machine(hardware: dict) -> str:
    """The GPU (or CPU) and, where recorded, the boot's digest: one lent machine's results from another's."""
    boot = f", boot {hardware['boot']}" if hardware.get("boot") else ""
    if hardware.get("gpu"):
        return f"{hardware['gpu']} (driver {hardware.get('driver')}, CUDA {hardware.get('cuda')}{boot})"
    return f"CPU: {hardware.get('cpu') or 'unknown'}{boot}"


def code_lines(results: list[Result], noun: str = "point(s)") -> list[str]:
    """code_text of each result, each distinct one once; where they differ, with how many results name it (a
    sweep resumed over sessions names several commits). Every row of the index says its code through this."""
    if not results:
        return ["no result to read it from"]
    counts = Counter(code_text(r.metadata.get("git")) for r in results)
    if len(counts) == 1:
        return list(counts)
    return [f"{text}: {n} of {len(results)} {noun}" for text, n in counts.items()]


def provenance_line(results: list[Result], noun: str = "point(s)") -> str:
    """Code (fingerprints, then commits), software and machine of `results`, each distinct value once."""
    metas = [r.metadata for r in results]
    if not metas:
        return "code, software and machine: no result to read them from"
    gits = [m.get("git") or {} for m in metas]
    prints = [fingerprint_text(g) for g in gits]
    soft = [m.get("software") or {} for m in metas]
    hard = [m.get("hardware") or {} for m in metas]
    software = [f"torch {s.get('torch_build') or s.get('torch')}, transformers {s.get('transformers')}, "
                f"Python {s.get('python')}" for s in soft]
    machine = [_machine(h) for h in hard]
    return (f"code: fingerprint {_counted(prints, noun)} (of the code that measures); "
            f"{_counted([commit_text(g) for g in gits], noun)}; software: {_counted(software, noun)}; "
            f"machine: {_counted(machine, noun)}")
