"""Program-level scheduling (``--scheduling-policy program``) with the null runner: a
returning turn goes ahead of newer programs, no request starves past the stated bound,
and preemption takes the program that started last."""

import random

import pytest

from agentgate.engine.protocol import ProgramTag
from agentgate.engine.sampling_params import SamplingParams
from agentgate.engine.waiting_queue import DEFAULT_MAX_WAIT_S
from tests.engine.core.test_retention import check_accounting, history, make_core, run, turn


def admission_order(core) -> list[str]:
    """Run to the end, one request at a time, returning the order requests were admitted in."""
    order = []
    while core.has_work:
        before = set(r.request_id for r in core.scheduler.running)
        core.step()
        check_accounting(core)
        order += [r.request_id for r in core.scheduler.running if r.request_id not in before]
    return order


def start_programs(core, rng, programs):
    for name in programs:
        turn(core, f"{name}-1", history(rng, 8), name)
        run(core)
        core.clock.now += 1.0


def test_a_returning_turn_goes_ahead_of_programs_that_started_after_it():
    rng = random.Random(1)
    core = make_core(policy="program", max_num_seqs=1)
    core.scheduler.waiting.clock = core.clock
    start_programs(core, rng, ["old"])
    for i in range(3):  # three new programs arrive first, then the old one returns
        turn(core, f"new{i}-1", history(rng, 8), f"new{i}")
        core.clock.now += 0.1
    turn(core, "old-2", history(rng, 8), "old", after=True)
    assert admission_order(core) == ["old-2", "new0-1", "new1-1", "new2-1"]


def test_fcfs_keeps_arrival_order():
    rng = random.Random(2)
    core = make_core(policy="fcfs", max_num_seqs=1)
    start_programs(core, rng, ["old"])
    for i in range(3):
        turn(core, f"new{i}-1", history(rng, 8), f"new{i}")
    turn(core, "old-2", history(rng, 8), "old", after=True)
    assert admission_order(core) == ["new0-1", "new1-1", "new2-1", "old-2"]


def test_a_new_program_waits_at_most_the_bound_behind_older_programs():
    rng = random.Random(3)
    core = make_core(policy="program", max_num_seqs=1)
    core.scheduler.waiting.clock = core.clock
    start_programs(core, rng, ["a", "b"])
    turn(core, "late-1", history(rng, 8), "late")
    arrived = core.clock.now
    # Older programs return faster than they are served: two turns a second, one served.
    for i in range(2, 40):
        for name in ("a", "b"):
            turn(core, f"{name}-{i}", history(rng, 8), name, after=True)
        core.step()
        [head] = core.scheduler.running
        if head.request_id == "late-1":
            break
        while core.scheduler.running:
            core.step()
        core.clock.now += 1.0
    waited = core.clock.now - arrived
    assert head.request_id == "late-1", "the new program starved"
    assert DEFAULT_MAX_WAIT_S <= waited <= DEFAULT_MAX_WAIT_S + 1.0
    run(core)
    check_accounting(core)


def test_preemption_takes_the_program_that_started_last():
    rng = random.Random(4)
    core = make_core(num_blocks=24, policy="program", retention="off", max_num_batched_tokens=256)
    core.clock.now += 0.0
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    # "young" is admitted first but its program is younger than "elder"'s.
    core.add_request(
        "elder-0", history(rng, 4), SamplingParams(max_tokens=1), arrival_time=core.clock(), program=ProgramTag("elder")
    )
    run(core)
    core.clock.now += 5.0
    core.add_request("young-1", history(rng, 20), params, arrival_time=core.clock(), program=ProgramTag("young"))
    core.step()
    core.add_request("elder-1", history(rng, 20), params, arrival_time=core.clock(), program=ProgramTag("elder"))
    preempted = []
    while core.has_work:
        before = {r.request_id for r in core.scheduler.running}
        core.step()
        check_accounting(core)
        preempted += [
            r
            for r in before
            if core.scheduler.requests.get(r) is not None and core.scheduler.requests[r].status.value == "preempted"
        ]
    assert core.scheduler.num_preemptions > 0
    assert set(preempted) == {"young-1"}


@pytest.mark.parametrize("policy", ["program", "fcfs"])
def test_an_older_programs_pin_outlives_a_younger_programs_pressure_only_by_program(policy):
    """Two running turns of a young program outgrow memory while an older program's conversation
    is pinned. By program the young program yields (one of its turns is preempted, the pin stays)
    and the old program's returning turn hits its whole conversation; by fcfs the pin goes first."""
    rng = random.Random(5)
    core = make_core(num_blocks=24, policy=policy)
    core.scheduler.waiting.clock = core.clock
    old_prompt = history(rng, 32)
    turn(core, "old-1", old_prompt, "old")
    run(core)
    assert "old" in core.scheduler.retention.pins
    core.clock.now += 1.0
    for name in ("y-a", "y-b"):
        turn(core, name, history(rng, 16), "young", max_tokens=30)
    for _ in range(200):
        if core.scheduler.num_preemptions or "old" not in core.scheduler.retention.pins:
            break
        core.step()
        check_accounting(core)
    turn(core, "old-2", old_prompt + history(rng, 8), "old", after=True)
    finished = run(core)
    _, cached = finished["old-2"]
    if policy == "program":
        assert core.scheduler.num_preemptions > 0
        assert cached == len(old_prompt)
    else:
        assert cached < len(old_prompt)
    assert set(finished) >= {"y-a", "y-b", "old-2"}


def test_by_program_the_pin_bound_releases_the_youngest_programs_pins_first():
    rng = random.Random(6)
    core = make_core(num_blocks=64, fraction=10 / 64, policy="program")
    core.scheduler.waiting.clock = core.clock
    for name in ("a", "b", "c"):  # c's program starts last; its turn ends last
        turn(core, f"{name}-1", history(rng, 16), name)
        run(core)
        core.clock.now += 1.0
    assert sorted(core.scheduler.retention.pins) == ["a", "b"]


@pytest.mark.parametrize("policy", ["program", "fcfs"])
def test_by_program_new_programs_start_only_while_the_active_ones_fit(policy):
    """Four programs arrive at once; each is expected to reach twice its first prompt (8 of 20
    blocks). By program two start and the other two once those are done; by fcfs all four."""
    rng = random.Random(7)
    core = make_core(num_blocks=20, policy=policy)
    core.scheduler.waiting.clock = core.clock
    for name in "abcd":
        turn(core, f"{name}-1", history(rng, 16), name, tools=False)
        core.clock.now += 0.1
    core.step()
    check_accounting(core)
    started = sorted(r.request_id for r in core.scheduler.running)
    assert started == (["a-1", "b-1"] if policy == "program" else ["a-1", "b-1", "c-1", "d-1"])
    assert set(run(core)) == {"a-1", "b-1", "c-1", "d-1"}  # the two held back start once the first end
