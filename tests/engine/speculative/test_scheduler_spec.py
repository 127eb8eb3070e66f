"""Speculative decoding through the scheduler and engine core on the null
runner (no model): the same tokens and finish reasons as without drafts on
a randomized workload with stops, aborts, preemption and pause/resume, and
KV accounting that holds after every step."""

import random

import pytest

from agentgate.engine.config import EngineConfig
from agentgate.engine.core import EngineCore
from agentgate.engine.core_parts import make_speculator
from agentgate.engine.runner.null import NullRunner, null_next_token
from agentgate.engine.sampling_params import SamplingParams
from agentgate.engine.speculative.speculator import CPU_AUTO_MAX_BATCH, Speculator
from tests.engine.runner.test_overlap import drive as run_events
from tests.engine.speculative.oracle import OracleProposer

VOCAB = 1000
BLOCK = 4
STEP_DRAFTS = 9  # draft tokens per step, over all its requests


def null_truth(seeds):
    def truth(request_id, known, k):
        out = list(known)
        for _ in range(k):
            seed, greedy = seeds[request_id]
            out.append(null_next_token(out[-1], len(out), seed, greedy, VOCAB))
        return out[len(known) :]

    return truth


def make_core(num_blocks, speculate, seed, seeds):
    runner = NullRunner(num_blocks=num_blocks, block_size=BLOCK, vocab_size=VOCAB)
    core = EngineCore(EngineConfig(block_size=BLOCK, max_num_batched_tokens=48, max_num_seqs=8), runner)
    if speculate:
        proposer = OracleProposer(null_truth(seeds), seed, VOCAB)
        core.scheduler.speculator = Speculator(proposer, max_draft=5, max_step_drafts=STEP_DRAFTS)
        schedule = core.scheduler.schedule

        def bounded_schedule():
            step = schedule()
            assert sum(len(row.draft_token_ids) for row in step.scheduled) <= STEP_DRAFTS
            return step

        core.scheduler.schedule = bounded_schedule
    return core


def check_kv(core):
    """Every block is free or held; a running request holds exactly the
    blocks its computed tokens need (none left over from rejected drafts)."""
    scheduler, kv = core.scheduler, core.scheduler.kv
    held = [b for blocks in kv._blocks.values() for b in blocks]
    assert len({b.block_id for b in held if b.ref_count == 1}) == sum(1 for b in held if b.ref_count == 1)
    referenced = {b.block_id for b in held}
    assert len(referenced) + kv.num_free_blocks == kv.pool.num_blocks, "a block leaked or is counted twice"
    for block in kv.pool.blocks:
        assert block.ref_count == sum(1 for b in held if b is block)
    for request in scheduler.running:
        need = -(-request.num_computed_tokens // BLOCK)
        assert len(kv._blocks[request.request_id]) == need, request.request_id
        assert core.runner.states[request.request_id].num_computed == request.num_computed_tokens


def script(seed):
    rng = random.Random(seed)
    events, seeds = [], {}
    for i in range(16):
        at = rng.randrange(0, 40)
        greedy = rng.random() < 0.6
        max_tokens = rng.randrange(1, 40)
        params = SamplingParams(
            temperature=0.0 if greedy else 0.8,
            seed=None if greedy else 7 * i,
            max_tokens=max_tokens,
            stop_token_ids=[rng.randrange(VOCAB) for _ in range(3)],
            min_tokens=min(max_tokens, rng.choice([0, 0, 5])),
        )
        prompt = [rng.randrange(3, VOCAB) for _ in range(rng.randrange(1, 30))]
        events.append((at, "add", f"r{i}", prompt, params))
        seeds[f"r{i}"] = (7 * i, greedy)
        if rng.random() < 0.2:
            events.append((at + rng.randrange(1, 12), "abort", f"r{i}"))
    pause = rng.randrange(5, 30)
    events += [(pause, "pause"), (pause + 3, "resume")]
    return sorted(events, key=lambda e: e[0]), seeds


def drive(core, events, check):
    """Run ``events`` (see tests.engine.runner.test_overlap.drive); with
    ``check``, KV accounting is checked after every step. Also returns the
    most tokens one output carried."""
    widest = [0]
    plain_step = core.step

    def step():
        outputs = plain_step()
        widest[0] = max([widest[0]] + [len(out.new_token_ids) for out in outputs])
        if check:
            check_kv(core)
        return outputs

    core.step = step
    tokens, finish, _ = run_events(core, events, frozenset({2}))
    return tokens, finish, widest[0]


@pytest.mark.parametrize("seed", range(6))
def test_drafts_change_no_token_and_leak_no_block(seed):
    events, seeds = script(seed)
    # Few blocks: requests get preempted, with drafts in flight among them.
    plain = make_core(24, False, seed, seeds)
    spec = make_core(24, True, seed, seeds)
    ref_tokens, ref_finish, _ = drive(plain, events, check=False)
    tokens, finish, widest = drive(spec, events, check=True)
    aborted = {e[2] for e in events if e[1] == "abort"}
    for rid in ref_tokens.keys() | tokens.keys():
        if rid in aborted:  # aborted at another point of the same path
            got, ref = tokens.get(rid, []), ref_tokens.get(rid, [])
            short = min(len(got), len(ref))
            assert got[:short] == ref[:short]
            continue
        assert tokens[rid] == ref_tokens[rid], rid
        assert finish[rid] == ref_finish[rid], rid
    stats = spec.scheduler.stats()
    assert stats.num_accepted_tokens > 0 and stats.num_draft_tokens > stats.num_accepted_tokens
    assert stats.num_sampled_tokens > stats.num_sampling_steps
    assert widest > 1, "accepted drafts stream as several tokens in one output"
    assert spec.scheduler.num_preemptions > 0
    kv = spec.scheduler.kv
    assert kv.num_free_blocks == kv.pool.num_blocks and not spec.runner.states


def test_no_token_after_a_stop_token_or_max_tokens():
    """A draft that runs through a stop token: the output ends at the stop."""
    seeds = {"a": (0, True)}
    truth = null_truth(seeds)("a", [5, 6, 7], 12)
    stop = truth[3]
    for stop_ids, max_tokens, expected in (([stop], 50, truth[:4]), ([], 6, truth[:6])):
        core = make_core(64, True, 0, seeds)
        core.scheduler.speculator.proposer.rng.random = lambda: 1.0  # never spoil a draft
        core.scheduler.speculator.proposer.rng.randint = lambda a, b: b  # always the longest draft
        core.add_request(
            "a", [5, 6, 7], SamplingParams(temperature=0.0, max_tokens=max_tokens, stop_token_ids=stop_ids)
        )
        tokens, finish, _ = drive(core, [], check=True)
        assert tokens["a"] == expected
        assert finish["a"] == ("stop" if stop_ids else "length")


def test_auto_drafts_only_while_few_requests_decode():
    """``--speculative auto`` on a CPU: drafts while at most `CPU_AUTO_MAX_BATCH` requests decode
    (where they paid in spec_bench), none in a step with more; the tokens are the same."""
    assert make_speculator(EngineConfig(speculative="auto", device="cpu")).max_batch == CPU_AUTO_MAX_BATCH
    assert make_speculator(EngineConfig(speculative="suffix", device="cpu")).max_batch is None  # asked for: always
    crowd_ids = [f"r{i}" for i in range(CPU_AUTO_MAX_BATCH + 2)]
    seeds = {request_id: (0, True) for request_id in [*crowd_ids, "alone"]}  # greedy: the seed is unused
    core = make_core(256, True, 0, seeds)
    speculator = core.scheduler.speculator
    speculator.max_batch = CPU_AUTO_MAX_BATCH
    speculator.proposer.rng.random = lambda: 1.0  # never spoil a draft
    drafted_at: list[int] = []
    schedule = core.scheduler.schedule

    def recording_schedule():
        step = schedule()
        decoding = sum(1 for row in step.scheduled if row.samples)
        if any(row.draft_token_ids for row in step.scheduled):
            drafted_at.append(decoding)
        return step

    core.scheduler.schedule = recording_schedule
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    for number, request_id in enumerate(crowd_ids):  # the crowd: more than max_batch decode together
        core.add_request(request_id, [5 + number, 6, 7], params)
    crowd, _, _ = drive(core, [], check=True)
    assert not drafted_at, f"drafted with {drafted_at} requests decoding"
    core.add_request("alone", [9, 8, 7], params)  # then one alone drafts
    alone, _, _ = drive(core, [], check=True)
    assert drafted_at and max(drafted_at) <= CPU_AUTO_MAX_BATCH
    assert len(alone["alone"]) == 40 and all(len(tokens) == 40 for tokens in crowd.values())
