"""Where a sweep's speed-up falls under `CROSSOVER` (sweep_curves.py), per variant and new-token count.

    crossover   the smallest batch with a valid point whose speed-up is under CROSSOVER, or none in the valid
                points' range; where a larger batch's is not under it, every larger batch's speed-up is listed too
                (point estimates, as the crossing's): the speed-up need not fall steadily with the batch. Where
                the speed-up's 95% interval at the crossing includes CROSSOVER, the text gives it: the crossing is
                then the point estimate's alone (from 3 samples a side the interval is the samples' whole range: the
                text says so).
                Before the crossing (at every batch, where none is under), a batch at or over CROSSOVER whose
                interval includes it is named too, with its interval: not under it by the point estimate alone, so
                "none in range" or "first under at batch 8" does not hide a point the samples cannot place on either
                side. Batches after the crossing are listed by the point estimate; the sweep's speed-up table gives
                every point's interval
"""
from __future__ import annotations

from dataclasses import dataclass

from .engines import variant_rank
from .stats import Ratio
from .sweep_curves import CROSSOVER, Point, SpeedUp, speedups


@dataclass(frozen=True)
class Crossover:
    variant: str
    new_tokens: int
    batch: int | None  # the smallest valid point's batch under CROSSOVER; None: none in the valid points' range
    # the speed-up there with its interval, as the speed-up rows hold it (None where there is no crossing)
    ratio: Ratio | None
    before: tuple[int, float] | None  # the batch swept just before it and its speed-up (None: the first)
    swept: tuple[int, ...]
    # every larger batch and its speed-up, where one of them is not under CROSSOVER (else empty): the speed-up
    # need not fall steadily with the batch
    later: tuple[tuple[int, float], ...] = ()
    # the batches before the crossing (every batch, where none is under) at or over CROSSOVER by the point estimate
    # whose 95% interval includes it, each with its speed-up
    over_by_point_alone: tuple[tuple[int, Ratio], ...] = ()

    @property
    def speedup(self) -> float | None:
        return self.ratio.point if self.ratio is not None else None

    @property
    def interval_includes_threshold(self) -> bool:
        """The interval at the crossing includes CROSSOVER: under it by the point estimate alone."""
        return self.ratio is not None and self.ratio.contains(CROSSOVER)

    @property
    def speed_text(self) -> str:
        """The speed-up at the crossing, with its interval where that includes CROSSOVER (3 decimals then: a point
        just under the threshold may round to its interval's bound)."""
        if not self.interval_includes_threshold:
            return f"{self.speedup:.2f}x"
        return _with_interval(self.ratio)

    @property
    def text(self) -> str:
        if self.batch is None:
            return f"none in the valid points' range ({_batches(self.swept)})" + self._over_by_point_alone
        if self.before is None:
            return _already_under(self.batch, [self.speed_text]) + self._later
        return (f"batch {self.batch} ({self.speed_text}; {self.before[1]:.2f}x at batch {self.before[0]})"
                + self._over_by_point_alone + self._later)

    @property
    def _over_by_point_alone(self) -> str:
        if not self.over_by_point_alone:
            return ""
        each = _words([f"{b} ({_with_interval(r)})" for b, r in self.over_by_point_alone])
        return f", at or over {CROSSOVER}x by the point estimate alone at batch {each}"

    @property
    def _later(self) -> str:
        if not self.later:
            return ""
        every = ", ".join(f"{s:.2f}x at batch {b}" for b, s in self.later)
        return f"; not falling steadily: back at or over {CROSSOVER}x at a larger batch (each larger batch: {every})"


def _already_under(batch: int, speedups: list[str]) -> str:
    speeds = ", ".join(speedups)
    return f"batch {batch} ({speeds}): already under {CROSSOVER}x at the smallest batch with a valid point"


def _with_interval(ratio: Ratio) -> str:
    """A speed-up whose interval includes CROSSOVER, 3 decimals (a point near the threshold may round to its bound);
    in brackets: several counts' speed-ups may share one clause, comma-separated."""
    return f"{ratio.point:.3f}x [{ratio.bounds_name} {ratio.low:.3f} to {ratio.high:.3f}, includes {CROSSOVER}x]"


def _batches(swept: tuple[int, ...]) -> str:
    """The batches swept: as their range where they double from the first to the last (1 to 64), else by name (batch
    1 to 4 where 2 failed would hide the gap)."""
    if len(swept) > 3 and all(b == 2 * a for a, b in zip(swept, swept[1:])):
        return f"batch {swept[0]} to {swept[-1]}"
    return ("batch " if len(swept) == 1 else "batches ") + _words([str(b) for b in swept])


def _words(words: list[str]) -> str:
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else words[0]


def _counts(tokens: list[int]) -> str:
    return _words([str(t) for t in tokens]) + " tokens"


def crossing_summary(rows: list[Crossover]) -> str:
    """One variant's crossovers, one clause per outcome: new-token counts with the same outcome (none in the same
    range; already under at the same smallest batch, and under at every larger one) are named together; a crossing
    within the range, one not under at every larger batch, or a 'none' with a batch at or over the threshold by the
    point estimate alone, on its own."""
    groups: dict[tuple, list[Crossover]] = {}
    for c in rows:
        if c.batch is None:
            key = ("own", c.new_tokens) if c.over_by_point_alone else ("none", c.swept[0], c.swept[-1])
        else:
            key = ("first", c.batch) if c.before is None and not c.later else ("own", c.new_tokens)
        groups.setdefault(key, []).append(c)
    clauses = []
    for (kind, *_), group in groups.items():
        text = _already_under(group[0].batch, [c.speed_text for c in group]) if kind == "first" else group[0].text
        clauses.append(f"{_counts([c.new_tokens for c in group])}: {text}")
    return "; ".join(clauses)


def crossovers(points: list[Point]) -> list[Crossover]:
    by_line: dict[tuple[str, int], list[SpeedUp]] = {}
    for row in speedups(points):
        by_line.setdefault((row.variant, row.new_tokens), []).append(row)
    out = []
    for (variant, tokens), rows in sorted(by_line.items(), key=lambda item: (variant_rank(item[0][0]), item[0][1])):
        rows.sort(key=lambda r: r.batch)
        under = next((i for i, r in enumerate(rows) if r.ratio.point < CROSSOVER), None)
        swept = tuple(r.batch for r in rows)
        over_alone = tuple((r.batch, r.ratio) for r in rows[:under] if r.ratio.contains(CROSSOVER))
        if under is None:
            out.append(Crossover(variant, tokens, None, None, None, swept, over_by_point_alone=over_alone))
        else:
            before = (rows[under - 1].batch, rows[under - 1].ratio.point) if under else None
            later = tuple((r.batch, r.ratio.point) for r in rows[under + 1:])
            if all(speedup < CROSSOVER for _, speedup in later):
                later = ()
            out.append(Crossover(variant, tokens, rows[under].batch, rows[under].ratio, before, swept, later,
                                 over_alone))
    return out
