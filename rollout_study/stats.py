"""Statistics of repeated measurements: `Samples`, and bootstrap intervals for ratios of medians.

`Samples` owns the statistics of replicates (median, quartiles, IQR, the wide-spread flag), as
`torch.utils.benchmark.Measurement` does: every table and check asks it, none recomputes.

Intervals are seeded: the same numbers on every rebuild.
A ratio of two medians (generate() over a graph, after an update over before) is stated with a 95%
percentile interval from `RESAMPLES` resamples of the raw samples: each side is resampled with
replacement on its own, the ratio of the resampled medians is taken, and the 2.5th and 97.5th
percentiles of those ratios bound the interval. A side with one sample (a first call) cannot be
resampled: it is held at its value and only the other side is resampled (`resampled_sides` says so).
With one sample on both sides there is no interval at all (`low`, `high` are None), never a fake one.
"""
from __future__ import annotations

import functools
import math
import random
import statistics
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

WIDE_IQR = 0.10  # an IQR above this fraction of the median is flagged, as torch.utils.benchmark does


@dataclass(frozen=True)
class Samples:
    """Replicates of one measurement (ms); the one place medians, quartiles and spread are computed."""

    values: tuple[float, ...]

    def __post_init__(self):
        object.__setattr__(self, "values", tuple(float(v) for v in self.values))
        if not self.values:
            raise ValueError("Samples needs at least one value")
        if not all(math.isfinite(v) for v in self.values):  # a NaN has no place in a median or a resample's order
            raise ValueError(f"Samples takes finite values, got {[v for v in self.values if not math.isfinite(v)]}")

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def quartiles(self) -> tuple[float, float]:
        """First and third quartile (inclusive method); one sample is its own quartiles."""
        if self.n < 2:
            return self.values[0], self.values[0]
        q = statistics.quantiles(self.values, n=4, method="inclusive")
        return q[0], q[2]

    @property
    def iqr(self) -> float:
        low, high = self.quartiles
        return high - low

    @property
    def wide(self) -> bool:
        return self.n > 1 and self.iqr > WIDE_IQR * self.median

    @property
    def min(self) -> float:
        return min(self.values)

    @property
    def max(self) -> float:
        return max(self.values)



RESAMPLES = 2000
LEVEL = 0.95


class _Bounds(NamedTuple):
    point: float
    low: float | None
    high: float | None


class Ratio(_Bounds):
    """A ratio of medians and its bootstrap interval; `low`/`high` None: one sample each, no interval.

    `whole_range`: the interval reaches the lowest and the highest ratio the samples allow (min/max to max/min).
    With few samples a side (3, or a first call against 3) the extreme ratios each come up in more than 2.5% of
    the resamples (about 7% with 3 a side), so the "95%" interval is the samples' whole range: what was measured
    rather than a confidence statement. It is an attribute beside the three fields, so a Ratio still unpacks,
    compares and hashes as (point, low, high)."""

    whole_range = False  # what _make and _replace, which bypass __new__, give

    def __new__(cls, point: float, low: float | None, high: float | None, whole_range: bool = False):
        ratio = super().__new__(cls, point, low, high)
        ratio.whole_range = whole_range
        return ratio

    @property
    def bounds_name(self) -> str:
        """How a report names the interval: "95%", or "whole range" where it is the samples' whole range."""
        return "whole range" if self.whole_range else f"{LEVEL:.0%}"

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    def excludes(self, other: "Ratio") -> bool:
        """True only when both have intervals and they do not overlap."""
        if not (self.has_interval and other.has_interval):
            return False
        return self.high < other.low or self.low > other.high

    def contains(self, value: float) -> bool:
        return self.has_interval and self.low <= value <= self.high

    def side(self, value: float = 1.0) -> int:
        """1 where the interval lies above `value`, -1 below, 0 where it holds it or there is none."""
        if not self.has_interval or self.contains(value):
            return 0
        return -1 if self.high < value else 1


def resampled_sides(numerator: Samples, denominator: Samples) -> str:
    """Which samples an interval came from, in words (a single sample cannot be resampled)."""
    if numerator.n == 1 and denominator.n == 1:
        return "one sample on each side: no interval"
    if numerator.n == 1:
        return "the numerator is one sample: only the denominator's samples are resampled"
    if denominator.n == 1:
        return "the denominator is one sample: only the numerator's samples are resampled"
    return "both sides resampled"


def percentile(ordered: list[float], q: float) -> float:
    """The q-quantile (0..1) of sorted values, interpolated linearly between neighbours."""
    position = q * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def ratio_interval(numerator: Samples, denominator: Samples, seed: int = 0, resamples: int = RESAMPLES,
                   level: float = LEVEL) -> Ratio:
    """median(numerator) / median(denominator) with its bootstrap percentile interval (see the module)."""
    return _interval(numerator.values, denominator.values, seed, resamples, level)


@functools.lru_cache(maxsize=4096)
def _interval(numerator: tuple, denominator: tuple, seed: int, resamples: int, level: float) -> Ratio:
    top, bottom = statistics.median(numerator), statistics.median(denominator)
    if bottom <= 0:
        raise ValueError(f"the denominator's median must be positive, got {bottom}")
    point = top / bottom
    if len(numerator) == 1 and len(denominator) == 1:
        return Ratio(point, None, None)
    # The draws of random.Random(seed), in its order (each resample: the numerator's, then the denominator's, as
    # `random.choices` takes them), drawn at once: numpy's Mersenne Twister set to Python's state gives the same
    # floats, so the interval is the pure-Python resampling's to the bit, about 50x sooner (a sweep report asks
    # for thousands).
    sides = [np.asarray(values) for values in (numerator, denominator)]
    widths = [len(values) if len(values) > 1 else 0 for values in sides]  # a one-sample side draws nothing
    state = random.Random(seed).getstate()[1]
    twister = np.random.RandomState(0)  # any seed: its state is replaced by Python's below
    twister.set_state(("MT19937", np.array(state[:-1], dtype=np.uint32), state[-1]))
    draws = twister.random_sample((resamples, sum(widths)))
    medians = []
    for values, width, start in zip(sides, widths, (0, widths[0])):
        if width == 0:
            medians.append(np.full(resamples, values[0]))
        else:
            picks = np.floor(draws[:, start:start + width] * float(width)).astype(np.intp)
            medians.append(np.median(values[picks], axis=1))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(medians[1] > 0, medians[0] / medians[1], math.inf)
    ratios = np.sort(ratios).tolist()
    tail = (1 - level) / 2
    low, high = percentile(ratios, tail), percentile(ratios, 1 - tail)
    lowest = min(numerator) / max(denominator)
    highest = max(numerator) / min(denominator) if min(denominator) > 0 else math.inf
    return Ratio(point, low, high, whole_range=(low, high) == (lowest, highest))


WHOLE_RANGE_WHY = ("with as few as 3 calls a side, or a first call against 3, the lowest and the highest ratio each "
                   "come up in more than 2.5% of the resamples, so the 2.5th and 97.5th percentiles are those extremes "
                   "and the interval says what was measured, not 95% confidence")
WHOLE_RANGE = ("whole range: a 95% interval that reaches the lowest and the highest ratio any two of its calls give "
               f"(min/max to max/min); {WHOLE_RANGE_WHY}")


def interval_name(ratios: list[Ratio]) -> str:
    """What a report calls these ratios' intervals: "whole range" where every one is (WHOLE_RANGE), else "95%
    interval"."""
    return "whole range" if ratios and all(r.whole_range for r in ratios) else f"{LEVEL:.0%} interval"


def whole_range_note(ratios: list[Ratio], what: str = "95% interval here", why: bool = False) -> str:
    """Says how many of `ratios`' intervals are their samples' whole range (WHOLE_RANGE; `why`: and why);
    "" where none is."""
    ranges = sum(r.whole_range for r in ratios)
    if not ranges:
        return ""
    if ranges == len(ratios):
        note = f"every {what} is its samples' whole range"
    else:
        whose = "is its" if ranges == 1 else "are their"
        note = f"{ranges} of these {len(ratios)} intervals {whose} samples' whole range"
    return f"{note} ({WHOLE_RANGE_WHY})" if why else note
