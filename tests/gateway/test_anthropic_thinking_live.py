"""Thinking in the Messages API on a reasoning model, with the real anthropic SDK: the default model
under a template that opens ``<think>\\n`` in the generation prompt (``thinking_template.jinja``),
which never closes the block itself, so every answer below exists because the engine closed the
thinking at the budget. One server for the module: the budget, a ``thinking`` block first with the
server's signature, non-streamed and streamed (the SDK's accumulator), sent back verified, edited
refused; a forced call after the thinking; usage's thinking tokens."""

from __future__ import annotations

from pathlib import Path

import anthropic
import pytest

from agentgate.gateway.formats.anthropic_thinking import thinking_of
from agentgate.gateway.state.sealing import Sealer
from tests.support.servers import SEALING_KEY, start_server

MODEL = "SmolLM2-135M-Instruct"
TEMPLATE = Path(__file__).with_name("thinking_template.jinja")
SEALER = Sealer([SEALING_KEY])
WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    server = start_server(
        tmp_path_factory.mktemp("thinking-server"),
        *("--runner", "sync", "--dtype", "float32", "--max-model-len", "1024", "--max-num-seqs", "4"),
        *("--chat-template", str(TEMPLATE)),
        env={"AGENTGATE_SEALING_KEY": SEALING_KEY},
    )
    with anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0) as c:
        yield c
    server.stop()


def _enabled(budget: int) -> dict:
    return {"type": "enabled", "budget_tokens": budget}


def test_a_thinking_block_comes_first_signed_and_goes_back_verified(client):
    reply = client.messages.create(
        model=MODEL, max_tokens=24, messages=ASK, thinking=_enabled(8), extra_body={"temperature": 0}
    )
    thinking, *rest = reply.content
    assert thinking.type == "thinking" and thinking.thinking and "<think>" not in thinking.thinking
    assert all(b.type == "text" and "think>" not in b.text for b in rest)
    assert thinking_of(thinking.model_dump(), "x", SEALER) == thinking.thinking  # the server's HMAC
    details = reply.usage.output_tokens_details
    assert details is not None and 8 <= details.thinking_tokens <= reply.usage.output_tokens
    print(f"\nthinking tokens {details.thinking_tokens} of {reply.usage.output_tokens} (budget 8, max_tokens 24)")
    history = [*ASK, {"role": "assistant", "content": [b.model_dump() for b in reply.content]}]
    history.append({"role": "user", "content": "And in Rome?"})
    again = client.messages.create(model=MODEL, max_tokens=4, messages=history, thinking=_enabled(2))
    assert again.content[0].type == "thinking"
    history[1]["content"][0]["thinking"] += " (edited)"
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(model=MODEL, max_tokens=4, messages=history)
    assert refused.value.body["error"]["message"].startswith("messages[1].content[0].signature:")


def test_streamed_thinking_is_what_the_sdk_accumulates(client):
    with client.messages.stream(
        model=MODEL, max_tokens=20, messages=ASK, thinking=_enabled(6), extra_body={"temperature": 0}
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    thinking = final.content[0]
    assert thinking.type == "thinking" and thinking.thinking and kinds.count("signature") == 1
    assert thinking_of(thinking.model_dump(), "x", SEALER) == thinking.thinking
    assert "thinking" in kinds and final.usage.output_tokens_details.thinking_tokens >= 6


def test_a_forced_call_comes_after_the_thinking(client):
    """Issue 48: the whole call fits in what the thinking leaves of max_tokens 64; the budget's narrowing
    near the end never changed a token the model chose, so the reply is the model's call: tool_use."""
    reply = client.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=ASK,
        tools=[WEATHER],
        tool_choice={"type": "any"},
        thinking=_enabled(8),
        extra_body={"temperature": 0},
    )
    assert [b.type for b in reply.content][0] == "thinking"
    calls = [b for b in reply.content if b.type == "tool_use"]
    assert reply.stop_reason == "tool_use" and calls and calls[0].name == "get_weather"
    assert isinstance(calls[0].input.get("city"), str)


def test_disabled_and_adaptive_thinking_and_a_budget_with_no_room(client):
    off = client.messages.create(model=MODEL, max_tokens=12, messages=ASK, thinking={"type": "disabled"})
    # the engine closed the block at once: its thinking tokens are the end tag's, no thought in between
    assert off.usage.output_tokens_details.thinking_tokens <= 4
    assert all(not b.thinking.strip() for b in off.content if b.type == "thinking")
    adaptive = client.messages.create(
        model=MODEL,
        max_tokens=16,
        messages=ASK,
        thinking={"type": "adaptive"},
        extra_body={"output_config": {"effort": "low"}},
    )
    assert adaptive.content[0].type == "thinking" and adaptive.usage.output_tokens_details.thinking_tokens <= 16
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(model=MODEL, max_tokens=12, messages=ASK, thinking=_enabled(12))
    assert refused.value.body["error"]["message"].startswith("thinking.budget_tokens:")
