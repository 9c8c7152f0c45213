"""Points repeated alone: did running side by side move a point's steady medians beyond their spread?

Under the Ray executor a sweep's points share a node (its CPU cores, memory bandwidth, PCIe, the driver)
with other points; a host-bound engine can run slower there than alone. A sweep file's `repeat_alone: N`
picks N of its points, deterministically, and runs each again twice after the sweep, one run at a time with
nothing else of the sweep running, by the sweep's own executor (sweep_ray.py: a Ray task on the node that ran
it, pinned and threaded as its points are; local: a fresh local process), so the runs differ only in what ran
beside them. Their results go to `repeats/`, and `sweep.json` lists them under `repeats`.

Why twice: one run alone against the sweep's run cannot tell a neighbour's effect from run-to-run drift (a
fresh process, the host's speed at the time), and the calls within one run understate that drift. The two
alone runs show it; the rule (`RULE`) asks the side-by-side median to lie beyond both.

The sample is a function of the points alone (their parameter hashes seed the choice), so the same sweep run
on one GPU or two, under any name, repeats the same points. Runs whose threads or cores differ from the
side-by-side run's are not compared (the report says what differed). Records from before the second run
hold one alone run: their comparison is against it alone, and the report says it cannot tell drift apart.
"""
from __future__ import annotations

import hashlib
import json
import math
import random
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from .files import write_json_atomic
from .params import StudyParams
from .record import excerpt
from .result import Result
from .stats import Ratio, Samples, ratio_interval

REPEATS_FOLDER = "repeats"
ALONE_RUNS = 2  # runs alone per sampled point: two show the run-to-run spread a neighbour's effect must exceed
STEADY_PHASES = ("steady", "steady_after_update")
MOVED, WITHIN, FEW = "moved", "within the spread", "too few samples"
FAMILY = 0.05  # the chance, for one point, that some phase's interval excludes 1 by sampling alone (Bonferroni)
# With 3 samples a side a bootstrap interval of the ratio of medians is the samples' range at 95% and above (FAMILY's
# correction does nothing there, and two runs of one distribution read moved 1 time in 10): no verdict below this many,
# here or in `compare`. The published sweeps ran 3 iterations: their repeats and comparisons read so.
MIN_SHIFT_SAMPLES = 6
RULE = ("side by side vs alone: for each variant and steady phase, the ratio of medians (side by side / alone) "
        f"against each of the point's runs alone (a sweep makes {ALONE_RUNS} a point), with bootstrap intervals "
        f"(both sides' samples resampled) at 1 - {FAMILY}/n, n the point's (variant, phase) pairs compared; a phase "
        "moved when every such interval excludes 1 on the same side (the side-by-side median lies beyond every run "
        "alone) and the shift from the nearest run alone exceeds the runs alone's own difference (alone 2 / alone "
        f"1: the run-to-run drift they show); no verdict with fewer than {MIN_SHIFT_SAMPLES} samples a side (a "
        "chosen minimum: from 3, the published sweeps' count, the interval is the samples' whole range at 95% and "
        "above); a point moved when any of its "
        "phases moved; runs alone with other threads or another number of cores than the side-by-side run's are not "
        "compared. Two runs alone show drift only roughly: where each run drifts independently and nothing beside a "
        "point moves it, a phase still reads moved about 1 time in 3 (three normal offsets, simulated), and a point "
        "of k phases up to 1 - (2/3)^k of the time where each phase drifts apart (1 in 3 where one drift moves all "
        "of a run's phases alike), so one point moved is no finding")


# Earlier wordings of RULE that state the same rule (sha256 of the text, as sweep.json keeps it): a record that kept
# one applied this rule. 8764179d: 6744219's, before "whole range" and "a sweep makes 2 a point".
SAME_RULE_SHA256 = frozenset({"8764179d5b045bd6d2e0b83cceb695be180acf68e37d291eaf9e2133e49c3073"})


def same_rule(kept: str) -> bool:
    """True where a record's kept rule is this code's, as worded now or in an earlier wording of the same rule."""
    return kept == RULE or hashlib.sha256(kept.encode()).hexdigest() in SAME_RULE_SHA256


def sample(spec, n: int) -> list[tuple[int, str, StudyParams]]:
    """(order, slug, parameters) of the n points to repeat, in the spec's order."""
    from .sweep import point_hash

    points = spec.points()
    seed = "".join(point_hash(params) for _, params in points)
    chosen = sorted(random.Random(seed).sample(range(len(points)), n))
    return [(order, *points[order]) for order in chosen]


def alone_file(slug: str, digest: str, run: int) -> str:
    """A repeat's result file; the first run's name is the one records before the second run used."""
    from .sweep import point_file

    return point_file(REPEATS_FOLDER, slug, digest + ("" if run == 1 else f"-alone{run}"))


def run(spec, folder: Path, progress: bool = True, launcher=None, runner=None, executor: str = "local") -> dict:
    """Run each sampled point ALONE_RUNS times, one run at a time, by `runner(params, side-by-side entry) ->
    (result, error, wall seconds, placement)` (the executor's: sweep_ray's under Ray; by default a fresh local
    process of the sweep's launcher); returns sweep.json's `repeats` block (also on disk). A repeat whose result
    is already there (resume) is kept as a point's is (sweep.kept_status); a curve sweep's point that failed or
    is invalid side by side is not repeated."""
    from .environment import git_commit, now
    from .launch import sweep_launcher
    from .pipeline import say
    from .sweep import SWEEP_FILE, kept_status, local_runner, point_hash, settle

    kind, launcher = sweep_launcher(spec.launcher, launcher, timeout_s=spec.point_timeout_s)
    runner = runner or local_runner(launcher)
    folder = Path(folder)
    (folder / REPEATS_FOLDER).mkdir(parents=True, exist_ok=True)
    with open(folder / SWEEP_FILE, encoding="utf-8") as handle:
        record = json.load(handle)
    current = git_commit()  # once: the resume check and the code check of every repeat
    began = time.perf_counter()
    earlier = {e["file"]: e for e in (record.get("repeats") or {}).get("points", []) if e.get("file")}
    block = {"rule": RULE, "start": now(), "end": None, "seconds": 0.0, "points": []}
    record["repeats"] = block
    side_by_side = {e.get("order"): e for e in record.get("points", [])}
    for order, slug, params in sample(spec, spec.repeat_alone):
        side = side_by_side.get(order)
        for number in range(1, ALONE_RUNS + 1):
            entry = {"order": order, "run": number, "slug": slug, "hash": point_hash(params),
                     "file": alone_file(slug, point_hash(params), number)}
            start = time.perf_counter()
            if spec.report == "sweep" and not _usable((side or {}).get("status", "")):
                # A curve sweep's failed or invalid point is a finding of its own; alone it has nothing to compare
                entry["status"] = NOT_REPEATED
            elif kept := kept_status(folder, entry["file"], params, current):
                # what ran it stays said: the report's contrast reads the executor of the runs alone
                entry.update({k: v for k, v in earlier.get(entry["file"], {}).items()
                              if k in ("launcher", "executor", "placement")}, status=kept)
            else:
                result, error, wall_s, placement = runner(params, side)
                entry.update(launcher=kind, executor=executor, **({"placement": placement} if placement else {}))
                settle(folder, entry, result, error, current.get("code_sha256"))  # other code refused, as a point's
            entry["wall_s"] = time.perf_counter() - start
            block["points"].append(entry)
            block.update(end=now(), seconds=time.perf_counter() - began)
            write_json_atomic(record, folder / SWEEP_FILE)
            if progress:
                say(f"[repeat alone {order}, run {number}/{ALONE_RUNS}] {slug}: {entry['status']}")
            if entry["status"] == NOT_REPEATED:
                break
    return block


NOT_REPEATED = "not repeated: its side-by-side run failed or is invalid"


def _usable(status: str) -> bool:
    from .sweep import KEPT

    return status in ("valid", KEPT)


def load(folder: Path, record: dict) -> list[tuple[dict, Result | None]]:
    """Each repeat's entry and result (None where it failed or its file is missing)."""
    out = []
    for entry in (record.get("repeats") or {}).get("points", []):
        path = Path(folder) / entry["file"]
        ran = entry.get("status") not in ("failed", NOT_REPEATED) and path.is_file()
        out.append((entry, Result.read(path) if ran else None))
    return out


def problems(record: dict) -> list[str]:
    """Why the repeats make a sweep unpublishable: missing or failed ones, and (hazard sweeps) invalid ones.

    A curve sweep's repeat that lost parity alone is a finding as its points' are (the report says "not
    compared"): kept on resume, it must not block publishing for good."""
    spec = record.get("spec") or {}
    wanted = int(spec.get("repeat_alone") or 0)
    entries = (record.get("repeats") or {}).get("points", [])
    invalid_blocks = spec.get("report") != "sweep"
    out = [f"repeat of point {e['slug']} alone (run {e.get('run', 1)}): {e.get('error') or e['status']}"
           for e in entries
           if e.get("status") == "failed" or (invalid_blocks and e.get("status", "").startswith("invalid"))]
    # Records before the second run alone hold one run per point (no `run` key): one is what they asked for.
    runs = 1 if entries and not any("run" in e for e in entries) else ALONE_RUNS
    done = {}
    for e in entries:
        done[e["order"]] = runs if e.get("status") == NOT_REPEATED else done.get(e["order"], 0) + 1
    short = sum(1 for n in done.values() if n < runs) + max(wanted - len(done), 0)
    if short:
        out.append(f"repeat_alone is {wanted} ({runs} run(s) alone each) but {short} point(s) lack their runs "
                   "(resume the sweep with --into)")
    return out


@dataclass(frozen=True)
class Shift:
    """One variant's steady phase: side by side against alone (the run alone nearest it, where there are more)."""

    variant: str
    cycle: int
    phase: str
    side: Samples
    alone: Samples
    ratio: Ratio  # side by side / alone
    verdict: str
    alones: tuple[Samples, ...] = ()  # every run alone, in run order (repeats)
    run_to_run: Ratio | None = None  # the second run alone over the first


def _phases(side: Result, others: list[Result]):
    """(variant, cycle, phase, side's samples, each other's) for every steady phase of every real variant that
    all of them measured."""
    for variant in side.variants():
        for cycle, phase in side.phase_groups():
            if phase not in STEADY_PHASES or any(c.diagnostic for c in side.calls_of(variant, cycle, phase)):
                continue
            mine, theirs = side.samples(variant, cycle, phase), [o.samples(variant, cycle, phase) for o in others]
            if mine is not None and all(t is not None for t in theirs):
                yield variant, cycle, phase, mine, theirs


def shifts(side: Result, alone: Result) -> list[Shift]:
    """Every steady phase of every real variant that both runs measured, at 95% each (`compare`'s rule), no verdict
    from fewer than MIN_SHIFT_SAMPLES a side."""
    rows = []
    for variant, cycle, phase, a, (b,) in _phases(side, [alone]):
        ratio = ratio_interval(a, b)
        verdict = FEW if min(a.n, b.n) < MIN_SHIFT_SAMPLES else (WITHIN if ratio.contains(1.0) else MOVED)
        rows.append(Shift(variant, cycle, phase, a, b, ratio, verdict))
    return rows


def shifts_alone(side: Result, alones: list[Result]) -> list[Shift]:
    """RULE: each steady phase against every run alone, intervals at 1 - FAMILY / (phases compared)."""
    found = list(_phases(side, alones))
    level = 1 - FAMILY / max(len(found), 1)
    rows = []
    for variant, cycle, phase, mine, theirs in found:
        ratios = [ratio_interval(mine, t, level=level) for t in theirs]
        beyond = all(r.side() == 1 for r in ratios) or all(r.side() == -1 for r in ratios)
        few = min(mine.n, *(t.n for t in theirs)) < MIN_SHIFT_SAMPLES
        nearest = min(range(len(ratios)), key=lambda i: abs(math.log(ratios[i].point)))
        drift = ratio_interval(theirs[1], theirs[0]) if len(theirs) > 1 else None
        # beyond every run alone, and by more than the runs alone differ from each other
        beyond = beyond and (drift is None or abs(math.log(ratios[nearest].point)) > abs(math.log(drift.point)))
        rows.append(Shift(variant, cycle, phase, mine, theirs[nearest], ratios[nearest],
                          FEW if few else (MOVED if beyond else WITHIN), tuple(theirs), drift))
    return rows


def settings_differ(side: Result, alone: Result) -> str:
    """What a run alone ran with that its side-by-side run did not (threads, cores): '' where nothing recorded
    differs. Ray sets OMP_NUM_THREADS=1 in its workers where it is unset; a local process uses every core."""
    from .environment import core_count

    a, b = side.metadata.get("threads") or {}, alone.metadata.get("threads") or {}
    out = [f"{key} {a.get(key)} side by side, {b.get(key)} alone" for key in ("torch_threads", "OMP_NUM_THREADS",
                                                                             "MKL_NUM_THREADS")
           if a.get(key) != b.get(key)]
    cores = core_count(a.get("cpu_affinity")), core_count(b.get("cpu_affinity"))
    if None not in cores and cores[0] != cores[1]:
        out.append(f"{cores[0]} core(s) side by side, {cores[1]} alone")
    return "; ".join(out)


def placement_differs(side: dict | None, alone: dict) -> str:
    """Where a Ray point's slots were laid out otherwise (numa.py) in one run than the other, or its cores were
    beside its GPU in one and not the other: '' where the same or not recorded (a slot held by another sweep on
    the host can send a run to the other node's cores; a sweep resumed across this code's change, to another
    layout)."""
    from .numa import beside_gpu

    mine, theirs = (side or {}).get("placement") or {}, alone.get("placement") or {}

    def layout(placement: dict) -> str | None:  # a slot recorded without one: cut before layouts were recorded
        return placement.get("layout") or ("unrecorded" if placement.get("slot") is not None else None)

    if None not in (layout(mine), layout(theirs)) and layout(mine) != layout(theirs):
        return f"slots laid out {layout(mine)} side by side, {layout(theirs)} alone"
    a, b = beside_gpu(mine), beside_gpu(theirs)
    if None in (a, b) or a == b:
        return ""
    where = {True: "on its GPU's NUMA node", False: "on another NUMA node"}
    return f"cores {where[a]} side by side, {where[b]} alone"


def beside(side: Result, points: list[tuple[dict, Result | None]]) -> int | None:
    """How many other points' runs overlapped this one's in time (their recorded start and end); None where a
    time is missing. Under Ray with one worker, or the local executor, none did: a shift is then run to run."""
    def span(result: Result):
        start, end = result.metadata.get("time_start"), result.metadata.get("time_end")
        return (datetime.fromisoformat(start), datetime.fromisoformat(end)) if start and end else None

    mine = span(side)
    others = [span(r) for _, r in points if r is not None and r is not side]
    if mine is None or any(o is None for o in others):
        return None
    return sum(1 for start, end in others if start < mine[1] and mine[0] < end)


@dataclass(frozen=True)
class Verdict:
    """One repeated point: moved, not moved, or why it could not be compared."""

    slug: str
    verdict: str
    shifts: tuple[Shift, ...]
    why: str = ""
    runs: int = 0  # runs alone compared
    beside: int | None = None  # other points that ran while its side-by-side run did
    model: str = ""  # the side-by-side result's label and model, where it has one

    @property
    def moved(self) -> list[Shift]:
        return [s for s in self.shifts if s.verdict == MOVED]


def verdicts(points: list[tuple[dict, Result | None]], repeated: list[tuple[dict, Result | None]]) -> list[Verdict]:
    """Per repeated point: `moved` (some steady phase beyond the rule), `not moved`, or `not compared`."""
    by_order = {entry["order"]: (entry, result) for entry, result in points}
    runs_of: dict[int, list[tuple[dict, Result | None]]] = {}
    for entry, alone in repeated:
        runs_of.setdefault(entry["order"], []).append((entry, alone))
    out = []
    for order, runs in runs_of.items():
        slug = runs[0][0]["slug"]
        side_entry, side = by_order.get(order, (None, None))
        if runs[0][0].get("status") == NOT_REPEATED:
            out.append(Verdict(slug, "not repeated", (), NOT_REPEATED))
            continue
        missing = [(entry, alone) for entry, alone in runs if alone is None]
        if side is None or missing:
            reason = (side_entry or {}).get("error") if side is None else missing[0][0].get("error")
            which = "side by side" if side is None else f"alone (run {missing[0][0].get('run', 1)})"
            out.append(Verdict(slug, "not compared", (), f"the {which} run has no result"
                               + (f" ({excerpt(reason, 100)})" if reason else "")))
            continue
        alones = [alone for _, alone in runs]
        near, model = beside(side, points), f"{side.label}: {side.model_name}"
        differs = [settings_differ(side, alone) for alone in alones]
        differs += [placement_differs(side_entry, entry) for entry, _ in runs]
        if differ := "; ".join(d for d in differs if d):
            out.append(Verdict(slug, "not compared", (), f"ran with other settings: {differ}", len(alones), near,
                               model))
            continue
        found = tuple(shifts_alone(side, alones))
        if not found:
            verdict, why = "not compared", "no steady phase measured in every run"
        elif any(s.verdict == MOVED for s in found):
            verdict, why = "moved", ""
        elif all(s.verdict == FEW for s in found):
            verdict, why = "not compared", f"fewer than {MIN_SHIFT_SAMPLES} samples a side"
        else:
            verdict, why = "not moved", ""
        out.append(Verdict(slug, verdict, found, why, len(alones), near, model))
    return out
