"""Recapture over reuse in both orders (policy_order.py, present/policy_gaps.py's order table, the sweep report)."""
from __future__ import annotations

import dataclasses

import pytest

from result_fixture import sweep_entries, sweep_point
from rollout_study import policy_order
from rollout_study.param_values import TURN_ORDERS
from rollout_study import sweep_curves as curves
from rollout_study.present import markdown, policy_gaps
from rollout_study.present import sweep as report
from rollout_study.result import Result

REUSE = [10.0, 10.01, 10.02]  # a spread of 0.2%: a 2% gap's interval is clear of 1


def _point(first: str, before: float, after: float | None = None, batch: int = 1, seed: int = 0,
           turns: str | None = "fixed", reuse: list[float] = REUSE, policy=None) -> Result:
    """A sweep point with graph's policies built in `first`'s order; recapture runs `before` x reuse's steady median
    before the update and `after` x after it."""
    after = before if after is None else after
    samples = {("graph[reuse]", "steady"): reuse, ("graph[reuse]", "steady_after_update"): reuse,
               ("graph[recapture]", "steady"): [before * v for v in reuse],
               ("graph[recapture]", "steady_after_update"): [after * v for v in reuse]}
    result = sweep_point(batch, 16, {"eager": (1, 100.0, 1, 100.0), "graph[recapture]": (1, 10.0, 1, 10.0),
                                     "graph[reuse]": (1, 10.0, 1, 10.0)}, steady_samples=samples)
    second = "reuse" if first == "recapture" else "recapture"
    result.metadata["engines"] = [{"engine": "eager", "policy": None}, {"engine": "graph", "policy": first},
                                  {"engine": "graph", "policy": second}]
    params = {"name": f"p{seed}", "batch_size": batch, "requests": batch, "max_new_tokens": 16, "seed": seed,
              "policy": policy or [first, second]}
    result.metadata["params"] = params if turns is None else {**params, "turn_order": turns}
    for phase in ("steady", "steady_after_update"):  # the built first takes each phase's first turn, as with fixed
        _led(result, phase, first)
    return result


def _rows(results):
    return policy_order.order_rows(results)


def test_a_gap_that_flips_with_the_order_follows_the_order_and_one_that_keeps_its_sign_the_policy():
    flips = [_point("recapture", 0.98, seed=s) for s in (0, 1)] + [_point("reuse", 1 / 0.98, seed=s) for s in (0, 1)]
    (row,) = _rows(flips)
    assert (row.engine, len(row.recapture_first), len(row.reuse_first)) == ("graph", 2, 2)
    assert row.verdict("before") == row.verdict("after") == policy_order.ORDER
    assert row.first_over_second("before") == pytest.approx(0.98)  # the instance built first is 2% faster
    assert row.recapture_over_reuse("before") == pytest.approx(1)  # and the policy adds nothing
    # an order with more points weighs no more: each order's mean first, then the two
    (row,) = _rows([_point("recapture", 0.98, seed=s) for s in range(3)] + [_point("reuse", 1 / 0.96)])
    assert row.first_over_second("before") == pytest.approx((0.98 * 0.96) ** 0.5)
    keeps = [_point("recapture", 0.98), _point("reuse", 0.98, 0.98)]
    (row,) = _rows(keeps)
    assert row.verdict("before") == policy_order.POLICY and row.first_over_second("before") == pytest.approx(1)
    assert row.recapture_over_reuse("before") == pytest.approx(0.98)  # the size of what the policy adds
    # the phase after the update is read on its own: there the gap flips with the order
    (row,) = _rows([_point("recapture", 0.98, 0.98), _point("reuse", 0.98, 1 / 0.98)])
    assert (row.verdict("before"), row.verdict("after")) == (policy_order.POLICY, policy_order.ORDER)


def test_intervals_that_include_one_are_no_gap_and_a_mix_is_mixed():
    wide = [9.0, 10.0, 11.0]  # a 0.3% gap well inside its interval: no side, though its point is under 1
    (row,) = _rows([_point("recapture", 0.997, reuse=wide), _point("reuse", 1.003, reuse=wide)])
    assert row.verdict("before") == policy_order.NO_GAP
    # one order without a side beside one clear of 1 is no 'no gap'
    (row,) = _rows([_point("recapture", 0.997, reuse=wide), _point("reuse", 1 / 0.98)])
    assert row.verdict("before") == policy_order.MIXED
    # and the other way round: the rule reads both orders' sides alike, whichever order is clear of 1
    clear, straddles = policy_order.Ratio(0.98, 0.97, 0.99), policy_order.Ratio(1.0, 0.99, 1.01)
    assert policy_order.verdict([clear], [straddles]) == policy_order.verdict([straddles], [clear]) == \
        policy_order.MIXED
    # an interval that ends at 1 includes it
    ratio = policy_order.Ratio
    assert policy_order.verdict([ratio(0.98, 0.97, 1.0)], [ratio(1.02, 1.0, 1.03)]) == policy_order.NO_GAP
    # one point of an order whose interval includes 1 beside one clear of it
    (row,) = _rows([_point("recapture", 0.98), _point("recapture", 1.0, seed=1), _point("reuse", 1 / 0.98)])
    assert row.verdict("before") == policy_order.MIXED
    # a point whose gap has no interval (one sample a side) is clear of nothing
    assert policy_order.verdict([policy_order.Ratio(0.9, None, None)], [policy_order.Ratio(1.1, 1.05, 1.2)]) == \
        policy_order.MIXED
    assert policy_order.verdict([policy_order.Ratio(0.9, 0.8, 0.95)], []) is None


def test_a_place_is_every_parameter_but_the_order_and_the_seed_and_needs_both_orders():
    results = [_point("recapture", 0.98, batch=1), _point("reuse", 1 / 0.98, batch=1, seed=3),
               _point("recapture", 0.99, batch=4), _point("reuse", 1 / 0.99, batch=4, turns="rotate"),
               _point("recapture", 0.99, batch=8)]  # batch 8 ran in one order only: no row
    rows = _rows(results)
    assert [(r.params["batch_size"], r.params["turn_order"]) for r in rows] == [(1, "fixed")]
    # a result from before turn_order existed ran with fixed turns: it shares a place with one that names it
    (row,) = _rows([_point("recapture", 0.98, turns=None), _point("reuse", 1 / 0.98)])
    assert row.params["turn_order"] == "fixed"


def test_a_place_keeps_which_policies_ran_and_after_is_the_last_phase_after_an_update():
    # a point with the diagnostic policies too ran four instances a round: no place shared with a pair's
    results = [_point("recapture", 0.98), _point("reuse", 1 / 0.98, policy=["reuse", "recapture", "unchecked"])]
    assert _rows(results) == []
    # `both` names the pair: its point shares a place with the reverse list
    (row,) = _rows([_point("recapture", 0.98, policy="both"), _point("reuse", 1 / 0.98)])
    assert row.params["policy"] == ["recapture", "reuse"]
    # two updates: after is the second's steady phase, not the first's
    late = [_point("recapture", 0.98), _point("reuse", 1 / 0.98)]
    for result, gap in zip(late, (1.05, 1 / 1.05)):
        for call in [c for c in result.calls if c.phase == "steady_after_update"]:
            scale = gap if "recapture" in call.variant else 1
            result.calls.append(dataclasses.replace(call, cycle=1, total_ms=call.total_ms * scale))
    (row,) = _rows(late)
    # (cycle 1's samples are cycle 0's after-phase ones, scaled: the first update's phase alone reads 0.98)
    assert row.first_over_second("after") == pytest.approx(0.98 * 1.05)
    # a run without a phase after an update reads before only
    bare = [_point("recapture", 0.98), _point("reuse", 1 / 0.98)]
    for result in bare:
        result.calls[:] = [c for c in result.calls if c.phase != "steady_after_update"]
    (row,) = _rows(bare)
    assert row.verdict("after") is None and row.first_over_second("after") is None and row.gaps("reuse", "after") == []
    assert row.verdict("before") == policy_order.ORDER


def test_the_policy_built_first_is_read_from_the_engines_as_built():
    result = _point("reuse", 1.0)
    assert policy_order.built_first(result, "graph") == "reuse"
    result.metadata["engines"] = [{"engine": "eager", "policy": None}, {"engine": "graph", "policy": "reuse"}]
    assert policy_order.built_first(result, "graph") is None and policy_order.ordered_gaps(result) == []


def _led(result: Result, phase: str, policy: str) -> Result:
    """The result with `policy`'s first call in `phase` moved ahead of every other call: it took the first turn."""
    call = next(c for c in result.calls if (c.phase, c.variant) == (phase, f"graph[{policy}]"))
    result.calls.remove(call)
    result.calls.insert(0, call)
    return result


def test_the_phase_s_first_turn_is_read_from_the_calls_recorded_order():
    # rotate-run: the instance built second leads the steady phase before the update, the first the one after it
    points = []
    for first, second in (("recapture", "reuse"), ("reuse", "recapture")):
        result = _led(_led(_point(first, 0.98, turns="rotate-run"), "steady", second), "steady_after_update", first)
        points.append(curves.Point(first, result))
    (row,) = _rows([p.result for p in points])
    assert (row.first_turn("before"), row.first_turn("after")) == ("built second", "built first")
    table = policy_gaps.order_table(points)
    assert list(table["phase's first turn"]) == ["built second", "built first"]
    assert list(table["calls first"]) == ["varies"] * 2
    (line,) = policy_gaps.order_lines(points, "tiny")
    assert "turns rotate-run (calling first of the two in a round: either, by round)" in line
    assert ("before any update (its first round led by the instance built second) and 1.000x to 1.000x after the "
            "last (its first round led by the instance built first)") in line
    # points that differ: varies; a point whose calls name neither phase: not counted
    other = _led(_point("recapture", 0.98, turns="rotate-run"), "steady", "recapture")
    (row,) = _rows([points[0].result, other, points[1].result])
    assert row.first_turn("before") == "varies"
    bare = dataclasses.replace(row, recapture_first=tuple(dataclasses.replace(g, leads=(None, None))
                                                          for g in row.recapture_first),
                               reuse_first=tuple(dataclasses.replace(g, leads=(None, None)) for g in row.reuse_first))
    assert bare.first_turn("after") == "-"


def test_the_first_turn_after_is_read_in_the_phase_the_gap_after_is():
    # two updates: the last one's steady phase, led here by the instance built second, not the first update's
    result = _point("recapture", 0.98)
    later = [dataclasses.replace(c, cycle=1) for c in result.calls if c.phase == "steady_after_update"]
    result.calls.extend(sorted(later, key=lambda c: c.variant != "graph[reuse]"))
    assert policy_order.ordered_gaps(result)[0].leads == ("recapture", "reuse")
    # a last phase where one of the two alone called has no gap (first_and_last reads the one before): nor a lead
    result.calls[:] = [c for c in result.calls if (c.cycle, c.variant) != (1, "graph[recapture]")]
    assert policy_order.ordered_gaps(result)[0].leads == ("recapture", "recapture")


def test_the_order_table_and_answer_lines_and_the_sweep_report_show_them_only_where_both_orders_ran(tmp_path):
    gaps = {("recapture", 0): 0.98, ("recapture", 1): 0.97, ("reuse", 0): 1 / 0.98, ("reuse", 1): 1 / 0.98}
    results = {f"{first}-{seed}": _point(first, gap, 1.0, seed=seed) for (first, seed), gap in gaps.items()}
    points = [curves.Point(slug, r) for slug, r in results.items()]
    table = policy_gaps.order_table(points)
    assert list(table.columns) == policy_gaps.ORDER_COLUMNS and list(table["phase"]) == ["before", "after"]
    before, after = table.iloc[0], table.iloc[1]
    assert tuple(before[["engine", "turn order", "calls first", "batch", "requests", "new tokens", "also"]]) == (
        "graph", "fixed", "built first", 1, 1, 16, "-")
    assert before["recapture first"] == "0.970 to 0.980 (2)" and before["reuse first"] == "1.020 (2)"
    assert before["first / second"] == pytest.approx(((0.98 * 0.97) ** 0.5 * 0.98) ** 0.5)
    assert before["verdict"] == policy_order.ORDER and after["verdict"] == policy_order.NO_GAP
    (line,) = policy_gaps.order_lines(points, "tiny")
    assert line.startswith("tiny: graph in both orders, turns fixed (calling first of the two in a round: the "
                           "instance built first): the instance built first's steady median over the second's 0.977x "
                           "to 0.977x before any update (its first round led by the instance built first) and 1.000x "
                           "to 1.000x after the last (its first round led by the instance built first), over 1 place")
    assert line.endswith("over 1 place(s); before any update recapture's over reuse's 0.997x to 0.997x over both "
                         "orders, and recapture over reuse follows the order at 1 (of 1)")
    # places apart in a parameter the table has no column for say so
    other = [_point("recapture", 0.98), _point("reuse", 1 / 0.98)]
    for result in other:
        result.metadata["params"]["length_bucket"] = 64
    both = policy_gaps.order_table(points + [curves.Point(f"b{i}", r) for i, r in enumerate(other)])
    assert list(both["also"]) == ["length_bucket=null"] * 2 + ["length_bucket=64"] * 2
    record = {"spec": {"name": "order"}, "wall": {"executor": "local", "seconds": 1.0},
              "points": [{"slug": s, "status": "valid"} for s in results]}
    summary = report.summary(record, sweep_entries(results), folder=tmp_path)
    assert f": {policy_gaps.ORDER_TITLE}" in summary
    assert "| graph | fixed | built first | 1 | 1 | 16 | - | before | built first | 0.970 to 0.980 (2) |" in summary
    assert any(line.endswith("follows the order at 1 (of 1)") for line in
               report.answer_lines(record, sweep_entries(results), tmp_path))
    blocks = report.blocks(record, sweep_entries(results), str(tmp_path / "figures"), folder=tmp_path)
    assert any(b.text.endswith(policy_gaps.ORDER_TITLE) for b in blocks)
    # one order only (every published sweep before the probe): no table, no line, no section
    one = {slug: r for slug, r in results.items() if slug.startswith("recapture")}
    assert policy_gaps.order_table([curves.Point(s, r) for s, r in one.items()]).empty
    record["points"] = record["points"][:2]
    assert policy_gaps.ORDER_TITLE not in report.summary(record, sweep_entries(one), folder=tmp_path)
    assert not any(b.text.endswith(policy_gaps.ORDER_TITLE)
                   for b in report.blocks(record, sweep_entries(one), str(tmp_path / "figures"), folder=tmp_path))


def test_every_turn_order_has_its_words_in_the_order_table_and_a_runs_order_line():
    # two maps keyed by turn order, for two readers: a new order without its words would fall back to "-" in the
    # table's "calls first" column, or to "not as built" in a run's order line
    assert set(policy_gaps.CALLS_FIRST) == set(TURN_ORDERS)
    assert set(markdown.TURNS_SAID) == set(TURN_ORDERS) - {"fixed"}  # a fixed order's line says no turns


def test_a_runs_order_line_counts_each_verdict_over_the_places_that_gave_it():
    # two places (batch 1 and 2): the gap follows the order at one, the policy at the other
    flips = [_point("recapture", 0.98), _point("reuse", 1 / 0.98)]
    keeps = [_point("recapture", 0.98, batch=2), _point("reuse", 0.98, batch=2)]
    points = [curves.Point(f"p{i}", r) for i, r in enumerate(flips + keeps)]
    (line,) = policy_gaps.order_lines(points, "tiny")
    assert line.endswith(f"recapture over reuse {policy_order.ORDER} at 1, {policy_order.POLICY} at 1 (of 2)")
