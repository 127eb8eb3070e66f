"""Issue 51, in the engine (null runner, no model): tools the server runs hold their program's pin
for exactly as long as they run and the next round goes first, learning no gap law; pins yield by
expected loss (tokens to recompute x prefill cost x P(return soon)); /metrics counts the pinned
blocks released for memory and the returning turns that then missed."""

import random

import pytest

from agentgate.engine.scheduling.pin_cost import ATTENTION_TOKENS, recompute_cost
from agentgate.engine.scheduling.tool_gaps import MAX_TTL_S
from tests.engine.core.test_retention import BLOCK, history, make_core, run, turn


def ended_turn(core, rng, program, n=40, server_hold=0.0, tools=("search",)):
    """A program's first turn run to its end; the gateway says what it called (``server_hold``: the
    server runs it). Returns the conversation."""
    prompt = history(rng, n)
    turn(core, f"{program}-1", prompt, program)
    out = run(core)[f"{program}-1"]
    core.turn_ended(program, f"{program}-1", list(tools), server_hold)
    return prompt + out[0]


@pytest.mark.parametrize("policy", ["program", "fcfs"])
def test_a_server_run_tool_holds_the_pin_while_it_runs_and_its_next_round_goes_first(policy):
    rng = random.Random(1)
    core = make_core(policy=policy, max_num_seqs=1)
    retention = core.scheduler.retention
    conversation = ended_turn(core, rng, "loop", server_hold=2 * MAX_TTL_S)
    pin = retention.pins["loop"]
    assert pin.server_run and pin.expires == core.clock() + 2 * MAX_TTL_S  # no law's TTL
    core.clock.now += 1.5 * MAX_TTL_S  # longer than any learned TTL: a slow tool still holds it
    retention.expire()
    assert "loop" in retention.pins
    turn(core, "other-1", history(rng, 8), "other")  # queued before the round returns
    turn(core, "loop-2", conversation + history(rng, 6), "loop", after=True)
    assert core.scheduler.waiting.peek().request_id == "loop-2", "the round after a server tool goes first"
    finished = run(core)
    assert finished["loop-2"][1] == len(conversation) // BLOCK * BLOCK  # every block it had before the tool
    assert retention.gaps.count == 0, "a server-run tool's gap taught a law"
    assert core.stats().retention.returning_turns == 1


def test_a_loop_that_stops_after_its_tools_releases_the_pin_at_once():
    rng = random.Random(2)
    core = make_core()
    ended_turn(core, rng, "loop", server_hold=60.0)
    core.tools_returned("loop", "other-id")  # not its turn: nothing
    assert "loop" in core.scheduler.retention.pins
    core.tools_returned("loop", "loop-1")
    stats = core.stats().retention
    assert stats.pins == 0 and stats.released_loop_ended == 1
    assert core.scheduler.kv.num_free_blocks == 64


def test_client_run_tools_still_learn_their_gap_law():
    rng = random.Random(3)
    core = make_core()
    conversation = ended_turn(core, rng, "client")
    assert not core.scheduler.retention.pins["client"].server_run
    core.clock.now += 2.0
    turn(core, "client-2", conversation + history(rng, 4), "client", after=True)
    run(core)
    assert core.scheduler.retention.gaps.count == 1


def test_the_recompute_cost_counts_what_the_pin_alone_holds_and_grows_with_position():
    rng = random.Random(4)
    core = make_core(num_blocks=64)
    ended_turn(core, rng, "a", n=40)
    blocks = core.scheduler.retention.pins["a"].blocks
    cost = recompute_cost(blocks, BLOCK)
    assert cost > len(blocks) * BLOCK  # later positions cost more than the first
    assert cost == pytest.approx(sum(BLOCK * (1 + (i * BLOCK + 1.5) / ATTENTION_TOKENS) for i in range(len(blocks))))
    blocks[0].pins += 1  # another pin holds the first block too: it is not lost with this pin
    assert recompute_cost(blocks, BLOCK) == pytest.approx(cost - BLOCK * (1 + 1.5 / ATTENTION_TOKENS))
    blocks[0].pins -= 1


def test_pins_yield_by_expected_loss_a_server_run_pin_last():
    """Three pins of one age under fcfs: a short client conversation, a long one and a long one whose
    tool the server runs. Pressure takes the short one first (least to recompute), then the long
    client one (P(return soon) < 1), the server-run one last; the metrics count the blocks and the
    returning turn that then missed."""
    rng = random.Random(5)
    core = make_core(num_blocks=64, fraction=1.0)
    retention = core.scheduler.retention
    short = ended_turn(core, rng, "short", n=12)
    ended_turn(core, rng, "long", n=48)
    ended_turn(core, rng, "served", n=48, server_hold=60.0)
    now = core.clock()
    losses = {p.program_id: retention.expected_loss(p, now) for p in retention.pins.values()}
    assert losses["short"] < losses["long"] < losses["served"]
    assert [p.program_id for p in retention.release_order()] == ["short", "long", "served"]
    held = len(retention.pins["short"].blocks)
    assert retention.release_one(None)
    stats = core.stats().retention
    assert stats.released_pressure == 1 and stats.pressure_released_blocks == held
    for i in range(12):  # new traffic reuses the freed blocks
        turn(core, f"flood-{i}", history(rng, 16))
    run(core)
    turn(core, "short-2", short + history(rng, 4), "short", after=True)
    assert run(core)["short-2"][1] < held * BLOCK
    assert core.stats().retention.returning_missed_after_eviction == 1
