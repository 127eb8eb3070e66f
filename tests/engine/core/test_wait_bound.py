"""``--max-wait auto``: the wait bound follows the engine's turn service time (max(10 s, 3 x the
median of recent turns)); a number keeps a fixed bound; the queue's overdue test reads the bound in
force; the scheduler measures each finished turn."""

import random

import pytest

from agentgate.engine.core_parts import make_queue
from agentgate.engine.request import Request
from agentgate.engine.sampling_params import SamplingParams
from agentgate.engine.scheduling.wait_bound import MIN_WAIT_S, SERVICE_FACTOR, WaitBound, parse_max_wait
from tests.engine.core.test_retention import Clock, history, make_core, run, turn


def test_auto_is_the_floor_until_turns_take_longer_then_three_medians():
    bound = WaitBound("auto")
    assert bound.seconds == MIN_WAIT_S
    for seconds in (1.0, 2.0, 3.0):
        bound.observe(seconds)
    assert bound.seconds == MIN_WAIT_S  # 3 x 2 s is under the floor
    for seconds in (7.0, 20.0, 9.0, 12.0):
        bound.observe(seconds)
    assert bound.median_service == 7.0
    assert bound.seconds == SERVICE_FACTOR * 7.0


def test_a_number_keeps_a_fixed_bound_and_bad_values_are_refused():
    bound = WaitBound("2.5")
    bound.observe(100.0)
    assert bound.seconds == 2.5
    assert parse_max_wait("auto") is None
    for bad in ("0", "-1", "inf", "nan", "soon"):
        with pytest.raises(ValueError, match="max_wait"):
            parse_max_wait(bad)


@pytest.mark.parametrize("policy", ["program", "fcfs"])
def test_a_request_is_overdue_after_the_bound_in_force(policy):
    clock = Clock()
    queue = make_queue(policy, "auto")
    queue.clock = clock
    for _ in range(5):
        queue.bound.observe(8.0)  # turns of 8 s: the bound is 24 s
    request = Request("r", [5, 6, 7], SamplingParams(), seed=0, eos_token_ids=frozenset(), max_model_len=64)
    request.arrival_time = clock.now
    queue.push(request)
    queue.mark_passed(clock.now + 1.0)
    clock.now += 23.9
    assert not queue.overdue(request)
    clock.now += 0.1
    assert queue.overdue(request)


@pytest.mark.parametrize("policy", ["program", "fcfs"])
def test_the_queue_measures_each_wait_from_its_first_pass_to_its_admission(policy):
    """Waits of 4 s and 12 s from the first pass under a fixed 10 s bound: the longest is 12 s and one
    was past the bound; a request taken that was never passed adds nothing; a wait ends at admission
    (one preempted and queued again waits afresh)."""
    clock = Clock()
    queue = make_queue(policy, "10")
    queue.clock = clock
    short, long, unpassed = (
        Request(rid, [5, 6, 7], SamplingParams(), seed=0, eos_token_ids=frozenset(), max_model_len=64)
        for rid in ("short", "long", "unpassed")
    )
    for request in (short, long):
        request.arrival_time = clock.now
        queue.push(request)
    queue.mark_passed(clock.now + 1.0)
    clock.now += 4.0
    queue.take(short)
    assert (queue.longest_wait_passed, queue.num_waits_past_bound) == (4.0, 0)
    clock.now += 8.0
    queue.take(long)
    assert (queue.longest_wait_passed, queue.num_waits_past_bound) == (12.0, 1)
    assert long.passed_since is None
    unpassed.arrival_time = clock.now
    queue.push(unpassed)
    clock.now += 30.0
    queue.take(unpassed)
    assert (queue.longest_wait_passed, queue.num_waits_past_bound, len(queue)) == (12.0, 1, 0)


def test_the_scheduler_measures_each_finished_turn():
    core = make_core()
    rng = random.Random(1)
    for i in range(3):
        turn(core, f"t{i}", history(rng, 8), f"p{i}", max_tokens=3)
    run(core)
    bound = core.scheduler.waiting.bound
    assert len(bound._service) == 3
    assert core.scheduler.stats().max_wait_s == bound.seconds == MIN_WAIT_S
