"""Program-level scheduling (``--scheduling-policy program``) with the null runner: programs
go by the service they have had (least first), whatever start or name they pin; no request
waits past the stated bound under any policy, program admission included; preemption takes
the program served most."""

import random

import pytest

from agentgate.engine.core_parts import make_queue
from agentgate.engine.front.protocol import ProgramTag
from agentgate.engine.request import Request, RequestStatus
from agentgate.engine.sampling_params import SamplingParams
from agentgate.engine.scheduling.programs.admission import DECAY, HALF_LIFE_S, ProgramAdmission
from agentgate.engine.scheduling.programs.table import SERVICE_QUANTUM
from agentgate.engine.scheduling.waiting_queue import DEFAULT_MAX_WAIT_S
from tests.engine.core.test_retention import BLOCK, Clock, check_accounting, first_turn, history, make_core, run, turn


def admission_order(core, max_steps=10_000) -> list[str]:
    """Run to the end, one request at a time, returning the order requests were admitted in."""
    order = []
    for _ in range(max_steps):
        if not core.has_work:
            break
        before = set(r.request_id for r in core.scheduler.running)
        core.step()
        check_accounting(core)
        order += [r.request_id for r in core.scheduler.running if r.request_id not in before]
    assert not core.has_work
    return order


def start_programs(core, rng, programs, prompt=8, max_tokens=3, tools=True):
    """Each program's first turn, run to its end: ``prompt`` tokens and ``max_tokens`` served each
    (``prompt`` may map a program to its own); ``tools``: offered (its conversation is pinned)."""
    for name in programs:
        size = prompt[name] if isinstance(prompt, dict) else prompt
        turn(core, f"{name}-1", history(rng, size), name, max_tokens=max_tokens, tools=tools)
        run(core)
        core.clock.now += 1.0


def record(core, program):
    return core.scheduler.retention.programs.get(program)


def big_core(**options):
    """A core whose programs may be served levels of service in one turn (prompts of 2 quanta)."""
    return make_core(num_blocks=2 * SERVICE_QUANTUM + 256, max_num_batched_tokens=2 * SERVICE_QUANTUM + 64, **options)


def test_fcfs_keeps_arrival_order():
    rng = random.Random(2)
    core = make_core(policy="fcfs", max_num_seqs=1)
    start_programs(core, rng, ["old"])
    for i in range(3):
        turn(core, f"new{i}-1", history(rng, 8), f"new{i}")
    turn(core, "old-2", history(rng, 8), "old", after=True)
    assert admission_order(core) == ["new0-1", "new1-1", "new2-1", "old-2"]


def test_a_turn_goes_ahead_of_programs_a_level_above_whatever_their_start():
    """Three programs started in the order c, b, a, served into levels 2, 1 and 0 (a program's rank:
    its level, then its entry into it); their next turns arrive in that order and go a, b, c."""
    rng = random.Random(1)
    core = big_core(policy="program", max_num_seqs=1)
    sizes = {"c": 2 * SERVICE_QUANTUM - 3, "b": SERVICE_QUANTUM, "a": 8}  # 3 tokens sampled each
    start_programs(core, rng, ["c", "b", "a"], prompt=sizes, tools=False)
    assert [record(core, p).level for p in "cba"] == [2, 1, 0]
    for name in "cba":
        turn(core, f"{name}-2", history(rng, 8), name, after=True)
        core.clock.now += 0.1
    assert admission_order(core) == ["a-2", "b-2", "c-2"]


def test_within_a_level_the_program_that_entered_it_first_goes_first():
    """Programs served alike keep their order: each returning turn goes ahead of programs that
    started after its own, whatever the order the turns arrive in (old, new0, new1)."""
    rng = random.Random(14)
    core = make_core(policy="program", max_num_seqs=1)
    start_programs(core, rng, ["old", "new0", "new1"])
    for name in ("new1", "new0", "old"):
        turn(core, f"{name}-2", history(rng, 8), name, after=True)
        core.clock.now += 0.1
    assert admission_order(core) == ["old-2", "new0-2", "new1-2"]


def test_a_constant_user_does_not_outrank_fresh_programs_of_another_key():
    """A program named by a constant ``user`` (one program id for ever) started long before the fresh
    programs and has been served a level's worth since; its next turn, sent first, goes after theirs."""
    rng = random.Random(11)
    core = big_core(policy="program", max_num_seqs=1)
    start_programs(core, rng, ["user:bob"], prompt=SERVICE_QUANTUM // 2, tools=False)
    for i in range(2):  # bob keeps working
        turn(core, f"bob-{i}", history(rng, SERVICE_QUANTUM // 4), "user:bob", after=True)
        run(core)
        core.clock.now += 0.2
    turn(core, "bob-next", history(rng, 8), "user:bob", after=True)
    for i in range(3):
        core.clock.now += 0.1
        turn(core, f"fresh{i}-1", history(rng, 8), f"cache:fresh{i}")
    assert admission_order(core) == ["fresh0-1", "fresh1-1", "fresh2-1", "bob-next"]


@pytest.mark.parametrize("program", [True, False], ids=["rotating-ids", "no-program"])
def test_a_key_that_rotates_its_program_ids_does_not_outrank_another_keys_program(program):
    """Key A served two levels' worth under a fresh program id each turn (or none); its next fresh
    id, sent first, starts no key afresh: key B's new program, sent after it, goes first (issue 50).
    Without the key's account, A's fresh program would rank level 0 with the earlier start."""
    rng = random.Random(12)
    core = big_core(policy="program", max_num_seqs=1)
    for i in range(3):
        turn(core, f"a-{i}", history(rng, SERVICE_QUANTUM // 2), f"user:rot{i}" if program else None, tenant="A")
        run(core)
        core.clock.now += 0.2
    assert record(core, "key\0A").level >= 1
    turn(core, "a-next", history(rng, 8), "user:rot-next" if program else None, tenant="A")
    core.clock.now += 0.1
    turn(core, "b-1", history(rng, 8), "cache:b", tenant="B")
    assert admission_order(core) == ["b-1", "a-next"]


def test_a_program_served_ten_times_more_than_the_others_goes_behind_them():
    rng = random.Random(12)
    core = big_core(policy="program", max_num_seqs=1)
    sizes = {"heavy": SERVICE_QUANTUM + 100, "x": SERVICE_QUANTUM // 10, "y": SERVICE_QUANTUM // 10}
    start_programs(core, rng, ["heavy", "x", "y"], prompt=sizes, tools=False)
    assert record(core, "heavy").service >= 10 * max(record(core, "x").service, record(core, "y").service)
    for name in ("heavy", "x", "y"):  # the heavy one's turn arrives first
        turn(core, f"{name}-2", history(rng, 8), name, after=True)
        core.clock.now += 0.1
    assert admission_order(core) == ["x-2", "y-2", "heavy-2"]


def test_a_program_away_longer_than_its_retention_starts_again_as_new():
    """Under a fixed 5 s retention, "heavy" (level 2) back after 4 s is still behind "busy" (level 1);
    back after 6 s (busy having come by meanwhile) it starts again at level 0, ahead of it."""
    rng = random.Random(13)
    core = big_core(policy="program", max_num_seqs=1, retention="5")
    sizes = {"heavy": 2 * SERVICE_QUANTUM - 3, "busy": SERVICE_QUANTUM}
    start_programs(core, rng, ["heavy", "busy"], prompt=sizes, tools=False)
    core.clock.now += 2.0  # the heavy program's turn ended 4 s ago
    turn(core, "busy-2", history(rng, 8), "busy")
    core.clock.now += 0.1
    turn(core, "heavy-2", history(rng, 8), "heavy")
    assert admission_order(core) == ["busy-2", "heavy-2"]
    core.clock.now += 3.0
    turn(core, "busy-3", history(rng, 8), "busy")
    run(core)
    core.clock.now += 3.0  # the heavy program's last turn ended 6 s ago, busy's 3 s ago
    turn(core, "busy-4", history(rng, 8), "busy")
    core.clock.now += 0.1
    turn(core, "heavy-4", history(rng, 8), "heavy")
    assert (record(core, "heavy").service, record(core, "heavy").level) == (0, 0)
    assert record(core, "busy").level == 1
    assert admission_order(core) == ["heavy-4", "busy-4"]


def test_a_turn_waits_at_most_the_bound_behind_programs_ranked_before_it():
    """Two light programs return faster than they are served (two turns a second, one served); a
    heavy program's turn, a level behind them, goes ahead once it has waited the bound."""
    rng = random.Random(3)
    core = big_core(policy="program", max_num_seqs=1)
    start_programs(core, rng, ["heavy", "a", "b"], prompt={"heavy": SERVICE_QUANTUM, "a": 8, "b": 8}, tools=False)
    turn(core, "heavy-2", history(rng, 8), "heavy", after=True)
    arrived = core.clock.now
    for i in range(2, 40):
        for name in ("a", "b"):
            turn(core, f"{name}-{i}", history(rng, 8), name, after=True)
        core.step()
        [head] = core.scheduler.running
        if head.request_id == "heavy-2":
            break
        while core.scheduler.running:
            core.step()
        core.clock.now += 1.0
    waited = core.clock.now - arrived
    bound = core.scheduler.waiting.max_wait  # the bound in force (auto: from the turns' service times)
    assert head.request_id == "heavy-2", "the heavy program's turn starved"
    assert bound <= waited <= bound + 1.0
    run(core)
    check_accounting(core)


def starved_wait(policy: str, horizon: float = 150.0) -> tuple[float | None, float]:
    """Seconds a new program's 8-token turn waits while an older program, whose conversation takes
    38 of the 64 blocks (retention may hold 0.8 of them), loops on 1 s tool gaps (None: not
    admitted within ``horizon``), and the wait bound in force then."""
    rng = random.Random(8)
    core = make_core(num_blocks=64, fraction=0.8, policy=policy)
    conversation = history(rng, 150)
    turn(core, "old-1", conversation, "old")
    run(core)
    core.turn_ended("old", "old-1", ["run_tests"])
    core.clock.now += 0.5
    turn(core, "new-1", history(rng, 8), "new")
    arrived = core.clock.now
    for i in range(2, 10_000):
        core.clock.now += 0.5  # the tool's second ends
        turn(core, f"old-{i}", conversation + history(rng, 4), "old", after=True)
        while f"old-{i}" in core.scheduler.requests:
            core.step()
            check_accounting(core)
            new = core.scheduler.requests.get("new-1")
            if new is None or new.status is RequestStatus.RUNNING:
                # The engine measured its wait from its first pass: by program, old's turns passed it
                # (by fcfs none did: it waited at the head for memory the pin held).
                passed = core.stats().longest_wait_passed_s
                assert passed <= core.clock.now - arrived and (passed > 0) == (policy == "program")
                return core.clock.now - arrived, core.scheduler.waiting.max_wait
        core.turn_ended("old", f"old-{i}", ["run_tests"])
        core.clock.now += 0.5
        if core.clock.now - arrived > horizon:
            return None, core.scheduler.waiting.max_wait
    raise AssertionError("unreachable")


@pytest.mark.parametrize("policy", ["program", "fcfs"])
def test_a_program_looping_on_tools_keeps_no_new_program_waiting_past_the_bound(policy):
    """Issue 35: program admission held the new program for as long as the old one looped (over
    120 s); now the wait bound holds for it too."""
    waited, bound = starved_wait(policy)
    print(f"\n{policy}: the new program's turn waited {waited} s (bound in force {bound} s)")
    assert bound >= DEFAULT_MAX_WAIT_S
    assert waited is not None and waited <= bound + 1.0


def test_preemption_takes_the_program_ranked_last():
    """Two programs' turns outgrow memory together. The heavy program's turn, admitted first (fcfs
    would preempt the other, admitted last), is the one preempted: its program was served a level
    more."""
    rng = random.Random(4)
    core = make_core(num_blocks=24, policy="program", retention="off", max_num_batched_tokens=256)
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    # The heavy program was served a level's worth before (its turns then are not the point here).
    core.scheduler.retention.programs.touch("heavy", core.clock()).serve(SERVICE_QUANTUM, core.clock())
    core.clock.now += 1.0
    core.add_request("heavy-1", history(rng, 20), params, arrival_time=core.clock(), program=ProgramTag("heavy"))
    core.step()
    core.add_request("light-1", history(rng, 20), params, arrival_time=core.clock(), program=ProgramTag("light"))
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
    assert set(preempted) == {"heavy-1"}


def test_memory_goes_by_the_keys_rank_before_the_programs():
    """Issue 50: under pressure the program policy ranks as its waiting queue does, the API key's
    attained service first. Key "heavy" was served a level's worth; its programs are fresh and
    entered their level before key "light"'s: the running request of the heavy key is preempted,
    and a light key's request may take the heavy key's pins (by program ranks alone, neither)."""
    rng = random.Random(14)
    core = make_core(num_blocks=24, policy="program", retention="off", max_num_batched_tokens=256)
    core.scheduler.retention.programs.touch("key\0heavy", core.clock()).serve(SERVICE_QUANTUM, core.clock())
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    core.add_request(
        "heavy-1", history(rng, 20), params, arrival_time=core.clock(), program=ProgramTag("h"), tenant="heavy"
    )
    core.step()
    core.clock.now += 1.0
    core.add_request(
        "light-1", history(rng, 20), params, arrival_time=core.clock(), program=ProgramTag("l"), tenant="light"
    )
    heavy, light = core.scheduler.requests["heavy-1"], core.scheduler.requests["light-1"]
    assert heavy.served.rank < light.served.rank and heavy.rank > light.rank  # the programs' order, the keys'
    assert core.scheduler.memory.victim([heavy, light]) is heavy
    preempted = set()
    while core.has_work:
        core.step()
        check_accounting(core)
        preempted |= {
            r
            for r in ("heavy-1", "light-1")
            if getattr(core.scheduler.requests.get(r), "status", None) == RequestStatus.PREEMPTED
        }
    assert core.scheduler.num_preemptions > 0 and preempted == {"heavy-1"}

    pinned = make_core(num_blocks=64, policy="program")
    pinned.scheduler.retention.programs.touch("key\0heavy", pinned.clock()).serve(SERVICE_QUANTUM, pinned.clock())
    turn(pinned, "h-1", history(rng, 16), "h", tenant="heavy")
    run(pinned)
    pinned.clock.now += 1.0
    turn(pinned, "l-1", history(rng, 16), "l", tenant="light", max_tokens=30)
    pinned.step()
    later = pinned.scheduler.requests["l-1"]
    retention = pinned.scheduler.retention
    assert [
        p.program_id for p in retention.release_order("l", ranked_after=pinned.scheduler.memory.ranked_after(later))
    ] == ["h"]
    run(pinned)


@pytest.mark.parametrize("policy", ["program", "fcfs"])
def test_a_less_served_programs_pin_outlives_a_more_served_programs_pressure_only_by_program(policy):
    """Two running turns of a program outgrow memory while another program, served less, has its
    conversation pinned. By program the busy program yields (one of its turns is preempted, the
    pin stays) and the pinned program's returning turn hits its whole conversation; by fcfs the
    pin goes first."""
    rng = random.Random(5)
    core = make_core(num_blocks=24, policy=policy)
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


@pytest.mark.parametrize("heaviest", ["a", "c", None])
def test_by_program_the_pin_bound_releases_the_pins_of_programs_ranked_last_first(heaviest):
    """Three programs' first turns end in turn; the third pin passes the bound (10 blocks), and the pin
    of the program ranked last goes: the one served a level more, whether it ended first or last; among
    programs served alike (issue 51: pins yield by cost), the least expected loss: pins of one size,
    the program away longest (a), whose return within the horizon the gap law makes least likely."""
    rng = random.Random(6)
    core = make_core(num_blocks=64, fraction=10 / 64, policy="program")
    if heaviest is not None:
        core.scheduler.retention.programs.touch(heaviest, core.clock()).serve(SERVICE_QUANTUM, core.clock())
    for name in ("a", "b", "c"):
        turn(core, f"{name}-1", history(rng, 16), name)
        run(core)
        core.clock.now += 1.0
    assert sorted(core.scheduler.retention.pins) == sorted({"a", "b", "c"} - {heaviest or "a"})


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


def test_the_expected_program_size_fades_with_time_as_well_as_with_turns():
    """A 40-block conversation ended: a new program is held beside an active one (2 x 40 > 64
    blocks); half a life later, no turn having ended since, the size expected is 20 and it starts."""
    clock = Clock()
    admission = ProgramAdmission(64, BLOCK, clock=clock)
    admission.turn_ended(40)
    new = Request(
        "new-1",
        list(range(3, 11)),
        SamplingParams(),
        seed=0,
        eos_token_ids=frozenset(),
        max_model_len=256,
        program=ProgramTag("new"),
    )
    assert not admission.admits(new, {"active"})
    clock.now += HALF_LIFE_S
    assert admission.largest == pytest.approx(20.0)
    assert admission.admits(new, {"active"})
    admission.turn_ended(10)  # a turn end decays it by DECAY too, and keeps the larger
    assert admission.largest == pytest.approx(20.0 * DECAY)


@pytest.mark.parametrize("policy", ["program", "fcfs"])
def test_the_wait_bound_counts_from_the_first_time_a_later_request_passes(policy):
    """A turn that waits while nothing that came after it is admitted keeps its place in the order
    (a slow queue is not turned into arrival order); once a later one passes it, it is overdue
    ``max_wait`` seconds on."""
    clock = Clock()
    queue = make_queue(policy, max_wait=DEFAULT_MAX_WAIT_S)
    queue.clock = clock
    early, late = (
        Request(
            rid,
            [5, 6, 7],
            SamplingParams(),
            seed=0,
            eos_token_ids=frozenset(),
            max_model_len=64,
            arrival_time=clock.now + i,
        )
        for i, rid in enumerate(("early", "late"))
    )
    queue.push(early)
    clock.now += 100.0
    assert not queue.overdue(early)
    queue.mark_passed(late.arrival_time)
    clock.now += DEFAULT_MAX_WAIT_S - 0.1
    assert not queue.overdue(early)
    clock.now += 0.1
    assert queue.overdue(early)


@pytest.mark.parametrize("overwritten", [True, False])
def test_a_program_whose_conversation_pressure_took_returns_as_a_new_program_does(overwritten):
    """Issue 51: two programs' pins pass the pin bound and one goes. When other work then reuses its
    blocks, its next turn, which would recompute its conversation, is no longer an active program's:
    it waits while the other's expected size and its own pass the cache, and starts once the other
    ends. While its blocks are still cached it is active and starts at once, hitting them."""
    rng = random.Random(9)
    core = make_core(num_blocks=20, fraction=5 / 20, policy="program")
    conversations = {}
    for name in ("a", "b"):
        conversations[name] = first_turn(core, rng, name, n=16)
        core.clock.now += 1.0
    retention = core.scheduler.retention
    [kept] = retention.pins
    [lost] = retention.evicted
    assert {kept, lost} == {"a", "b"} and retention.counts.released_pressure == 1
    if overwritten:
        turn(core, "other", history(rng, 59))  # no program: 16 blocks with its reply, all the free ones
        run(core)
    turn(core, f"{lost}-2", conversations[lost] + history(rng, 6), lost, after=True)
    core.step()
    check_accounting(core)
    returned = core.scheduler.requests[f"{lost}-2"]
    if not overwritten:
        assert returned.status is RequestStatus.RUNNING and returned.num_cached_tokens == 16
        return
    assert returned.status is RequestStatus.WAITING, "a program whose conversation was lost is not active"
    turn(core, f"{kept}-2", history(rng, 24), kept, after=True)  # its last turn: no tool call
    finished = []
    for _ in range(200):
        for out in core.step():
            if out.finish_reason:
                finished.append(out.request_id)
                if out.request_id == f"{kept}-2":
                    core.turn_ended(kept, out.request_id, [])
        check_accounting(core)
        if f"{lost}-2" in finished:
            break
    assert finished == [f"{kept}-2", f"{lost}-2"]
    assert returned.num_cached_tokens < 16
