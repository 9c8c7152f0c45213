import time

import pytest

from rollout_study.timing import CallClock


def test_parts_are_disjoint_and_other_is_the_rest():
    clock = CallClock("cpu").start()
    with clock.part("capture"):
        time.sleep(0.02)
    time.sleep(0.01)
    with clock.device_part("decode"):  # without CUDA a device part is a synchronized part
        time.sleep(0.02)
    total, parts = clock.stop()
    assert total >= 50  # measured from start to stop, not as the sum of the parts
    assert parts["capture"] >= 20 and parts["decode"] >= 20 and parts["other"] >= 9  # the sleep between parts
    assert parts["warmup"] == 0 and parts["allocation"] == 0


def test_nested_parts_are_refused():
    clock = CallClock("cpu").start()
    with pytest.raises(RuntimeError, match="disjoint"):
        with clock.part("prefill"):
            with clock.part("decode"):
                pass


def test_unknown_part_is_refused():
    clock = CallClock("cpu").start()
    with pytest.raises(ValueError, match="unknown part"):
        with clock.part("other"):
            pass


def test_parts_beyond_the_total_are_flagged_not_clamped():
    clock = CallClock("cpu").start()
    time.sleep(0.01)
    clock.add("decode", 1.0)  # a part charged twice or from elsewhere: a second more than the call took
    total, parts = clock.stop()
    assert parts["other"] < -900 and total < 100  # kept negative, the total still the measured one
    check = clock.overlap_check(parts)
    assert check["flagged"] and check["overlap_ms"] == pytest.approx(-parts["other"])
    honest = CallClock("cpu").start()
    with honest.part("prefill"):
        time.sleep(0.005)
    assert not honest.overlap_check(honest.stop()[1])["flagged"]
