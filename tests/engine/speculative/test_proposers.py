"""Draft proposers, the bounded continuation index and adaptive draft length."""

import pytest

from agentgate.engine.config import EngineConfig
from agentgate.engine.core_parts import make_speculator
from agentgate.engine.errors import InvalidRequestError
from agentgate.engine.speculative import DraftLength, NgramProposer, SuffixProposer
from agentgate.engine.speculative.continuation_index import ContinuationIndex


def test_prompt_lookup_continues_the_most_recent_longest_match():
    proposer = NgramProposer()
    #          0  1  2  3  4  5  6  7  8  9
    prompt = [9, 1, 2, 3, 4, 7, 1, 2, 3, 5, 8, 6, 2, 3]
    proposer.start("a", prompt)
    # "2 3" last occurred at 7-8 (then 5 8); "1 2 3" at 6-8 too: the longest, most recent match.
    assert proposer.propose("a", prompt, 3) == [5, 8, 6]
    proposer.extend("a", [4])
    assert proposer.propose("a", prompt + [4], 2) == [7, 1]  # "2 3 4" -> 7 1
    assert proposer.propose("a", [40, 41], 2) == []
    proposer.finish("a")
    assert proposer.propose("a", prompt, 2) == []


def test_suffix_proposer_drafts_what_other_requests_wrote():
    proposer = SuffixProposer()
    call = [50, 51, 52, 53, 54, 55, 56]
    proposer.start("first", [1, 2, 3, 10, 11])
    proposer.extend("first", call)
    proposer.finish("first")
    # Another request, another prompt with the same ending: the first's output is drafted.
    proposer.start("second", [7, 8, 10, 11])
    assert proposer.propose("second", [7, 8, 10, 11], 4) == call[:4]
    proposer.extend("second", call[:3])
    assert proposer.propose("second", [10, 11] + call[:3], 8) == call[3:]


def test_the_global_index_is_bounded_and_evicts_the_oldest_outputs():
    index = ContinuationIndex(2, 4, max_tokens=20)
    for n in range(10):
        index.append(n, [100 + n, 1, 2, 3 + n, 4])
    assert index.num_tokens <= 20
    assert 0 not in index and 9 in index
    assert index.lookup([100, 1], 2) == ([], 0)  # evicted with its sequence
    assert index.lookup([109, 1], 2) == ([2, 12], 2)
    assert len(index._keys) <= 3 * 20


def test_draft_length_grows_on_success_and_stops_on_repeated_misses():
    length = DraftLength(8)
    assert length.next() == 4
    length.observe(4, 4)
    assert length.next() == 8
    length.observe(8, 2)
    assert length.next() == 3
    length.observe(3, 0)
    length.observe(1, 0)  # second miss in a row: stop drafting for a while
    pauses = 0
    while length.next() == 0:
        pauses += 1
    assert pauses == 2 and length.k == 1
    length.observe(1, 0)
    pauses = 0
    while length.next() == 0:
        pauses += 1
    assert pauses == 4  # the cooldown doubles
    length.observe(1, 1)
    assert length.next() == 2 and length.misses == 0


def test_modes_resolve_per_runner_and_bad_ones_are_refused():
    # By default: auto on the CPU (suffix drafts while at most 4 requests decode), off on CUDA.
    default = make_speculator(EngineConfig(device="cpu"))
    assert isinstance(default.proposer, SuffixProposer) and default.max_batch == 4
    assert make_speculator(EngineConfig(device="cuda")) is None
    for runner in ("overlap", "sync"):  # both verify drafts
        assert isinstance(make_speculator(EngineConfig(runner=runner, speculative="auto")).proposer, SuffixProposer)
    assert make_speculator(EngineConfig(runner="null", speculative="auto")) is None
    ngram = make_speculator(EngineConfig(runner="sync", speculative="ngram", num_speculative_tokens=3))
    assert type(ngram.proposer) is NgramProposer and ngram.max_draft == 3
    for bad in (
        dict(speculative="eagle"),
        dict(runner="sync", speculative="ngram", num_speculative_tokens=0),
    ):
        with pytest.raises(InvalidRequestError):
            EngineConfig(**bad)


def test_drafts_come_only_from_the_same_tenants_outputs():
    """Issue 50: another key's replies never reach a request's drafts (nor their acceptance timing)."""
    proposer = SuffixProposer()
    secret = [60, 61, 62, 63, 64]
    proposer.start("theirs", [1, 2, 10, 11], tenant="key-a")
    proposer.extend("theirs", secret)
    proposer.finish("theirs")
    proposer.start("mine", [7, 8, 10, 11], tenant="key-b")
    assert proposer.propose("mine", [7, 8, 10, 11], 4) == []
    proposer.start("same-key", [5, 6, 10, 11], tenant="key-a")
    assert proposer.propose("same-key", [5, 6, 10, 11], 4) == secret[:4]


def test_tenant_indexes_are_bounded_in_all_and_the_least_recently_active_goes():
    proposer = SuffixProposer(global_max_tokens=50, all_tenants_max_tokens=100)
    for n in range(10):
        proposer.start(f"r{n}", [1, 2, 3], tenant=f"key-{n}")
        proposer.extend(f"r{n}", list(range(100 + 10 * n, 130 + 10 * n)))
        proposer.finish(f"r{n}")
    assert sum(index.num_tokens for index in proposer._tenants.values()) <= 100
    assert "key-9" in proposer._tenants and "key-0" not in proposer._tenants
