"""Two result files side by side: the same workload? the same tokens, call by call?

    python -m rollout_study compare A/result.json B/result.json
    python -m rollout_study compare SWEEP_A SWEEP_B   (wall times, then the points both finished)

Each measured call records a SHA-256 of its generated tokens, so determinism across runs, machines
or versions can be checked from the files alone. Parameters that do not change what is generated
(name, sampling counts, profiling, cold starts) are left out of "same workload".
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from .params import LATER_PARAMETERS
from .result import Result

# Parameters that change how much is measured, not what is generated.
# Cycles stay in: calls are matched by cycle, and control cycles shift the real updates' numbers.
NOT_WORKLOAD = ("name", "iterations", "cold_starts", "profile", "instrument", "device", "policy", "engines")


@dataclass
class Comparison:
    same_workload: bool
    workload_differences: dict = field(default_factory=dict)  # parameter -> (a, b)
    compared: int = 0  # calls present in both, with token hashes
    matching: int = 0
    first_difference: str | None = None
    threads: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # each file's thread settings (thread_settings)

    @property
    def tokens_match(self) -> bool:
        return self.compared > 0 and self.matching == self.compared

    def text(self) -> str:
        lines = [("same workload" if self.same_workload else "different workloads: " + ", ".join(
            f"{k} {a!r} vs {b!r}" for k, (a, b) in self.workload_differences.items()))]
        if not self.compared:
            lines.append("no calls to compare (no token hashes in one of the files, or no common calls)")
        else:
            lines.append(f"tokens: {self.matching}/{self.compared} common calls match"
                         + ("" if self.tokens_match else f"; first difference: {self.first_difference}"))
        lines += threads_line(self.threads, "the timings differ by that too")
        return "\n".join(lines)


def _workload(result: Result) -> dict:
    # a result from before a parameter existed ran with the value it was added at
    params = {**LATER_PARAMETERS, **(result.metadata.get("params") or {})}
    params["dtype"] = result.metadata.get("dtype")
    params["model"] = (result.metadata.get("model") or {}).get("name")
    params["prompt_len"] = (result.metadata.get("workload") or {}).get("prompt_len")
    return {k: v for k, v in params.items() if k not in NOT_WORKLOAD}


def compare(a: Result, b: Result) -> Comparison:
    wa, wb = _workload(a), _workload(b)
    differences = {k: (wa.get(k), wb.get(k)) for k in sorted(set(wa) | set(wb)) if wa.get(k) != wb.get(k)}
    hashes_b = {(c.variant, c.cycle, c.phase, c.index): c.extra.get("tokens_sha256") for c in b.calls}
    comparison = Comparison(not differences, differences, threads=(thread_settings([a]), thread_settings([b])))
    for call in a.calls:
        key = (call.variant, call.cycle, call.phase, call.index)
        mine, theirs = call.extra.get("tokens_sha256"), hashes_b.get(key)
        if mine is None or theirs is None:
            continue
        comparison.compared += 1
        if mine == theirs:
            comparison.matching += 1
        elif comparison.first_difference is None:
            comparison.first_difference = f"{call.variant} cycle {call.cycle} {call.phase} #{call.index}"
    return comparison


# -- two sweeps ---------------------------------------------------------------------------------
@dataclass
class SweepComparison:
    """Two runs of one sweep (on one GPU and on two, say): their wall times and the ratio."""

    names: tuple[str, str]
    walls: tuple[dict, dict]  # each sweep.json's `wall` block (older files: executor and seconds only)
    same_points: bool  # the same point parameters (hashes), whatever the sweeps are called
    points: tuple[int, int]
    launchers: tuple[str, str] = ("-", "-")  # how each started its points (entries' launcher, else the spec's)
    common: "CommonPoints | None" = None  # the points both finished: tokens and steady medians
    threads: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # each side's thread settings (thread_settings)

    @property
    def ratio(self) -> float | None:
        """A's wall time over B's: how many times longer A took."""
        a, b = (w.get("total_seconds", w.get("seconds")) for w in self.walls)
        return a / b if a and b else None

    @property
    def agrees(self) -> bool:
        """What `compare` exits 0 on: the same points, both wall times, and no point both finished whose tokens
        or recorded workload differ (a ratio over sweeps that measured other things is no comparison)."""
        common = self.common
        return self.same_points and self.ratio is not None and not (
            common is not None and (common.token_differences or common.workload_differences))

    def rows(self) -> list[dict]:
        keys = ("executor", "gpus", "workers", "start", "end")
        return [{"sweep": name, **{key: wall.get(key) for key in keys}, "launcher": launcher,
                 "threads": "; ".join(threads) or None, "invocations": 1 + len(wall.get("earlier", [])),
                 "seconds": wall.get("total_seconds", wall.get("seconds"))}
                for name, wall, launcher, threads in zip(self.names, self.walls, self.launchers, self.threads)]

    def text(self) -> str:
        from .present.text import align, number

        header = ["sweep", "executor", "launcher", "threads", "gpus", "workers", "invocations", "seconds", "start",
                  "end"]
        lines = align(header, [[number(row[k]) if k == "seconds" else str(row[k] if row[k] is not None else "-")
                                for k in header] for row in self.rows()], left=2)
        lines.append("wall time A / B: " + ("-" if self.ratio is None else f"{self.ratio:.2f}x")
                     + ("" if self.same_points else " (not a speed-up: the sweeps ran different points)"))
        lines.append("same points: " + ("yes" if self.same_points else "NO, the sweeps ran different points")
                     + f" ({self.points[0]} and {self.points[1]})")
        if self.launchers[0] != self.launchers[1]:
            lines.append("launchers differ: each point's start-up depends on its launcher, so the ratio is not the "
                         "executors' alone")
        lines += threads_line(self.threads, "the wall times and steady medians B / A carry that too")
        if any(wall.get("earlier") for wall in self.walls):
            lines.append("seconds of a resumed sweep: the sum over its invocations (start and end: the last one's)")
        if self.common is not None:
            lines += self.common.lines()
        return "\n".join(lines)


@dataclass(frozen=True)
class CommonPoints:
    """The points both sweeps finished, matched by parameter hash: their tokens call by call, and every steady
    phase's median in B over A with its bootstrap interval at 95% (repeats.shifts; the repeats' own rule,
    shifts_alone, also asks the shift to exceed how far two runs alone differ).
    The wall time says whether two GPUs paid off; this gives each phase's ratio, and whether it moved where both
    sides have MIN_SHIFT_SAMPLES (the published sweeps' 3 iterations give ratios alone)."""

    compared: tuple[str, ...]  # slugs of the points finished on both sides
    token_differences: tuple[str, ...] = ()  # "slug: first differing call"
    tokens_unchecked: tuple[str, ...] = ()  # slugs with no common call carrying token hashes
    workload_differences: tuple[str, ...] = ()  # "slug: parameter a vs b" (the same hash, other recorded values)
    unfinished: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # listed by both, finished only by A / only by B
    elsewhere: tuple[int, int] = (0, 0)  # points each finished that the other sweep does not list
    shifts: tuple = ()  # repeats.Shift of B against A, every steady phase of every compared point
    one_sided: tuple[str, ...] = ()  # "slug: variant cN phase in A only" (or B only)

    def by_variant(self) -> dict[str, list]:
        out: dict[str, list] = {}
        for shift in self.shifts:
            out.setdefault(shift.variant, []).append(shift)
        return out

    def lines(self) -> list[str]:
        from .present.text import align
        from .repeats import FEW, MIN_SHIFT_SAMPLES, MOVED

        def named(items, shown=3) -> str:
            return "; ".join(items[:shown]) + (f"; and {len(items) - shown} more" if len(items) > shown else "")

        lines = []
        for side, slugs in zip("AB", self.unfinished):
            if slugs:
                lines.append(f"finished by {side} only, though both sweeps list them: {len(slugs)}: {named(slugs)}")
        lines += [f"points finished by {side} that the other sweep does not list: {count}"
                  for side, count in zip("AB", self.elsewhere) if count]
        if not self.compared:
            return lines + ["points finished in both: none, so no tokens or medians to compare"]
        tokens = ("every call matches" if not (self.token_differences or self.tokens_unchecked) else
                  "every call matches where both recorded tokens" if not self.token_differences else
                  f"DIFFER in {len(self.token_differences)}: {named(self.token_differences)}")
        lines.append(f"points finished in both: {len(self.compared)}; tokens: {tokens}")
        if self.tokens_unchecked:
            lines.append(f"tokens not compared (no common call with token hashes): {named(self.tokens_unchecked)}")
        if self.workload_differences:
            lines.append(f"same hash, other recorded workload: {named(self.workload_differences)}")
        if self.one_sided:
            lines.append(f"steady phases measured on one side only: {named(self.one_sided)}")
        if not self.shifts:
            return lines + ["steady medians: no steady phase measured in both"]
        lines.append(f"steady medians B / A over the common points' steady phases (moved: the 95% bootstrap interval "
                     f"excludes 1, read from {MIN_SHIFT_SAMPLES} samples a side or more, each phase on its own; a "
                     "host-bound engine carries the host's pace on each side):")
        rows = []
        for variant, shifts in self.by_variant().items():
            ratios = sorted(s.ratio.point for s in shifts)
            moved = [s for s in shifts if s.verdict == MOVED]
            rows.append([variant, str(len(shifts)), f"{statistics.median(ratios):.3f}", f"{ratios[0]:.3f}",
                         f"{ratios[-1]:.3f}", str(sum(s.ratio.point < 1 for s in moved)),
                         str(sum(s.ratio.point > 1 for s in moved)), str(sum(s.verdict == FEW for s in shifts))])
        header = ["variant", "phases", "median B/A", "lowest", "highest", "moved faster in B", "moved slower in B",
                  "too few samples"]
        return lines + align(header, rows, left=1)


def _steady_phases(result: Result) -> set[tuple[str, int, str]]:
    from .repeats import STEADY_PHASES

    return {(c.variant, c.cycle, c.phase) for c in result.calls if c.phase in STEADY_PHASES and not c.diagnostic}


def common_points(a: list[tuple[dict, Result | None]], b: list[tuple[dict, Result | None]]) -> CommonPoints:
    """a, b: each sweep's (entry, result) pairs, as sweep.load gives them."""
    from .repeats import shifts

    listed, finished = [], []
    for loaded in (a, b):
        points = [(entry, result) for entry, result in loaded if entry.get("hash")]  # no hash: no match
        listed.append({entry["hash"] for entry, _ in points})
        finished.append({entry["hash"]: (entry["slug"], result) for entry, result in points if result is not None})
    found: dict[str, list] = {"compared": [], "differ": [], "unchecked": [], "workload": [], "one_sided": []}
    shifted = []
    for key, (slug, mine) in finished[0].items():
        if key not in finished[1]:
            continue
        theirs = finished[1][key][1]
        found["compared"].append(slug)
        tokens = compare(mine, theirs)
        if not tokens.compared:
            found["unchecked"].append(slug)
        elif not tokens.tokens_match:
            found["differ"].append(f"{slug}: {tokens.first_difference}")
        if not tokens.same_workload:
            found["workload"].append(f"{slug}: " + ", ".join(f"{k} {x!r} vs {y!r}"
                                                             for k, (x, y) in tokens.workload_differences.items()))
        phases_a, phases_b = _steady_phases(mine), _steady_phases(theirs)
        found["one_sided"] += [f"{slug}: {v} c{c} {p} in {side} only"
                               for side, only in (("A", phases_a - phases_b), ("B", phases_b - phases_a))
                               for v, c, p in sorted(only)]
        shifted += shifts(theirs, mine)  # B over A
    unfinished = tuple(tuple(finished[i][k][0] for k in finished[i] if k in listed[1 - i] and k not in finished[1 - i])
                       for i in (0, 1))
    elsewhere = tuple(sum(k not in listed[1 - i] for k in finished[i]) for i in (0, 1))
    return CommonPoints(tuple(found["compared"]), tuple(found["differ"]), tuple(found["unchecked"]),
                        tuple(found["workload"]), unfinished, elsewhere, tuple(shifted), tuple(found["one_sided"]))


def compare_sweeps(a, b) -> SweepComparison:
    """Two sweep folders: wall time (start, end, seconds, executor, GPUs, workers) side by side, and the points
    both finished: the same tokens? the same steady medians?"""
    from pathlib import Path

    from .sweep import load

    (record_a, points_a), (record_b, points_b) = load(a), load(b)  # each sweep.json and point file read once
    records = [record_a, record_b]

    def wall(record):
        return record.get("wall") or {"executor": record.get("executor"), "seconds": record.get("wall_s")}

    def launchers(record):
        # A kept point's entry names no launcher (the record keeps none): the sweep file's, which sets it for every
        # invocation. Before entries and files named theirs, every point ran in a new interpreter: fresh.
        spec = (record.get("spec") or {}).get("launcher") or "fresh"
        used = sorted({p.get("launcher") or spec for p in record.get("points", [])})
        return ", ".join(used) if used else "-"

    hashes = [sorted(p.get("hash") for p in r.get("points", [])) for r in records]
    return SweepComparison(tuple(Path(f).name for f in (a, b)), tuple(wall(r) for r in records),
                           hashes[0] == hashes[1], tuple(len(h) for h in hashes), tuple(launchers(r) for r in records),
                           common_points(points_a, points_b),
                           tuple(thread_settings([r for _, r in points if r is not None])
                                 for points in (points_a, points_b)))


def threads_line(threads: tuple[tuple[str, ...], tuple[str, ...]], carried: str) -> list[str]:
    """The warning where A's and B's thread settings (thread_settings) differ: what the comparison carries."""
    if not (all(threads) and set(threads[0]) != set(threads[1])):
        return []
    return [f"thread settings differ (A: {'; '.join(threads[0])}; B: {'; '.join(threads[1])}): eager generate() and "
            f"the host's work run at their threads' pace, so {carried}"]


def thread_settings(results: list[Result]) -> tuple[str, ...]:
    """The distinct thread settings the results ran with (metadata.threads: torch's threads, OMP_NUM_THREADS,
    MKL_NUM_THREADS, and the process's cores where recorded), in order; none for results that predate them.
    Two sweeps' points on 2 torch threads and on 1 once gave steady medians B / A of 0.04 to 0.07 with no word."""
    seen = []
    for result in results:
        threads = result.metadata.get("threads")
        if not isinstance(threads, dict):
            continue
        text = (f"torch {threads.get('torch_threads', '-')}, OMP {threads.get('OMP_NUM_THREADS') or '-'}, "
                f"MKL {threads.get('MKL_NUM_THREADS') or '-'}"
                + (f", cores {threads['cpu_affinity']}" if threads.get("cpu_affinity") else ""))
        if text not in seen:
            seen.append(text)
    return tuple(seen)
