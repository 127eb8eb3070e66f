"""A retried greedy request repeats itself (issue 35), on the default server.

The second sending of a prompt finds most of it in the prefix cache and computes only its last
tokens, with fewer rows than the first sending computed; on the default int4 weights with row
choice (``engine.kernel_choice.row_choice``) those rows must still go through the same kernel, in a
form whose numbers do not depend on how many rows run, or a greedy reply changes its mind.

A request asking for logprobs is never drafted (`engine.speculative.speculator`), so those sends
decode token by token, as ``--speculative off`` does; sent without logprobs, the same prompts are
drafted by ``--speculative auto`` (the default), the second send from the first's reply, and must
give the same text (issue 52: a verify row's attention once ran over its request's longest
draft's KV blocks and rounded otherwise in bf16 on an AMX Xeon; a small step now runs its decode
rows apart by block count, `engine.attention.torch._parts_by_blocks`). loadtests/greedy_drafts.py
sends 200 prompts so against a ``--speculative off`` server.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from agentgate.loadtests.quant_check import PROMPTS
from tests.support.servers import LiveServer, start_server

# quant_check's prompts and four more: 20, each sent twice.
RETRY_PROMPTS = [
    *PROMPTS,
    "What is the chemical symbol for gold?",
    "Recommend a book for a long train ride.",
    "How do bees make honey?",
    "What is a prime number? Give an example.",
]


@pytest.fixture(scope="module")
def default_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """``agentgate serve`` with its defaults: int4 weights, row choice, prefix caching, overlap runner."""
    server = start_server(tmp_path_factory.mktemp("default-server"))
    yield server
    server.stop()


def greedy_reply(server: LiveServer, prompt: str, *, logprobs: bool = True) -> tuple[str, list[float], int]:
    """The reply's text, its tokens' logprobs (none without ``logprobs``), and how many prompt
    tokens the prefix cache held."""
    body = {
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "max_tokens": 32,
        "logprobs": logprobs,
    }
    reply = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120).json()
    choice = reply["choices"][0]
    cached = (reply["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    logprobs = [entry["logprob"] for entry in choice["logprobs"]["content"]] if logprobs else []
    return choice["message"]["content"], logprobs, cached


def drafted_tokens(server: LiveServer) -> float:
    """The server's ``agentgate_spec_draft_tokens`` so far."""
    for line in httpx.get(f"{server.url}/metrics", timeout=30).text.splitlines():
        if line.startswith("agentgate_spec_draft_tokens_total ") or line.startswith("agentgate_spec_draft_tokens "):
            return float(line.split()[1])
    raise AssertionError("/metrics has no agentgate_spec_draft_tokens")


def test_each_greedy_prompt_sent_twice_gets_the_same_reply_token_for_token_and_bit_for_bit(default_server):
    assert len(RETRY_PROMPTS) == 20
    first = [greedy_reply(default_server, prompt) for prompt in RETRY_PROMPTS]
    second = [greedy_reply(default_server, prompt) for prompt in RETRY_PROMPTS]
    assert all(cached > 0 for _, _, cached in second), "the second sendings must hit the prefix cache"
    assert [text for text, _, _ in second] == [text for text, _, _ in first]
    assert [logprobs for _, logprobs, _ in second] == [logprobs for _, logprobs, _ in first]


def test_drafted_sends_of_each_greedy_prompt_give_the_text_of_decoding_token_by_token(default_server):
    undrafted = [greedy_reply(default_server, prompt)[0] for prompt in RETRY_PROMPTS]  # logprobs: no drafts
    before = drafted_tokens(default_server)
    first = [greedy_reply(default_server, prompt, logprobs=False)[0] for prompt in RETRY_PROMPTS]
    second = [greedy_reply(default_server, prompt, logprobs=False)[0] for prompt in RETRY_PROMPTS]
    # It drafts, unless its load-time check found drafts inexact here and said so (kernel_choice.draft_exactness).
    assert drafted_tokens(default_server) > before or "speculative auto: off" in default_server.log()
    assert first == undrafted
    assert second == undrafted
