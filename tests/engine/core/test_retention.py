"""KV retention for programs waiting on tools, driven by the null runner (no model): pins
survive pressure up to their bound, expire at their TTL, are released in the stated order
and never take a running request's blocks; the KV accounting is exact after every step."""

import random

import pytest

from agentgate.engine.config import EngineConfig
from agentgate.engine.core import EngineCore
from agentgate.engine.front.protocol import ProgramTag
from agentgate.engine.runner.null import NullRunner
from agentgate.engine.sampling_params import SamplingParams
from agentgate.engine.scheduling.retention import GRACE_S
from agentgate.engine.scheduling.tool_gaps import PRIOR, GapLaw

VOCAB = 1000
BLOCK = 4


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_core(*, num_blocks=64, retention="auto", fraction=0.5, policy="fcfs", in_flight=1, **limits):
    config = EngineConfig(
        block_size=BLOCK,
        max_num_seqs=limits.get("max_num_seqs", 64),
        max_num_batched_tokens=limits.get("max_num_batched_tokens", 64),
        kv_retention=retention,
        kv_retention_max_fraction=fraction,
        scheduling_policy=policy,
    )
    runner = NullRunner(num_blocks=num_blocks, block_size=BLOCK, vocab_size=VOCAB, max_steps_in_flight=in_flight)
    core = EngineCore(config, runner)
    clock = Clock()
    core.scheduler.retention.clock = clock
    core.scheduler.retention.wall_clock = clock
    core.scheduler.waiting.clock = clock  # program admission reads the queue's clock too
    core.clock = clock
    return core


def check_accounting(core: EngineCore) -> None:
    """Every block free or held, with exact reference and pin counts; held pins within the bound."""
    retention = core.scheduler.retention
    pins = [pin.blocks for pin in retention.pins.values()]
    assert core.scheduler.kv.accounting_errors(pins) == []
    assert retention.held_blocks == len({b.block_id for blocks in pins for b in blocks})
    assert retention.held_blocks <= retention.max_held_blocks


def run(core: EngineCore, max_steps=10_000) -> dict[str, tuple[list[int], int]]:
    """Step until idle, checking the accounting after every step: request id -> (tokens, cached)."""
    finished, tokens, cached = {}, {}, {}
    for _ in range(max_steps):
        if not core.has_work:
            break
        for out in core.step():
            tokens.setdefault(out.request_id, []).extend(out.new_token_ids)
            cached[out.request_id] = out.num_cached_tokens
            if out.finish_reason:
                finished[out.request_id] = (tokens.pop(out.request_id), cached[out.request_id])
        check_accounting(core)
    assert not core.has_work
    return finished


def turn(core, rid, prompt, program=None, *, after=False, tools=True, max_tokens=3, tenant=""):
    tag = ProgramTag(program, tools_offered=tools, after_tool_calls=after) if program else None
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    core.add_request(rid, prompt, params, arrival_time=core.clock(), program=tag, tenant=tenant)


def history(rng, n):
    return [rng.randrange(3, VOCAB) for _ in range(n)]


def first_turn(core, rng, program, n=40, tools=("search",), tenant=""):
    """A program's first turn, run to its end, the gateway telling what it called."""
    prompt = history(rng, n)
    turn(core, f"{program}-1", prompt, program, tenant=tenant)
    out = run(core)[f"{program}-1"]
    core.turn_ended(program, f"{program}-1", list(tools))
    return prompt + out[0]


def flood(core, rng, count=12, n=40):
    """New traffic (no program) that needs far more blocks than are free."""
    for i in range(count):
        turn(core, f"flood-{rng.random()}-{i}", history(rng, n))
    run(core)


@pytest.mark.parametrize("mode", ["auto", "30", "off"])
def test_returning_turn_hits_its_pinned_history_after_pressure_only_with_retention(mode):
    rng = random.Random(1)
    core = make_core(retention=mode)
    conversation = first_turn(core, rng, "agent")
    pinned = core.stats().retention.held_blocks
    assert pinned == (0 if mode == "off" else 40 // BLOCK)
    flood(core, rng)  # 12 x 11 blocks through a 64-block cache
    core.clock.now += 0.3
    turn(core, "agent-2", conversation + history(rng, 6), "agent", after=True)
    _, cached = run(core)["agent-2"]
    if mode == "off":
        assert cached == 0, "the flood should have evicted an unpinned history"
    else:
        assert cached == 40, "the pinned history was not hit"
        stats = core.stats().retention
        assert stats.pins == 1 and stats.released_returned == 1 and stats.pinned_total == 2
        assert core.scheduler.retention.pins["agent"].request_id == "agent-2", "the new turn holds the pin"
        assert stats.returning_turns == 1 and stats.returning_hits_tokens == 40
    core.scheduler.retention.release_all()
    assert core.scheduler.kv.num_free_blocks == 64


def test_pins_expire_at_their_ttl_and_not_before():
    rng = random.Random(2)
    core = make_core(retention="5")
    first_turn(core, rng, "agent")
    retention = core.scheduler.retention
    assert retention.pins["agent"].expires == pytest.approx(core.clock.now + 5)
    core.clock.now += 4.99
    core.stats()
    assert "agent" in retention.pins
    core.clock.now += 0.02
    assert core.stats().retention.released_expired == 1 and not retention.pins
    check_accounting(core)
    assert core.scheduler.kv.num_free_blocks == 64


def test_a_turn_without_tool_calls_releases_its_pin_and_an_unanswered_one_lasts_the_grace():
    rng = random.Random(3)
    core = make_core()
    first_turn(core, rng, "chatty", tools=())
    assert core.stats().retention.released_no_tool_call == 1 and core.stats().retention.pins == 0
    turn(core, "silent-1", history(rng, 20), "silent")
    run(core)  # no TurnEnded: provisional
    core.clock.now += GRACE_S - 0.01
    assert core.stats().retention.pins == 1
    core.clock.now += 0.02
    assert core.stats().retention.pins == 0
    turn(core, "untooled-1", history(rng, 20), "untooled", tools=False)
    run(core)
    assert core.stats().retention.pins == 0, "a turn offered no tools is not pinned"


def test_auto_ttl_starts_from_the_prior_and_learns_per_program_and_tool():
    rng = random.Random(4)
    core = make_core(num_blocks=256)
    retention = core.scheduler.retention
    conversation = first_turn(core, rng, "a", n=8, tools=("fetch",))
    assert retention.pins["a"].expires - core.clock.now == pytest.approx(PRIOR.ttl())
    for i in range(2, 8):  # "a" always returns 4 s after calling fetch
        core.clock.now += 4.0
        turn(core, f"a-{i}", conversation + history(rng, 2), "a", after=True)
        conversation = conversation + history(rng, 2) + run(core)[f"a-{i}"][0]
        core.turn_ended("a", f"a-{i}", ["fetch"])
    ttl = retention.pins["a"].expires - core.clock.now
    assert ttl == pytest.approx(retention.gaps.law("a", "fetch").ttl())
    assert 4.0 < ttl < PRIOR.ttl() * 4 and ttl != pytest.approx(PRIOR.ttl())
    # Another program calling fetch starts from fetch's law, not from the prior.
    first_turn(core, rng, "b", n=8, tools=("fetch",))
    assert retention.pins["b"].expires - core.clock.now == pytest.approx(retention.gaps.law(None, "fetch").ttl())
    assert core.stats().retention.tool_gaps == 6


def test_tool_gap_laws_are_keyed_by_tenant_and_tool():
    """Issue 50: two keys' tools of the same name are two tools: one key's habits with its tool form
    no law another key's pins are given (the global law, everyone's gaps pooled, stays the prior of all)."""
    rng = random.Random(6)
    core = make_core(num_blocks=256)
    retention = core.scheduler.retention
    conversation = first_turn(core, rng, "a", n=8, tools=("fetch",), tenant="key-a")
    for i in range(2, 8):  # key-a's program always returns 20 s after calling fetch
        core.clock.now += 20.0
        turn(core, f"a-{i}", conversation + history(rng, 2), "a", after=True, tenant="key-a")
        conversation = conversation + history(rng, 2) + run(core)[f"a-{i}"][0]
        core.turn_ended("a", f"a-{i}", ["fetch"])
    learned = retention.gaps.law(None, "key-a/fetch").ttl()
    assert learned > PRIOR.ttl()
    first_turn(core, rng, "b", n=8, tools=("fetch",), tenant="key-b")  # another key's fetch
    assert retention.pins["b"].expires - core.clock.now == pytest.approx(retention.gaps.law(None, "key-b/fetch").ttl())
    assert retention.gaps._tools.peek("key-b/fetch") is None  # no law of key-a's fetch serves key-b
    assert retention.pins["b"].expires - core.clock.now != pytest.approx(learned)
    first_turn(core, rng, "c", n=8, tools=("fetch",), tenant="key-a")  # the same key's fetch
    assert retention.pins["c"].expires - core.clock.now == pytest.approx(learned)


def test_pins_stay_within_the_bound_releasing_the_least_likely_to_return_first():
    rng = random.Random(5)
    core = make_core(num_blocks=40, fraction=0.5)  # at most 20 blocks pinned
    retention = core.scheduler.retention
    # Teach the engine: "quick" returns after ~0.5 s, "slow" after ~30 s.
    retention.gaps.observe("x", "quick", 0.5)
    retention.gaps.observe("x", "slow", 30.0)
    for _ in range(5):
        retention.gaps.observe("y", "quick", 0.5)
        retention.gaps.observe("y", "slow", 30.0)
    first_turn(core, rng, "q1", n=24, tools=("quick",))  # 6 blocks each
    first_turn(core, rng, "s1", n=24, tools=("slow",))
    first_turn(core, rng, "q2", n=24, tools=("quick",))
    assert set(retention.pins) == {"q1", "s1", "q2"} and retention.held_blocks == 18
    first_turn(core, rng, "q3", n=24, tools=("quick",))  # 24 > 20: one must go
    assert set(retention.pins) == {"q1", "q2", "q3"}, "the slow tool's pin should go first"
    quick, slow = GapLaw(-0.69, 0.5), GapLaw(3.4, 0.5)
    assert quick.return_soon(0.0) > slow.return_soon(0.0)
    check_accounting(core)


def test_pressure_from_a_running_request_releases_pins_before_preempting_and_new_programs_wait():
    rng = random.Random(6)
    core = make_core(num_blocks=32, fraction=0.5)
    first_turn(core, rng, "p1", n=32)  # 8 blocks
    first_turn(core, rng, "p2", n=32)  # 8 blocks: 16 held, 16 free
    retention = core.scheduler.retention
    assert retention.held_blocks == 16
    # A new program needing 20 blocks waits while something runs ...
    turn(core, "small", history(rng, 8), max_tokens=60)
    core.step()
    turn(core, "big", history(rng, 80), "newcomer")
    core.step()
    check_accounting(core)
    assert core.scheduler.requests["big"].ever_scheduled is False and retention.held_blocks == 16
    # ... a running request that grows takes pins before anyone is preempted, then the rest runs.
    finished = run(core)
    assert core.scheduler.num_preemptions == 0
    assert set(finished) == {"small", "big"}
    assert core.stats().retention.released_pressure >= 1


@pytest.mark.parametrize("seen", [False, True], ids=["fabricated-tail", "real-return"])
def test_a_fabricated_tool_tail_neither_skips_admission_nor_releases_anyones_pin(seen):
    """Issue 50: a turn whose messages end in tool calls its program's last turn here never made
    (``after_tool_calls`` is the client's word) waits for program admission like any new program and
    takes no one's pin; a real return (its program's last turn here called tools) is admitted at
    once, taking pins where memory is short."""
    rng = random.Random(11)
    core = make_core(num_blocks=32, fraction=0.75)
    retention = core.scheduler.retention
    if seen:
        first_turn(core, rng, "newcomer", n=8)  # its last turn called a tool
        retention.release_all()  # its own pin aside: only the others' are at stake
    first_turn(core, rng, "p1", n=32)  # 8 blocks
    first_turn(core, rng, "p2", n=32)  # 8 blocks: 16 held, 16 free
    turn(core, "small", history(rng, 8), max_tokens=60)
    core.step()
    turn(core, "big", history(rng, 80), "newcomer", after=True)  # 20 blocks: more than are free
    core.step()
    check_accounting(core)
    big = core.scheduler.requests["big"]
    assert big.returns_after_tools is seen and big.ever_scheduled is seen
    if seen:
        assert set(retention.pins) != {"p1", "p2"} and core.stats().retention.released_pressure >= 1
    else:
        assert set(retention.pins) == {"p1", "p2"} and retention.held_blocks == 16
    assert set(run(core)) == {"small", "big"}
    # nor, once admitted, is it counted as a return on /metrics (agentgate_kv_retention_returning_*)
    assert core.stats().retention.returning_turns == (1 if seen else 0)


def test_releasing_a_pin_never_takes_blocks_a_running_request_shares():
    rng = random.Random(7)
    core = make_core(num_blocks=64)
    conversation = first_turn(core, rng, "agent", n=40)
    retention = core.scheduler.retention
    shared = [b.block_id for b in retention.pins["agent"].blocks]
    # Another request with the same prefix runs on the pinned blocks; the pin goes meanwhile.
    turn(core, "reader", conversation[:40] + history(rng, 4), max_tokens=30)
    first = [t for out in core.step() for t in out.new_token_ids]
    assert core.scheduler.kv.block_ids("reader")[:10] == shared
    assert retention.release_one(None)
    check_accounting(core)
    assert all(core.scheduler.kv.pool.blocks[i].ref_count == 1 for i in shared)
    tokens, cached = run(core)["reader"]
    assert cached == 40 and len(first + tokens) == 30


def test_a_waiting_returning_turn_keeps_its_pin_until_admitted_and_abort_unclaims_it():
    rng = random.Random(8)
    core = make_core(retention="2")
    conversation = first_turn(core, rng, "agent")
    retention = core.scheduler.retention
    core.scheduler.pause_state = core.scheduler.pause_state.PAUSED_NEW  # nothing new admitted
    turn(core, "agent-2", conversation + [5], "agent", after=True)
    core.clock.now += 10  # past the TTL, but its turn is here
    core.step()
    assert retention.pins["agent"].claimed_by == "agent-2"
    core.abort_requests(["agent-2"])
    assert retention.pins["agent"].claimed_by is None
    core.stats()
    assert not retention.pins, "an unclaimed pin past its TTL expires"
    check_accounting(core)


def test_random_program_traffic_keeps_the_accounting_exact_every_step():
    rng = random.Random(9)
    core = make_core(num_blocks=48, fraction=0.4, in_flight=2, max_num_batched_tokens=32)
    conversations: dict[str, list[int]] = {}
    for step in range(60):
        program = f"p{rng.randrange(8)}"
        history_ids = conversations.get(program, [])
        prompt = history_ids + history(rng, rng.randrange(1, 12))
        rid = f"{program}-{step}"
        turn(
            core,
            rid,
            prompt[-150:],
            program,
            after=bool(history_ids),
            tools=rng.random() < 0.8,
            max_tokens=rng.randrange(1, 8),
        )
        if rng.random() < 0.1:
            core.abort_requests([rid])
        for out in run(core).items():
            conversations[program] = prompt[-150:] + out[1][0]
            core.turn_ended(program, rid, ["t"] if rng.random() < 0.7 else [])
        core.clock.now += rng.random() * 3
    core.scheduler.retention.release_all()
    check_accounting(core)
    assert core.scheduler.kv.num_free_blocks == 48
