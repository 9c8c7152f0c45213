"""Points repeated alone: did running side by side move a point's steady medians?

Under the Ray executor a sweep's points share a host (its CPU cores, memory bandwidth, PCIe, the
driver) with other points; a host-bound engine can run slower there than alone. A sweep file's
`repeat_alone: N` picks N of its points, deterministically, and runs each again after the sweep,
one at a time, in a fresh local process with nothing else of the sweep running. Their results go to
`repeats/`, and `sweep.json` lists them under `repeats`, beside this step's own wall time.

The sample is a function of the points alone (their parameter hashes seed the choice), so the same
sweep run on one GPU or two, under any name, repeats the same points.

The rule (`RULE`): for every variant and steady phase the two runs share, the ratio of medians
side by side / alone gets its 95% bootstrap interval (stats.py, both sides resampled). The phase
moved when that interval excludes 1; with fewer than `MIN_SAMPLES` samples on a side there is no
verdict. A point moved when any of its phases moved. Run with the local executor the same
comparison reads run-to-run reproducibility instead, and the report says which executor ran.
"""
from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path

from .effects import MIN_SAMPLES
from .files import write_json_atomic
from .params import StudyParams
from .record import excerpt
from .result import Result
from .stats import Ratio, Samples, ratio_interval

REPEATS_FOLDER = "repeats"
STEADY_PHASES = ("steady", "steady_after_update")
MOVED, WITHIN, FEW = "moved", "within the spread", "too few samples"
RULE = ("side by side vs alone: for each variant and steady phase, the ratio of medians (side by side / alone) "
        "with its 95% bootstrap interval (both sides' samples resampled); a phase moved when the interval "
        f"excludes 1 (no verdict with fewer than {MIN_SAMPLES} samples a side); a point moved when any of "
        "its steady phases moved")


def sample(spec, n: int) -> list[tuple[int, str, StudyParams]]:
    """(order, slug, parameters) of the n points to repeat, in the spec's order."""
    from .sweep import point_hash

    points = spec.points()
    seed = "".join(point_hash(params) for _, params in points)
    chosen = sorted(random.Random(seed).sample(range(len(points)), n))
    return [(order, *points[order]) for order in chosen]


def run(spec, folder: Path, progress: bool = True, launcher=None) -> dict:
    """Run the sampled points one at a time, each alone in a fresh local process; returns sweep.json's
    `repeats` block (also on disk). A repeat whose result is already there (resume) is kept as a point's is
    (sweep.kept_status); a curve sweep's point that failed or is invalid side by side is not repeated."""
    from .environment import now
    from .launch import sweep_launcher
    from .pipeline import say
    from .sweep import SWEEP_FILE, kept_status, point_hash, settle

    kind, launcher = sweep_launcher(spec.launcher, launcher)
    folder = Path(folder)
    (folder / REPEATS_FOLDER).mkdir(parents=True, exist_ok=True)
    with open(folder / SWEEP_FILE, encoding="utf-8") as handle:
        record = json.load(handle)
    began = time.perf_counter()
    block = {"rule": RULE, "start": now(), "end": None, "seconds": 0.0, "points": []}
    record["repeats"] = block
    side_by_side = {e.get("order"): e.get("status", "") for e in record.get("points", [])}
    for order, slug, params in sample(spec, spec.repeat_alone):
        entry = {"order": order, "slug": slug, "hash": point_hash(params),
                 "file": f"{REPEATS_FOLDER}/{slug}-{point_hash(params)}.json"}
        start = time.perf_counter()
        if spec.report == "sweep" and not _usable(side_by_side.get(order, "")):
            # A curve sweep's failed or invalid point is a finding of its own; alone it has nothing to compare
            entry["status"] = NOT_REPEATED
        elif kept := kept_status(folder, entry["file"], params):
            entry["status"] = kept
        else:
            entry["launcher"] = kind
            try:
                settle(folder, entry, launcher(params))
            except Exception as err:  # recorded; the other repeats and the report go on
                settle(folder, entry, error=err)
        entry["wall_s"] = time.perf_counter() - start
        block["points"].append(entry)
        block.update(end=now(), seconds=time.perf_counter() - began)
        write_json_atomic(record, folder / SWEEP_FILE)
        if progress:
            say(f"[repeat alone {len(block['points'])}/{spec.repeat_alone}] {slug}: {entry['status']}")
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
    out = [f"repeat of point {e['slug']} alone: {e.get('error') or e['status']}" for e in entries
           if e.get("status") == "failed" or (invalid_blocks and e.get("status", "").startswith("invalid"))]
    if len(entries) < wanted:
        out.append(f"repeat_alone is {wanted} but {len(entries)} repeat(s) ran (resume the sweep with --into)")
    return out


@dataclass(frozen=True)
class Shift:
    """One variant's steady phase: side by side against alone."""

    variant: str
    cycle: int
    phase: str
    side: Samples
    alone: Samples
    ratio: Ratio  # side by side / alone
    verdict: str


def shifts(side: Result, alone: Result) -> list[Shift]:
    """Every steady phase of every real variant that both runs measured."""
    rows = []
    for variant in side.variants():
        for cycle, phase in side.phase_groups():
            if phase not in STEADY_PHASES or any(c.diagnostic for c in side.calls_of(variant, cycle, phase)):
                continue
            a, b = side.samples(variant, cycle, phase), alone.samples(variant, cycle, phase)
            if a is None or b is None:
                continue
            ratio = ratio_interval(a, b)
            verdict = FEW if min(a.n, b.n) < MIN_SAMPLES else (WITHIN if ratio.contains(1.0) else MOVED)
            rows.append(Shift(variant, cycle, phase, a, b, ratio, verdict))
    return rows


@dataclass(frozen=True)
class Verdict:
    """One repeated point: moved, not moved, or why it could not be compared."""

    slug: str
    verdict: str
    shifts: tuple[Shift, ...]
    why: str = ""

    @property
    def moved(self) -> list[Shift]:
        return [s for s in self.shifts if s.verdict == MOVED]


def verdicts(points: list[tuple[dict, Result | None]], repeated: list[tuple[dict, Result | None]]) -> list[Verdict]:
    """Per repeated point: `moved` (some steady phase beyond the rule), `not moved`, or `not compared`."""
    by_order = {entry["order"]: (entry, result) for entry, result in points}
    out = []
    for entry, alone in repeated:
        side_entry, side = by_order.get(entry["order"], (None, None))
        if entry.get("status") == NOT_REPEATED:
            out.append(Verdict(entry["slug"], "not repeated", (), NOT_REPEATED))
            continue
        if side is None or alone is None:
            failed = "side by side" if side is None else "alone"
            reason = (side_entry or {}).get("error") if side is None else entry.get("error")
            out.append(Verdict(entry["slug"], "not compared", (), f"the {failed} run has no result"
                               + (f" ({excerpt(reason, 100)})" if reason else "")))
            continue
        found = tuple(shifts(side, alone))
        if not found:
            out.append(Verdict(entry["slug"], "not compared", (), "no steady phase measured in both runs"))
        elif any(s.verdict == MOVED for s in found):
            out.append(Verdict(entry["slug"], "moved", found))
        elif all(s.verdict == FEW for s in found):
            out.append(Verdict(entry["slug"], "not compared", found, f"fewer than {MIN_SAMPLES} samples a side"))
        else:
            out.append(Verdict(entry["slug"], "not moved", found))
    return out
