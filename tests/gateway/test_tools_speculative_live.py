"""Forced tool calls with speculative decoding on (issue 28): several tokens a step, so tool-call
deltas carry several, and they must still accumulate to the very calls the same requests return
whole. A file of its own (its server is the suite's slowest): the two test workers of
scripts/test.sh run it beside the other tool tests instead of after them."""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest

from tests.support.live_tools import (
    NUM_SCHEMAS,
    forced_body,
    langchain_any,
    named_call_streamed_and_not,
    post_all,
    stream_calls,
)
from tests.support.servers import start_server
from tests.support.tool_schemas import random_tool

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def speculative_server(tmp_path_factory: pytest.TempPathFactory):
    """Speculative decoding on (drafts from the request's and recent outputs, grammar jump-forward,
    the budget's closing): several tokens arrive per step, so tool-call deltas carry several."""
    flags = (
        "--runner sync --speculative suffix --dtype float32 --max-model-len 2048 --max-num-seqs 64 --quantization none"
    )
    server = start_server(tmp_path_factory.mktemp("speculative-server"), *flags.split())
    yield server
    server.stop()


@pytest.mark.slow
@pytest.mark.timeout(1200)
async def test_speculative_multi_token_deltas_accumulate_to_the_whole_calls(speculative_server):
    """Issue 28, where vLLM has open reports of dropped arguments: with several tokens a step,
    the streamed deltas of 50 forced replies (parallel calls on, max_tokens 64) accumulate to the
    very calls the same requests return whole (seeded: the same tokens), every one whole and
    valid, finish_reason tool_calls or, where the budget closed a call, length (issue 35); the openai
    SDK and langchain-openai read them the same."""
    tools = [random_tool(seed) for seed in range(NUM_SCHEMAS)]
    bodies = [
        forced_body(tools[seed], seed, parallel=True, temperature=0.7, max_tokens=64, stream=stream)
        for stream in (False, True)
        for seed in range(NUM_SCHEMAS)
    ]
    results = await post_all(speculative_server, bodies)
    same = 0
    for seed in range(NUM_SCHEMAS):
        (status, whole), (stream_status, payloads) = results[seed], results[NUM_SCHEMAS + seed]
        assert status == stream_status == 200, (whole, payloads)
        [choice] = whole["choices"]
        content, streamed, finish = stream_calls(payloads)
        calls = [(c["function"]["name"], c["function"]["arguments"]) for c in choice["message"]["tool_calls"]]
        assert choice["finish_reason"] == finish and not content, (seed, choice, finish, content)
        assert finish in ("tool_calls", "length"), (seed, finish)  # length: the budget closed a call (issue 35)
        assert [(c["name"], c["arguments"]) for c in streamed] == calls, seed
        for _, arguments in calls:
            jsonschema.validate(json.loads(arguments), tools[seed]["function"]["parameters"])
        same += 1
    metrics = httpx.get(f"{speculative_server.url}/metrics").text
    accepted = sum(
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("agentgate_spec_accepted_tokens_total")
    )
    print(
        f"\nspeculative: {same}/{NUM_SCHEMAS} streamed replies accumulate to their whole calls; "
        f"{accepted:.0f} drafted tokens accepted"
    )
    assert accepted > 0, "SET-UP: no step took more than one token"
    named_call_streamed_and_not(speculative_server)
    langchain_any(speculative_server)
