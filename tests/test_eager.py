"""engines/eager.py: untouched generate() calls, and the instrumented split into prefill and decode."""
from __future__ import annotations

import torch

from rollout_study.engines.eager import EagerEngine
from rollout_study.reference import reference
from rollout_study.timing import CallClock
from rollout_study.workload import random_workload


def test_measured_calls_are_untouched_and_instrumented_ones_split_prefill_from_decode(tiny, call_parts):
    params, loaded = tiny()
    w = random_workload(4, 4, 16, params.vocab, seed=0)
    one, many = EagerEngine(loaded.model, "cpu", 1, 0), EagerEngine(loaded.model, "cpu", 16, 0)
    untouched = call_parts(many, w)
    assert untouched["prefill"] == 0 and untouched["decode"] == 0 and untouched["other"] > 0
    assert not loaded.model._forward_hooks and not loaded.model._forward_pre_hooks  # nothing left attached
    for engine in (one, many):
        engine.instrumented = True
    single = call_parts(one, w)
    assert single["prefill"] > 0 and single["decode"] == 0  # one new token: one forward, the prefill
    split = call_parts(many, w)
    assert split["decode"] > split["prefill"] > 0  # fifteen decode forwards outweigh one prefill
    assert not loaded.model._forward_hooks and not loaded.model._forward_pre_hooks


def test_each_batchs_first_forward_is_its_prefill_and_every_later_one_decode(tiny, call_parts):
    params, loaded = tiny()
    w = random_workload(4, 2, 16, params.vocab, seed=1)  # two batches: each call has two prefills
    one, two = EagerEngine(loaded.model, "cpu", 1, 0), EagerEngine(loaded.model, "cpu", 2, 0)
    for engine in (one, two):
        engine.instrumented = True
    single = call_parts(one, w)
    assert single["prefill"] > 0 and single["decode"] == 0  # the second batch's prefill is a prefill too
    split = call_parts(two, w)
    assert split["prefill"] > 0 and split["decode"] > 0  # the forward after each prefill is a decode step


def test_after_a_reload_the_engine_generates_with_the_new_model(tiny):
    params, loaded = tiny()
    _, reloaded = tiny(seed=1)  # other weights: other tokens
    w = random_workload(2, 2, 8, params.vocab, seed=0)
    engine = EagerEngine(loaded.model, "cpu", 4, 0)

    def tokens():
        return engine(w.batches, CallClock("cpu").start()).sequences

    old, new = (reference(m, w.batches, 4, 0, "cpu").output.sequences for m in (loaded.model, reloaded.model))
    assert not torch.equal(old[0], new[0])
    engine.weights_updated()  # told of an update, no new object: it reads the model it has
    assert all(map(torch.equal, tokens(), old))
    engine.weights_updated(reloaded.model)
    assert all(map(torch.equal, tokens(), new))
