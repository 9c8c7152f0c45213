"""engines/__init__.py: the registry. An engine added in one file plus one registry line reaches every output."""
from __future__ import annotations

import statistics
import sys
import weakref
from pathlib import Path

import pytest
import torch

from rollout_study import collection, engines, host_speed
from rollout_study.param_values import ParameterError
from rollout_study.params import StudyParams
from rollout_study.record import variant_name

sys.path.insert(0, str(Path(__file__).resolve().parent / "engine_example"))


@pytest.fixture
def echo_registered(monkeypatch):
    from echo import EchoEngine

    monkeypatch.setitem(engines.REGISTRY, EchoEngine.name, EchoEngine)  # the one registry line
    return EchoEngine


def test_parameters_expand_in_registry_order():
    params = StudyParams.from_dict({"engines": ["graph", "eager"], "policy": "both"})
    assert engines.variants(params.engines, params.policies) == [("eager", None), ("graph", "recapture"),
                                                                 ("graph", "reuse")]
    # an engine's policies in the order `policy` lists them: that order builds them and gives them their turns
    assert engines.variants(["eager", "graph"], ("reuse", "recapture")) == [("eager", None), ("graph", "reuse"),
                                                                            ("graph", "recapture")]
    assert sorted(["graph[reuse]", "zzz", "eager", "graph[recapture]"], key=engines.variant_rank) == [
        "eager", "graph[recapture]", "graph[reuse]", "zzz"]
    assert engines.variant_color("graph[reuse]") != engines.variant_color("graph[recapture]")
    with pytest.raises(ParameterError, match="drawn from eager, graph"):
        StudyParams.from_dict({"engines": ["echo"]})


def test_each_variant_is_drawn_in_its_engines_colour_and_any_other_in_a_colour_of_its_name():
    for name, engine in engines.REGISTRY.items():
        for policy, colour in engine.colors.items():
            assert engines.variant_color(variant_name(name, policy)) == colour, (name, policy)
    assert engines.variant_color(engines.BASELINE) == "#7f7f7f"  # the baseline's grey, whatever its name parses to
    # Variants no engine colours (an old file, an engine added without colours) must still be told apart in a figure.
    unknown = ["echo", "zzz", "old[policy]", "graph[gone]"]
    colours = [engines.variant_color(v) for v in unknown]
    assert set(colours) <= set(engines.FALLBACK_COLORS) and len(set(colours)) > 1
    assert colours == [engines.variant_color(v) for v in unknown]  # the same colour in every figure


def test_an_engine_on_the_base_class_names_its_variant_and_describes_its_policy():
    # What the progress line and the metadata (read by policy_order's built_first) say of an engine that keeps
    # the base class's variant and describe.
    class Plain(engines.Engine):
        name, policies = "plain", ("recapture", "reuse")

        def __init__(self, policy):
            self.policy = policy

    assert [Plain(p).variant for p in Plain.policies] == ["plain[recapture]", "plain[reuse]"]
    assert Plain("reuse").describe() == {"engine": "plain", "policy": "reuse"}
    assert Plain(None).variant == "plain"


@pytest.fixture
def echo_result(echo_registered):
    from rollout_study.protocol import run_in_process

    params = StudyParams.from_dict({"name": "echo-run", "device": "cpu", "engines": ["eager", "graph", "echo"],
                                    "policy": "both", "requests": 3, "batch_size": 2, "prompt_len": 8,
                                    "max_new_tokens": 3, "iterations": 2, "cycles": 1})
    return run_in_process(params)


def test_a_new_engine_appears_in_every_output(echo_result, tmp_path):
    from rollout_study import analysis
    from rollout_study.present import figures, markdown, notebook, tables, text

    result = echo_result
    assert result.is_valid and result.variants() == ["eager", "graph[recapture]", "graph[reuse]", "echo"]
    # what the run spent around its calls, part by part (one update, two references, a collect before each call)
    untimed = result.metadata["untimed_ms"]
    assert set(untimed) == {"collect", "parity", "reference", "update"} and all(v > 0 for v in untimed.values())
    assert "- host time around the measured calls (ms): collect " in markdown.summary(result)
    speed = result.metadata["host_speed"]  # the host's pace at the run's start and end
    assert all(0 < speed[when]["dispatch_us"] < 1e3 and len(speed[when]["samples_us"]) == 5
               for when in ("start", "end"))
    assert "- host speed: " in markdown.summary(result) and " us per tiny CPU tensor operation at the start" in \
        markdown.summary(result)
    assert "echo" in text.console_summary(result)
    assert {c.captures for c in result.calls if c.engine in ("eager", "echo")} == {0}  # neither captures a graph
    assert "\n| echo | 0 | steady |" in markdown.summary(result)
    assert "echo, CPU" in markdown.readme_results(result, with_original=False)
    for make in (tables.summary_table, tables.breakdown_table, tables.memory_table, tables.parity_table):
        assert "echo" in set(make([result]).iloc[:, 1]) | set(make([result]).astype(str).stack()), make.__name__
    assert any(row.candidate == "echo" for row in analysis.break_even_rows(result))
    for kind, _, make in figures.FIGURES:
        figure = make(result, str(tmp_path), "echo")
        legends = [ax.get_legend() for ax in figure.axes if ax.get_legend()] + list(figure.legends)
        labels = {t.get_text() for legend in legends for t in legend.get_texts()}
        labels |= {t.get_text() for ax in figure.axes for t in ax.get_xticklabels() + ax.get_yticklabels() + ax.texts}
        titles = {ax.get_title() for ax in figure.axes}
        assert any("echo" in label for label in labels | titles), kind
    blocks = notebook.section_blocks("synthetic", [result], str(tmp_path))
    assert any("echo" in notebook.block_html(block) for block in blocks if block.kind == "table")


def test_host_speed_leaves_the_collector_as_it_found_it():
    import gc

    for enabled in (True, False):
        (gc.enable if enabled else gc.disable)()
        try:
            measured = host_speed.measure()
            assert gc.isenabled() == enabled
        finally:
            gc.enable()
        assert measured["dispatch_us"] == sorted(measured["samples_us"])[2] and "torch.add" in measured["method"]


def test_host_speed_is_microseconds_per_operation_and_its_method_counts_what_was_timed(monkeypatch):
    # A clock that moves only with each add, by a set cost per timed loop: the figures must be those costs in
    # microseconds (one real run's figure is host-dependent, so only a bound catches a wrong unit there), and the
    # method must name the loops and adds that the clock saw timed
    costs_us = iter([2.0, 4.0, 1.0, 3.0, 6.0])
    clock = {"now": 0.0, "cost": 0.0, "adds": 0, "reads": 0, "begun": 0}
    timed = []

    def add(*args, **kwargs):
        clock["now"] += clock["cost"]
        clock["adds"] += 1

    def perf_counter():
        clock["reads"] += 1
        if clock["reads"] % 2:  # a loop's start
            clock["cost"], clock["begun"] = next(costs_us) * 1e-6, clock["adds"]
        else:
            timed.append(clock["adds"] - clock["begun"])
        return clock["now"]

    monkeypatch.setattr(host_speed.torch, "add", add)
    monkeypatch.setattr(host_speed.time, "perf_counter", perf_counter)
    measured = host_speed.measure()
    assert measured["samples_us"] == pytest.approx([2.0, 4.0, 1.0, 3.0, 6.0]) and measured["dispatch_us"] == \
        pytest.approx(3.0)
    assert len(set(timed)) == 1 and measured["method"].startswith(f"median of {len(timed)} loops of {timed[0]} ")


def test_each_phase_starts_and_ends_with_a_full_collection_and_each_call_follows_a_young_one(
        echo_registered, monkeypatch):
    import gc

    from rollout_study import protocol
    from rollout_study.protocol import run_in_process

    events = []  # ("collect", generation), ("reset",) and ("call", collector on?) in the order they happened
    collect, call, reset = gc.collect, echo_registered.__call__, protocol.memory.reset_peak
    monkeypatch.setattr(gc, "collect",
                        lambda generation=2: events.append(("collect", generation)) or collect(generation))
    monkeypatch.setattr(protocol.memory, "reset_peak", lambda device: events.append(("reset",)) or reset(device))
    monkeypatch.setattr(echo_registered, "__call__",
                        lambda self, *a: events.append(("call", gc.isenabled())) or call(self, *a))
    params = StudyParams.from_dict({"device": "cpu", "engines": ["eager", "echo"], "requests": 2, "batch_size": 2,
                                    "prompt_len": 8, "max_new_tokens": 2, "iterations": 3, "cycles": 1})
    result = run_in_process(params)
    echo_calls = [c for c in result.calls if c.engine == "echo"]
    calls = [i for i, event in enumerate(events) if event[0] == "call"]
    assert len(calls) == len(echo_calls) == 8 and not any(events[i][1] for i in calls)  # collector off in each
    for n, (i, measured) in enumerate(zip(calls, echo_calls)):
        # the young generations, then the memory baseline, then the call
        assert events[i - 2:i] == [("collect", 1), ("reset",)]
        # since the engine's previous call: the full collections that end a phase and start the next (eager
        # runs first in each round); none between the rounds of a phase
        previous = calls[n - 1] if n else 0
        full = [e for e in events[previous:i] if e == ("collect", 2)]
        assert len(full) == (0 if measured.index else 1 if n == 0 else 2), (measured.phase, measured.index)
    assert ("collect", 2) in events[calls[-1]:]  # the last phase ends with one too


class Held:  # stands in for a tensor on the device: 1 MiB "allocated" while it lives
    pass


def _collector_and_live_objects(monkeypatch):
    """A collector on a "device" whose allocated memory is 1 MiB per live Held in the set it returns beside it."""
    alive = weakref.WeakSet()
    monkeypatch.setattr(collection.memory, "snapshot", lambda device: {"allocated": 2 ** 20 * len(alive)})
    return collection.Collector(torch.device("cuda"), {"collect": 0.0}), alive


def test_a_full_collection_names_the_device_memory_that_old_cyclic_garbage_held(monkeypatch):
    import gc

    from rollout_study.present import markdown
    from result_fixture import make_result

    collector, alive = _collector_and_live_objects(monkeypatch)
    held = Held()
    held.cycle = held  # a cycle: only the collector frees it
    alive.add(held)
    gc.collect()  # it survives collections, so it ages into the old generation
    gc.collect()
    del held
    collector.young()
    assert len(alive) == 1  # a young collection leaves old garbage where it is
    collector.full(1, "steady_after_update")
    assert len(alive) == 0 and collector.old_garbage == [{"cycle": 1, "phase": "steady_after_update",
                                                          "freed_bytes": 2 ** 20}]
    collector.full(1, "first")  # nothing left to free: nothing recorded
    assert len(collector.old_garbage) == 1 and collector.untimed_ms["collect"] > 0
    held = Held()  # old garbage again, found by a phase-start collection: what set-up or an update left
    held.cycle = held
    alive.add(held)
    gc.collect()
    del held
    collector.full()
    assert len(alive) == 0 and len(collector.old_garbage) == 1  # freed, and not charged to any calls
    result = make_result(cuda_graph=True)
    assert "only a full garbage collection" not in markdown.summary(result)
    result.metadata["old_garbage"] = collector.old_garbage
    assert ("- device memory only a full garbage collection freed, after the calls of: c1 steady_after_update "
            "1.00 MiB" in markdown.summary(result))


def test_garbage_that_a_young_collection_frees_is_not_named_old_and_young_collections_are_charged(monkeypatch):
    # A cycle that never aged is the young collections' to free: counted by the full one, it would be named as
    # garbage that outlived them. And the host time around the calls includes the young collections before each
    collector, alive = _collector_and_live_objects(monkeypatch)
    collector.young()
    assert collector.untimed_ms["collect"] > 0
    held = Held()
    held.cycle = held
    alive.add(held)
    del held
    collector.full(1, "steady_after_update")
    assert len(alive) == 0 and collector.old_garbage == []


@pytest.mark.parametrize("turn_order", ["fixed", "reverse", "rotate", "rotate-run"])
def test_each_round_of_a_phase_starts_where_the_turn_order_says(turn_order):
    from rollout_study.protocol import run_in_process

    params = StudyParams.from_dict({"device": "cpu", "engines": ["eager", "graph"], "policy": ["reuse", "recapture"],
                                    "requests": 2, "batch_size": 2, "prompt_len": 8, "max_new_tokens": 3,
                                    "iterations": 5, "cycles": 1, "profile": False, "instrument": False,
                                    "turn_order": turn_order})
    result = run_in_process(params)
    assert result.is_valid and result.metadata["training"]["turn_order"] == turn_order
    built = ["eager", "graph[reuse]", "graph[recapture]"]
    first = [c.variant for c in result.calls if c.phase == "first"]  # one round: rotation starts where fixed does
    assert first == (built[::-1] if turn_order == "reverse" else built)
    # rotate-run counts the run's rounds on over the phases: first is round 0, steady 1 to 5, first_after_update
    # 6, steady_after_update 7 to 11, so the phases after the first start with another engine each (5 rounds, not a
    # multiple of 3 plus one: a phase that counted as one round would start where these do)
    run_starts = {"steady": [1, 2, 0, 1, 2], "first_after_update": [0], "steady_after_update": [1, 2, 0, 1, 2]}
    for phase, samples in (("steady", 5), ("first_after_update", 1), ("steady_after_update", 5)):
        calls = [c for c in result.calls if c.phase == phase]
        rounds = [[c.variant for c in calls if c.index == i] for i in range(samples)]
        assert [c.variant for c in calls] == [v for r in rounds for v in r]  # round after round, in call order
        starts = {"rotate": [0, 1, 2, 0, 1][:samples], "rotate-run": run_starts[phase]}.get(turn_order, [0] * samples)
        expected = [built[s:] + built[:s] for s in starts]
        assert rounds == ([r[::-1] for r in expected] if turn_order == "reverse" else expected)


def test_rotation_counts_the_engines_still_running():
    from rollout_study.protocol import turns

    assert [turns(list("abc"), "rotate", i) for i in range(4)] == [list("abc"), list("bca"), list("cab"), list("abc")]
    # after b failed, the two left alternate from the round's index on
    assert [turns(list("ac"), "rotate", i) for i in (3, 4)] == [list("ca"), list("ac")]
    assert turns(list("abc"), "reverse", 5) == list("cba") and turns(list("abc"), "fixed", 2) == list("abc")
    assert turns([], "rotate", 3) == []
    # rotate-run starts from the run's round, not the phase's; the others ignore it
    assert turns(list("abc"), "rotate-run", 0, 4) == list("bca") and turns(list("abc"), "rotate", 0, 4) == list("abc")
    assert turns(list("ab"), "rotate-run", 1, 7) == list("ba") and turns(list("ab"), "fixed", 1, 7) == list("ab")
    with pytest.raises(ValueError, match="run_index"):
        turns(list("ab"), "rotate-run", 1)


@pytest.fixture(scope="module")
def stale_study():
    """A control cycle, then a real update that changes the tokens, beside a replay that never reads the weights
    again and an engine that fails from its second call on."""
    from echo import EchoEngine

    from rollout_study.protocol import run_in_process

    class StaleEcho(EchoEngine):
        name = "stale"
        kept = None

        def __call__(self, batches, clock):
            if self.kept is None:
                self.kept = super().__call__(batches, clock)
            return self.kept

    class FailingEcho(EchoEngine):
        name = "failing"
        calls = 0

        def __call__(self, batches, clock):
            self.calls += 1
            if self.calls > 1:
                raise RuntimeError("out of memory")
            return super().__call__(batches, clock)

    with pytest.MonkeyPatch.context() as patch:
        for engine in (StaleEcho, FailingEcho):
            patch.setitem(engines.REGISTRY, engine.name, engine)
        params = StudyParams.from_dict({"device": "cpu", "engines": ["eager", "stale", "failing"], "layers": 1,
                                        "requests": 4, "batch_size": 4, "prompt_len": 8, "max_new_tokens": 3,
                                        "iterations": 2, "cycles": 1, "control_cycles": 1, "lr": 1.0,
                                        "profile": False, "instrument": True})
        return run_in_process(params)


def test_a_stale_replay_fails_parity_after_the_real_update_only_and_is_seen_to_give_the_old_weights_tokens(
        stale_study):
    result = stale_study
    control, real = result.updates
    assert (control.cycle, control.extra["control"], real.cycle, real.extra["control"]) == (0, True, 1, False)
    # the control cycle's forward and backward leave the weights, so the tokens, as they were; the step does not
    assert control.extra["requests_changed"] == 0 and real.extra["requests_changed"] > 0
    stale = [c for c in result.calls if c.engine == "stale"]
    assert len(stale) == (1 + 2) * 3 and all(c.parity.ok == (c.cycle == 0) for c in stale)
    after = [c for c in stale if c.cycle == 1]
    assert {c.phase for c in after} == {"first_after_update", "steady_after_update"}
    assert all(c.parity.extra["matches_weights_before_update"] is True for c in after)
    assert all("matches_weights_before_update" not in c.parity.extra for c in stale if c.cycle == 0)
    # every call's reference, not only each engine's last
    said = {(c.engine, c.parity.extra["reference"]) for c in result.calls if c.engine != "failing"}
    assert said == {("eager", "repeat of generate() (determinism)"), ("stale", "generate() with the same weights")}
    assert all(c.parity_ok for c in result.calls if c.engine == "eager") and not result.is_valid
    # what the throughput figures plot: the call's tokens (requests x new tokens) per second of its total
    assert all(c.generated_tokens == 4 * 3 and c.tokens_per_s == pytest.approx(12 / (c.total_ms / 1e3))
               for c in result.calls)


def test_an_engine_that_fails_is_recorded_once_a_phase_and_the_others_make_every_call(stale_study):
    result = stale_study
    failed = [(f.cycle, f.phase) for f in result.failures if f.engine == "failing"]
    assert failed == [(0, "steady"), (0, "first_after_update"), (0, "steady_after_update"),
                      (1, "first_after_update"), (1, "steady_after_update")]
    assert all("out of memory" in f.error for f in result.failures)
    assert [c.phase for c in result.calls if c.engine == "failing"] == ["first"]
    assert len([c for c in result.calls if c.engine == "eager"]) == (1 + 2) * 3  # cycle 0, then 2 updates
    # the eager engine's instrumented calls, beside untouched ones: their cost is the difference of the medians
    (row,) = result.extra["instrumented_calls"]
    assert row["engine"] == "eager" and len(row["untouched_ms"]) == len(row["instrumented_ms"]) == 3
    assert row["instrument_cost_ms"] == pytest.approx(
        statistics.median(row["instrumented_ms"]) - statistics.median(row["untouched_ms"]))


def test_an_update_refused_after_it_wrote_the_weights_is_recorded_as_applied(monkeypatch):
    from rollout_study import training
    from rollout_study.protocol import run_in_process

    def refused(self, rollout, apply=True):  # inf in the rollout weights, found after the in-place write
        raise training.NonFiniteUpdate("the rollout weights hold inf", weights_changed=True)

    monkeypatch.setattr(training.Trainer, "update", refused)
    params = StudyParams.from_dict({"device": "cpu", "engines": ["eager"], "requests": 1, "batch_size": 1,
                                    "prompt_len": 4, "max_new_tokens": 2, "iterations": 1, "cycles": 1,
                                    "control_cycles": 0, "profile": False, "instrument": False})
    result = run_in_process(params)
    (update,) = result.updates
    # the record says the weights changed, so the calls after it ran on weights no update stands behind
    assert update.extra["applied"] is True and update.loss is None and update.ms is None
    (failure,) = result.failures
    assert failure.phase == "update" and "inf" in failure.error and "traceback" not in failure.extra
