"""stats.py: bootstrap intervals of ratios of medians, checked against cases known without resampling."""
from __future__ import annotations

import math

import pytest

from rollout_study.stats import Samples
from rollout_study import stats
from rollout_study.stats import Ratio, percentile, ratio_interval, resampled_sides


def test_identical_samples_give_a_zero_width_interval_at_the_exact_ratio():
    ratio = ratio_interval(Samples([50.0] * 10), Samples([10.0] * 10))
    assert ratio == Ratio(5.0, 5.0, 5.0)


def test_clearly_separated_samples_give_an_interval_excluding_one():
    slow = Samples([110.0, 111.0, 109.0, 112.0, 110.5, 108.0, 111.5, 109.5, 110.0, 112.5])
    fast = Samples([100.0, 101.0, 99.0, 102.0, 100.5, 98.0, 101.5, 99.5, 100.0, 102.5])
    point, low, high = ratio_interval(slow, fast)
    assert point == pytest.approx(110.25 / 100.25)
    assert 1.0 < low <= point <= high
    # Every resampled median lies within the samples' range, so the ratio stays within these bounds.
    assert low >= 108.0 / 102.5 and high <= 112.5 / 98.0


def test_overlapping_samples_give_an_interval_containing_one():
    a = Samples([10.0, 12.0, 9.0, 11.0, 10.5, 9.5])
    b = Samples([10.2, 11.8, 9.1, 10.9, 10.4, 9.6])
    assert ratio_interval(a, b).contains(1.0)


def test_deterministic_for_a_seed_and_moved_by_another():
    a, b = Samples([10.0, 12.0, 9.0, 11.0, 10.5]), Samples([20.0, 21.0, 19.5, 22.0, 18.0])
    first = ratio_interval(a, b)
    stats._interval.cache_clear()  # computed again, not read back from the cache
    assert ratio_interval(a, b) == first and first.low < first.point < first.high
    # With few resamples the percentiles fall on different resamples: the seed is really used.
    assert ratio_interval(a, b, seed=0, resamples=20) != ratio_interval(a, b, seed=1, resamples=20)
    assert ratio_interval(a, b, seed=1).point == first.point


def test_one_sample_on_one_side_resamples_only_the_other():
    first, steady = Samples([60.0]), Samples([10.0, 12.0, 8.0])
    point, low, high = ratio_interval(first, steady)
    assert point == 6.0
    # The steady median of a resample is 8, 10 or 12: the ratio is 60 over one of them, 7.5, 6 or 5.
    assert 5.0 <= low < 6.0 < high <= 7.5
    assert "only the denominator" in resampled_sides(first, steady)
    assert "only the numerator" in resampled_sides(steady, first)


def test_one_sample_on_each_side_has_no_interval():
    ratio = ratio_interval(Samples([3.0]), Samples([2.0]))
    assert ratio == Ratio(1.5, None, None) and not ratio.has_interval
    assert not ratio.excludes(Ratio(9.0, 9.0, 9.0)) and not ratio.contains(1.5)
    assert resampled_sides(Samples([3.0]), Samples([2.0])) == "one sample on each side: no interval"


def test_excludes_needs_two_disjoint_intervals():
    assert Ratio(1.1, 1.05, 1.15).excludes(Ratio(1.0, 0.98, 1.02))
    assert not Ratio(1.1, 1.01, 1.15).excludes(Ratio(1.0, 0.98, 1.02))
    assert not Ratio(1.1, 1.05, 1.15).excludes(Ratio(1.0, None, None))


def test_percentile_interpolates_and_a_zero_denominator_is_refused():
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 0.5) == 3.0
    assert percentile([1.0, 2.0], 0.25) == 1.25 and percentile([7.0], 0.975) == 7.0
    with pytest.raises(ValueError):
        ratio_interval(Samples([1.0, 2.0]), Samples([0.0, 0.0]))


def test_samples_owns_median_quartiles_and_spread():
    s = Samples([3.0, 4.0, 5.0, 100.0])
    assert (s.median, s.n, s.min, s.max) == (4.5, 4, 3.0, 100.0)
    assert s.quartiles == (3.75, 28.75) and s.wide
    assert not Samples([10.0, 10.1, 10.2]).wide
    one = Samples([7.0])
    assert one.quartiles == (7.0, 7.0) and one.iqr == 0 and not one.wide
    with pytest.raises(ValueError):
        Samples([])


def test_a_ratio_is_on_a_side_of_a_value_only_where_its_interval_clears_it():
    assert [Ratio(1.2, 1.1, 1.3).side(), Ratio(0.8, 0.7, 0.9).side(), Ratio(1.0, 0.9, 1.1).side()] == [1, -1, 0]
    assert Ratio(1.2, 1.0, 1.3).side() == 0 and Ratio(1.5, None, None).side() == 0  # an end on it; no interval
    assert Ratio(1.2, 1.1, 1.3).side(1.15) == 0 and Ratio(1.2, 1.1, 1.3).side(1.05) == 1


def _pure_python_interval(numerator, denominator, seed, resamples, level):
    """The resampling as random.choices does it, one draw at a time: what the drawn-at-once interval must equal."""
    import random
    import statistics

    rng = random.Random(seed)

    def median_of(values):
        return values[0] if len(values) == 1 else statistics.median(rng.choices(values, k=len(values)))

    ratios = []
    for _ in range(resamples):
        top, bottom = median_of(numerator), median_of(denominator)
        ratios.append(top / bottom if bottom > 0 else math.inf)
    ratios.sort()
    tail = (1 - level) / 2
    return percentile(ratios, tail), percentile(ratios, 1 - tail)


@pytest.mark.parametrize("sizes", [(1, 7), (8, 1), (2, 2), (3, 3), (1, 3), (5, 6), (31, 40)])
@pytest.mark.parametrize("seed", [0, 3])
def test_the_interval_is_the_one_random_choices_draws_to_the_bit(sizes, seed):
    import random

    rng = random.Random(f"{sizes}-{seed}")
    numerator, denominator = ([rng.lognormvariate(0, 0.3) for _ in range(n)] for n in sizes)
    got = ratio_interval(Samples(numerator), Samples(denominator), seed=seed, resamples=500)
    assert (got.low, got.high) == _pure_python_interval(tuple(numerator), tuple(denominator), seed, 500, stats.LEVEL)


def test_a_resampled_denominator_median_of_zero_gives_the_ratio_one_at_a_time_gives():
    # half the denominator's samples are zero: some resampled medians are zero, the point's median is not
    numerator, denominator = (1.0, 1.1, 1.2), (0.0, 0.0, 2.0, 3.0, 4.0)
    got = ratio_interval(Samples(numerator), Samples(denominator), seed=1, resamples=400, level=0.99)
    assert not math.isfinite(got.high)  # the top ratios are infinite (interpolating between two gives nan)
    assert repr((got.low, got.high)) == repr(_pure_python_interval(numerator, denominator, 1, 400, 0.99))


def test_an_interval_that_reaches_the_samples_lowest_and_highest_ratio_is_named_their_whole_range():
    three = ratio_interval(Samples([10.0, 11.0, 13.0]), Samples([5.0, 5.5, 6.0]))
    assert three.whole_range and (three.low, three.high) == (10.0 / 6.0, 13.0 / 5.0)
    assert three.bounds_name == "whole range"
    first = ratio_interval(Samples([12.0]), Samples([5.0, 5.5, 6.0]))  # a first call against three
    assert first.whole_range and (first.low, first.high) == (2.0, 12.0 / 5.0)
    ten = ratio_interval(Samples([10.0 + i for i in range(10)]), Samples([5.0 + i / 10 for i in range(10)]))
    assert not ten.whole_range and ten.bounds_name == "95%" and ten.low > 10.0 / 5.9
    assert not ratio_interval(Samples([1.0]), Samples([2.0])).whole_range  # no interval at all
    assert stats.whole_range_note([ten]) == ""
    assert stats.whole_range_note([three, first]) == "every 95% interval here is its samples' whole range"
    assert stats.whole_range_note([three, ten], "speed-up's 95% interval") == (
        "1 of these 2 intervals is its samples' whole range")
    assert stats.whole_range_note([three, three, ten]) == "2 of these 3 intervals are their samples' whole range"
    assert stats.whole_range_note([three], why=True) == (
        f"every 95% interval here is its samples' whole range ({stats.WHOLE_RANGE_WHY})")
    # the name a caption, a goal or an axis gives them: "whole range" only where every one is
    assert stats.interval_name([three, first]) == "whole range"
    assert [stats.interval_name(r) for r in ([three, ten], [ten], [])] == ["95% interval"] * 3
    with pytest.raises(ValueError, match="finite"):
        Samples([1.0, float("nan")])


def test_an_interval_that_reaches_only_one_end_of_the_samples_range_is_not_their_whole_range():
    # A first call against 7 calls, two of them the largest: a resampled median of 6 comes up often (its ratio, 2, is
    # the lowest), one of 1 seldom (under 2.5%: the highest, 12, is not reached). One end is no whole range.
    ratio = ratio_interval(Samples([12.0]), Samples([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 6.0]))
    assert ratio.low == 12.0 / 6.0 and ratio.high < 12.0 / 1.0
    assert not ratio.whole_range and ratio.bounds_name == "95%"
    flipped = ratio_interval(Samples([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 6.0]), Samples([12.0]))  # the high end alone
    assert flipped.high == 6.0 / 12.0 and flipped.low > 1.0 / 12.0 and not flipped.whole_range
