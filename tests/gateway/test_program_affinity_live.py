"""An agent program across two gateways and two real-model engines on one Redis: a program
named by ``prompt_cache_key`` (no session) whose turn through gateway A ended in a tool call
comes back with the tool's result through gateway B, which sends it to the engine holding
its pinned conversation (``gateway.programs.last_turns``): the whole history is a prefix hit. A
fresh program with the same messages gets B's least-loaded engine (B lists the engines the
other way round from A, so that is the other one) and computes them again."""

from __future__ import annotations

import httpx
import pytest

from tests.support.cluster import run_cluster
from tests.support.http import first_tokens_by_engine
from tests.support.servers import ADMIN_KEY, bearer

pytestmark = pytest.mark.slow

MODEL_ENGINE = ("--runner", "sync", "--dtype", "float32", "--max-model-len", "1536", "--kv-retention", "60")
SYSTEM = "You are an agent that uses tools. " + " ".join(
    f"Rule {i}: call the search tool before you answer, and quote what it returned." for i in range(24)
)
QUERY = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
TOOLS = [{"type": "function", "function": {"name": "search", "description": "search the web", "parameters": QUERY}}]
BODY = {"tools": TOOLS, "parallel_tool_calls": False, "max_tokens": 96, "temperature": 0}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from run_cluster(
        tmp_path_factory.mktemp("programs"), ["--admin-key", ADMIN_KEY], MODEL_ENGINE, b_reversed=True
    )


def turn(client: httpx.Client, gateway, messages: list[dict], program: str, **extra) -> tuple[dict, str]:
    """A chat turn of ``program`` through ``gateway``: the response and the engine that ran it."""
    before = first_tokens_by_engine(gateway.url)
    r = client.post(
        f"{gateway.url}/v1/chat/completions", json={"messages": messages, **BODY, "prompt_cache_key": program, **extra}
    )
    assert r.status_code == 200, r.text
    after = first_tokens_by_engine(gateway.url)
    [engine] = [address for address, count in after.items() if count > before.get(address, 0)]
    return r.json(), engine


def test_a_program_returning_through_another_gateway_hits_its_pinned_conversation(cluster):
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is the capital of Peru?"}]
    with httpx.Client(timeout=300) as client:
        first, engine = turn(client, cluster.a, messages, "agent-7", tool_choice="required")
        reply = first["choices"][0]
        assert reply["finish_reason"] == "tool_calls", reply
        history = first["usage"]["prompt_tokens"]
        call = reply["message"]["tool_calls"][0]
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "Lima."},
        ]
        back, back_engine = turn(client, cluster.b, messages, "agent-7", max_tokens=8)
        fresh, fresh_engine = turn(client, cluster.b, messages, "agent-8", max_tokens=8)
        stats = client.get(f"{cluster.b.url}/dashboard/stats", headers=bearer(ADMIN_KEY)).json()
    cached = back["usage"]["prompt_tokens_details"]["cached_tokens"]
    fresh_cached = fresh["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert back_engine == engine, "the returning turn went to another engine than the one holding its conversation"
    # The forced first turn's prompt ends a little differently from the history re-rendered.
    assert cached >= 0.9 * history, f"{cached} of {history} history tokens hit (a fresh program: {fresh_cached})"
    assert fresh_engine != engine and fresh_cached < history // 2, (fresh_engine, fresh_cached)
    retention = stats["retention"]  # both engines' figures, summed
    assert retention["released_returned"] == 1, retention  # the pin was there until the program's turn came back
    # agent-7's; agent-8's tool-call tail is the client's word (no engine saw it call), not a return
    assert retention["returning_turns"] == 1 and retention["returning_hits_tokens"] >= cached, retention
    assert retention["tool_gaps"] == 1, retention  # the returning program's; the fresh one has no previous turn
