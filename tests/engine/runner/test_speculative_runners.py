"""Drafts verified by each runner (a tiny random-weight Llama, fp32): the
same tokens, finish reasons and logprobs as without speculation, greedy and
seeded, on the runner tests' randomized mixed workload (penalties, logit
bias, min_tokens, logprobs, stops, aborts, preemption, pause keep/resume).
The overlapped runner resolves accepted drafts on the device
(`engine.runner.step_drafts`). With two steps in flight (CUDA's depth) a
request always has a step in flight, so the scheduler never drafts for it:
that case checks that speculation left on changes nothing (drafting for
step N+1 while step N runs is not built)."""

import pytest

from agentgate.engine.speculative.speculator import Speculator
from tests.engine.runner.test_overlap import VOCAB, build_script, drive, make_core
from tests.engine.speculative.oracle import OracleProposer

BLOCKS = 26  # few enough that requests are preempted, drafts in flight among them


def reference_truth(reference, prompts):
    """The reference run's continuation of a request's known tokens."""

    def truth(request_id, known, k):
        out = reference.get(request_id, [])
        done = len(known) - len(prompts[request_id])
        assert known[len(prompts[request_id]) :] == out[:done], "confirmed tokens left the reference path"
        return list(out[done : done + k])

    return truth


RUNNERS = [
    pytest.param("sync", {}, id="sync"),
    pytest.param("overlap", {}, id="overlap"),
    pytest.param("overlap", {"steps_in_flight": 2}, id="overlap-depth-2"),
    # On CUDA: CUDA graphs for pure-decode steps, eager drafted steps (depth 1, so requests draft).
    pytest.param("overlap", {"device": "cuda", "steps_in_flight": 1}, id="overlap-cuda", marks=pytest.mark.gpu),
]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(("runner", "options"), RUNNERS)
def test_a_runner_with_drafts_matches_decoding_token_by_token(tiny_model_dir, seed, runner, options):
    events, aborted = build_script(seed)
    eos = frozenset(range(2, 22))
    prompts = {e[2]: e[3] for e in events if e[1] == "add"}
    adds = [e for e in events if e[1] == "add"]
    device = {"device": options["device"]} if "device" in options else {}
    reference, _, _ = drive(make_core(tiny_model_dir, "sync", num_kv_blocks=512, **device), adds, eos)
    plain = make_core(tiny_model_dir, runner, num_kv_blocks=BLOCKS, **options)
    ref_tokens, ref_finish, ref_lp = drive(plain, events, eos)
    spec = make_core(tiny_model_dir, runner, num_kv_blocks=BLOCKS, **options)
    proposer = OracleProposer(reference_truth(reference, prompts), seed, VOCAB)
    spec.scheduler.speculator = Speculator(proposer, max_draft=4)
    tokens, finish, logprobs = drive(spec, events, eos)
    for rid in prompts:
        if rid in aborted:
            got = tokens.get(rid, [])
            assert got == reference[rid][: len(got)]
            continue
        assert tokens[rid] == ref_tokens[rid] == reference[rid], rid
        assert finish[rid] == ref_finish[rid], rid
        for a, b in zip(ref_lp.get(rid, []), logprobs.get(rid, [])):
            assert a.top_token_ids == b.top_token_ids
            assert a.logprob == pytest.approx(b.logprob, abs=1e-4)
    stats = spec.scheduler.stats()
    if options.get("steps_in_flight") == 2:
        assert stats.num_draft_tokens == 0
    else:
        assert 0 < stats.num_accepted_tokens < stats.num_draft_tokens
    assert spec.scheduler.num_preemptions > 0
    kv = spec.scheduler.kv
    assert kv.num_free_blocks == kv.pool.num_blocks
    assert not (spec.runner._states if runner == "sync" else spec.runner._live)
