"""Drafts verified by the sync runner (a tiny random-weight Llama, fp32):
the same tokens, finish reasons and logprobs as without speculation, greedy
and seeded, on the runner tests' randomized mixed workload (penalties, logit
bias, min_tokens, logprobs, stops, aborts, preemption, pause keep/resume)."""

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


@pytest.mark.parametrize("seed", [0, 1])
def test_sync_runner_with_drafts_matches_decoding_token_by_token(tiny_model_dir, seed):
    events, aborted = build_script(seed)
    eos = frozenset(range(2, 22))
    prompts = {e[2]: e[3] for e in events if e[1] == "add"}
    adds = [e for e in events if e[1] == "add"]
    reference, _, _ = drive(make_core(tiny_model_dir, "sync", num_kv_blocks=512), adds, eos)
    plain = make_core(tiny_model_dir, "sync", num_kv_blocks=BLOCKS)
    ref_tokens, ref_finish, ref_lp = drive(plain, events, eos)
    spec = make_core(tiny_model_dir, "sync", num_kv_blocks=BLOCKS)
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
    assert 0 < stats.num_accepted_tokens < stats.num_draft_tokens
    assert spec.scheduler.num_preemptions > 0
    kv = spec.scheduler.kv
    assert kv.num_free_blocks == kv.pool.num_blocks
    assert not spec.runner._states
