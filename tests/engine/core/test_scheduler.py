"""Scheduler, KV cache manager and engine core, driven by the null runner
(no model): batching, chunked prefill, preemption, prefix caching, aborts,
pause states, and the two-steps-in-flight pipeline."""

import random

import pytest

from agentgate.engine.config import EngineConfig
from agentgate.engine.core import EngineCore
from agentgate.engine.errors import InvalidRequestError
from agentgate.engine.runner.null import NullRunner
from agentgate.engine.sampling_params import SamplingParams

VOCAB = 1000


def make_core(*, num_blocks=4096, block_size=4, in_flight=1, prefix=True, **limits) -> EngineCore:
    config = EngineConfig(
        block_size=block_size,
        enable_prefix_caching=prefix,
        max_num_seqs=limits.get("max_num_seqs", 64),
        max_num_batched_tokens=limits.get("max_num_batched_tokens", 64),
    )
    runner = NullRunner(num_blocks=num_blocks, block_size=block_size, vocab_size=VOCAB, max_steps_in_flight=in_flight)
    return EngineCore(config, runner)


def run_all(core: EngineCore, max_steps=100_000) -> dict[str, tuple[list[int], str]]:
    tokens: dict[str, list[int]] = {}
    finished: dict[str, tuple[list[int], str]] = {}
    for _ in range(max_steps):
        if not core.has_work:
            break
        for out in core.step():
            tokens.setdefault(out.request_id, []).extend(out.new_token_ids)
            if out.finish_reason:
                finished[out.request_id] = (tokens.pop(out.request_id, []), out.finish_reason)
    assert not core.has_work, "engine did not drain"
    return finished


def prompt(rng, n):
    return [rng.randrange(3, VOCAB) for _ in range(n)]


def assert_clean(core: EngineCore):
    kv = core.scheduler.kv
    assert kv.num_free_blocks == kv.pool.num_blocks, "blocks leaked"
    assert not core.scheduler.requests and not core.scheduler.running and not core.scheduler.waiting
    assert not core.runner.states, "runner kept request state"


def alone(p, params, **kw):
    core = make_core(**kw)
    core.add_request("solo", p, params)
    return run_all(core)["solo"]


@pytest.mark.parametrize("in_flight", [1, 2])
def test_concurrent_mixed_lengths_with_chunking_and_preemption_match_solo_runs(in_flight):
    rng = random.Random(0)
    specs = [
        (prompt(rng, rng.randrange(1, 90)), SamplingParams(temperature=0, max_tokens=rng.randrange(1, 40)))
        for _ in range(16)
    ]
    # 40 blocks of 4 tokens cannot hold 16 requests of up to 130 tokens: preemption is forced.
    core = make_core(num_blocks=40, in_flight=in_flight, max_num_batched_tokens=24)
    for i, (p, params) in enumerate(specs):
        core.add_request(f"r{i}", p, params)
    results = run_all(core)
    assert core.scheduler.num_preemptions > 0
    for i, (p, params) in enumerate(specs):
        assert results[f"r{i}"] == alone(p, params, in_flight=1)
        assert len(results[f"r{i}"][0]) == params.max_tokens
    assert_clean(core)


def test_pipeline_of_two_gives_the_same_tokens_as_one():
    rng = random.Random(1)
    outs = []
    for in_flight in (1, 2):
        core = make_core(in_flight=in_flight, num_blocks=200, max_num_batched_tokens=32)
        rng = random.Random(1)
        for i in range(20):
            core.add_request(
                f"r{i}",
                prompt(rng, rng.randrange(1, 50)),
                SamplingParams(seed=i, max_tokens=rng.randrange(1, 30), stop_token_ids=[7]),
            )
        outs.append(run_all(core))
        assert_clean(core)
    assert outs[0] == outs[1]


def test_prefix_cache_computes_only_the_suffix_and_changes_nothing():
    rng = random.Random(2)
    shared = prompt(rng, 1000)
    first, second = shared + prompt(rng, 10), shared + prompt(rng, 23)
    results = {}
    for prefix in (True, False):
        core = make_core(prefix=prefix, block_size=16, max_num_batched_tokens=512)
        core.add_request("a", first, SamplingParams(temperature=0, max_tokens=5))
        a = run_all(core)["a"]
        computed_before = core.runner.num_tokens_computed
        core.add_request("b", second, SamplingParams(temperature=0, max_tokens=5))
        b = run_all(core)["b"]
        stats = core.stats()
        results[prefix] = (a, b, stats, core.runner.num_tokens_computed - computed_before)
        assert_clean(core)
    (a1, b1, stats_on, computed_on), (a0, b0, stats_off, computed_off) = results[True], results[False]
    assert (a1, b1) == (a0, b0)
    # The shared 1,000 tokens hold 62 full blocks of 16: b hits 992 tokens.
    assert stats_on.prefix_hits_tokens == 992
    assert stats_off.prefix_hits_tokens == 0
    # b computes only its 1,023 - 992 = 31-token suffix, then 4 decode tokens.
    assert computed_on == 31 + 4
    assert computed_off == 1023 + 4


def test_aborting_100_requests_at_random_points_leaves_nothing_behind():
    rng = random.Random(3)
    core = make_core(num_blocks=300, in_flight=2, max_num_batched_tokens=48)
    ids = [f"r{i}" for i in range(100)]
    for rid in ids:
        core.add_request(rid, prompt(rng, rng.randrange(1, 60)), SamplingParams(max_tokens=200, ignore_eos=True))
    pending = set(ids)
    finishes = {}
    for _ in range(10_000):
        if not core.has_work:
            break
        for out in core.step():
            if out.finish_reason:
                finishes[out.request_id] = out.finish_reason
        if pending and rng.random() < 0.5:
            victims = rng.sample(sorted(pending), k=min(len(pending), rng.randrange(1, 6)))
            for out in core.abort_requests(victims):
                finishes[out.request_id] = out.finish_reason
            pending -= set(victims)
    assert set(finishes) == set(ids)
    assert all(reason == "abort" for reason in finishes.values())
    assert_clean(core)


def test_pause_abort_ends_everything_and_admits_nothing_new_until_resume():
    core = make_core()
    core.add_request("a", [5, 6, 7], SamplingParams(max_tokens=50))
    core.step()
    outs = core.pause("abort")
    assert [(o.request_id, o.finish_reason) for o in outs] == [("a", "abort")]
    core.add_request("b", [5, 6], SamplingParams(max_tokens=3))
    for _ in range(5):
        assert core.step() == []
    assert core.stats().num_waiting == 1 and core.is_paused
    core.resume()
    assert run_all(core)["b"][1] == "length"
    assert_clean(core)


def test_pause_wait_lets_started_requests_finish_but_admits_no_new_one():
    core = make_core()
    core.add_request("a", [5, 6, 7], SamplingParams(max_tokens=10))
    core.step()
    core.pause("wait")
    core.add_request("b", [5, 6], SamplingParams(max_tokens=3))
    done = {}
    for _ in range(50):
        for out in core.step():
            if out.finish_reason:
                done[out.request_id] = out.finish_reason
    assert done == {"a": "length"} and core.is_drained
    assert core.stats().num_waiting == 1
    core.resume()
    assert run_all(core)["b"][1] == "length"


@pytest.mark.parametrize("in_flight", [1, 2])
def test_pause_keep_freezes_and_resume_matches_an_unpaused_run(in_flight):
    rng = random.Random(4)
    specs = [(prompt(rng, 20), SamplingParams(seed=i, max_tokens=30)) for i in range(6)]
    reference = make_core(in_flight=in_flight)
    paused = make_core(in_flight=in_flight)
    for core in (reference, paused):
        for i, (p, params) in enumerate(specs):
            core.add_request(f"r{i}", p, params)
    expected = run_all(reference)
    tokens: dict[str, list[int]] = {}
    for _ in range(5):
        for out in paused.step():
            tokens.setdefault(out.request_id, []).extend(out.new_token_ids)
    paused.pause("keep")
    frozen = {k: list(v) for k, v in tokens.items()}
    for _ in range(10):
        for out in paused.step():  # in-flight steps may still resolve, then nothing moves
            tokens.setdefault(out.request_id, []).extend(out.new_token_ids)
    settled = {k: list(v) for k, v in tokens.items()}
    for _ in range(10):
        assert paused.step() == []
    assert sum(map(len, settled.values())) - sum(map(len, frozen.values())) <= len(specs) * in_flight
    paused.resume()
    rest = run_all(paused)
    for rid, (toks, reason) in expected.items():
        assert settled.get(rid, []) + rest[rid][0] == toks
        assert rest[rid][1] == reason


def test_bad_requests_are_rejected_before_the_loop_and_leave_no_trace():
    core = make_core()
    bad = [
        ([], SamplingParams()),
        ([VOCAB + 5], SamplingParams()),
        ([1, 2], SamplingParams(temperature=-1)),
        ([1, 2], SamplingParams(top_p=0)),
        ([1, 2], SamplingParams(max_tokens=0)),
        ([1, 2], SamplingParams(logit_bias={VOCAB: 1.0})),
        ([1, 2], SamplingParams(min_tokens=5, max_tokens=2)),
        ([1] * 9000, SamplingParams()),
    ]
    for p, params in bad:
        with pytest.raises(InvalidRequestError):
            core.add_request("x", p, params)
    assert not core.scheduler.requests
    core.add_request("ok", [1, 2], SamplingParams(max_tokens=2))
    with pytest.raises(InvalidRequestError, match="already in use"):
        core.add_request("ok", [1, 2], SamplingParams())
    assert run_all(core)["ok"][1] == "length"


def test_stop_tokens_and_min_tokens():
    core = make_core()
    # Find what the null runner emits, then stop on its third token.
    p = [11, 12, 13]
    free_run = alone(p, SamplingParams(temperature=0, max_tokens=6))[0]
    stop = free_run[2]
    core.add_request("s", p, SamplingParams(temperature=0, max_tokens=6, stop_token_ids=[stop]))
    toks, reason = run_all(core)["s"]
    assert toks == free_run[: free_run.index(stop) + 1] and reason == "stop"
    core.add_request("eos", p, SamplingParams(temperature=0, max_tokens=6), eos_token_ids=[free_run[0]])
    assert run_all(core)["eos"] == (free_run[:1], "stop")
    core.add_request(
        "ign", p, SamplingParams(temperature=0, max_tokens=6, ignore_eos=True), eos_token_ids=[free_run[0]]
    )
    assert run_all(core)["ign"] == (free_run, "length")


def test_max_num_seqs_and_token_budget_are_respected():
    core = make_core(max_num_seqs=3, max_num_batched_tokens=10)
    for i in range(6):
        core.add_request(f"r{i}", [5] * 7, SamplingParams(max_tokens=4))
    seen_running = 0
    original = core.runner.execute

    def checked(step):
        assert step.total_num_tokens <= 10 and len(step.scheduled) <= 3
        return original(step)

    core.runner.execute = checked
    for _ in range(200):
        if not core.has_work:
            break
        core.step()
        seen_running = max(seen_running, core.stats().num_running)
    assert seen_running == 3


def test_a_cache_salt_keeps_requests_from_sharing_cached_kv():
    """Issue 50: the same tokens under another salt (another key with --prefix-cache-isolation
    key, or vLLM's cache_salt) hit nothing; under the same salt they hit as unsalted ones do."""
    rng = random.Random(5)
    shared = prompt(rng, 256)
    core = make_core(block_size=16, max_num_batched_tokens=512)
    hits = []
    for rid, salt in (("a", "key-a"), ("b", "key-b"), ("c", ""), ("d", "key-a")):
        before = core.stats().prefix_hits_tokens
        core.add_request(rid, shared + prompt(rng, 5), SamplingParams(temperature=0, max_tokens=2), cache_salt=salt)
        run_all(core)
        hits.append(core.stats().prefix_hits_tokens - before)
    assert hits == [0, 0, 0, 256]
    assert_clean(core)


def test_requests_admitted_together_share_a_prefix_computed_in_that_same_step():
    rng = random.Random(5)
    shared = prompt(rng, 64)  # 16 blocks of 4
    core = make_core(block_size=4, max_num_batched_tokens=512)
    for i in range(4):
        core.add_request(f"r{i}", shared + prompt(rng, 6), SamplingParams(temperature=0, max_tokens=1))
    run_all(core)
    # The first computes all 70 tokens; the other three hit its 16 blocks in
    # the same step and compute only their 6-token suffixes.
    assert core.stats().prefix_hits_tokens == 3 * 64
    assert core.runner.num_tokens_computed == 70 + 3 * 6
