"""Anthropic ``thinking`` blocks sent back (issue 48): the real anthropic SDK against the live null
server, whose sealing key the tests hold (``AGENTGATE_SEALING_KEY``), so a block signed as the
server signs its own is verified and read, an edited one (text or signature) is a 400 naming its
``signature``, a block another deployment signed likewise, and ``redacted_thinking`` passes
through; on the in-process gateway, what a verified block does to the prompt (the default model's
template has no reasoning: nothing) and to a reasoning template (Qwen3-style: rendered). And the
request's ``thinking`` / ``output_config.effort`` checked, each refusal naming its field."""

from __future__ import annotations

import json

import anthropic
import pytest
from anthropic.lib.streaming._messages import accumulate_event

from agentgate.engine.text.chat_template import render_chat
from agentgate.gateway.anthropic_api.translate import chat_messages
from agentgate.gateway.api_types.anthropic import Message
from agentgate.gateway.api_types.openai import Usage
from agentgate.gateway.formats.anthropic import MessagesStream
from agentgate.gateway.formats.anthropic_thinking import thinking_block, thinking_of, thinking_signature
from agentgate.gateway.state.sealing import Sealer
from tests.support.servers import SEALING_KEY, USER_KEY

MODEL = "SmolLM2-135M-Instruct"
SEALER = Sealer([SEALING_KEY])  # the null server's
THOUGHT = "The user wants the weather; I should call the tool."


def _history(block: dict) -> list[dict]:
    return [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": [block, {"type": "text", "text": "Let me check."}]},
        {"role": "user", "content": "Go on."},
    ]


def _thinking(text: str = THOUGHT, signature: str | None = None) -> dict:
    return {"type": "thinking", "thinking": text, "signature": signature or thinking_signature(SEALER, text)}


@pytest.fixture(scope="module")
def client(null_server):
    with anthropic.Anthropic(base_url=null_server.url, api_key=USER_KEY, max_retries=0) as c:
        yield c


def test_a_signed_thinking_block_sent_back_is_verified_and_an_edited_one_is_refused(client):
    reply = client.messages.create(model=MODEL, max_tokens=2, messages=_history(_thinking()))
    assert reply.type == "message" and reply.usage.input_tokens > 0
    redacted = {"type": "redacted_thinking", "data": "opaque"}
    assert client.messages.create(model=MODEL, max_tokens=2, messages=_history(redacted)).type == "message"
    edited = {**_thinking(), "thinking": THOUGHT.replace("call", "skip")}
    forged = _thinking(signature=Sealer(["another-deployments-key"]).sign("anthropic.thinking", THOUGHT.encode()))
    for block in (edited, forged, _thinking(signature="not-a-signature"), {"type": "thinking", "thinking": THOUGHT}):
        with pytest.raises(anthropic.BadRequestError) as refused:
            client.messages.create(model=MODEL, max_tokens=2, messages=_history(block))
        assert refused.value.body["error"]["message"].startswith("messages[1].content[0].signature:")


def test_the_count_of_a_conversation_with_thinking_is_verified_too(gateway):
    body = {"model": MODEL, "messages": _history(_thinking())}
    headers = {"x-api-key": USER_KEY}
    with_block = gateway.client.post("/v1/messages/count_tokens", json=body, headers=headers)
    plain = {"model": MODEL, "messages": _history({"type": "text", "text": ""})}
    without = gateway.client.post("/v1/messages/count_tokens", json=plain, headers=headers)
    # SmolLM2's template has no reasoning: a verified block adds nothing to the prompt
    assert with_block.status_code == 200 and with_block.json() == without.json()
    body["messages"][1]["content"][0]["signature"] = thinking_signature(Sealer(["x" * 16]), THOUGHT)
    r = gateway.client.post("/v1/messages/count_tokens", json=body, headers=headers)
    assert r.status_code == 400 and "messages[1].content[0].signature" in r.json()["error"]["message"]


def test_a_verified_block_reaches_a_reasoning_template_as_reasoning_content():
    messages = chat_messages(None, _history(_thinking()), SEALER)
    assert messages[1] == {"role": "assistant", "content": "Let me check.", "reasoning_content": THOUGHT}
    # a template that renders reasoning_content (as Qwen3's does for the turns of the current tool loop)
    template = (
        "{% for m in messages %}<|{{ m.role }}|>{% if m.reasoning_content %}<think>{{ m.reasoning_content }}"
        "</think>{% endif %}{{ m.content }}\n{% endfor %}"
    )
    assert f"<|assistant|><think>{THOUGHT}</think>Let me check." in render_chat(template, messages)


def test_thinking_requests_are_checked_and_each_refusal_names_its_field(client):
    ask = [{"role": "user", "content": "Hi"}]
    for thinking, config, param in [
        ({"type": "enabled", "budget_tokens": 8}, None, "thinking.budget_tokens"),  # == max_tokens: no room
        ({"type": "enabled", "budget_tokens": 0}, None, "thinking.budget_tokens"),
        ({"type": "enabled"}, None, "thinking.budget_tokens"),
        ({"type": "sometimes"}, None, "thinking.type"),
        ({"type": "adaptive"}, {"effort": "extreme"}, "output_config.effort"),
    ]:
        with pytest.raises(anthropic.BadRequestError) as refused:
            extra = {"output_config": config} if config else {}
            client.messages.create(model=MODEL, max_tokens=8, messages=ask, thinking=thinking, extra_body=extra)
        assert refused.value.body["error"]["message"].startswith(f"{param}:"), refused.value.body
    # accepted on this model, which has no reasoning: disabled, and adaptive (which then does nothing)
    for thinking in ({"type": "disabled"}, {"type": "adaptive"}):
        reply = client.messages.create(model=MODEL, max_tokens=8, messages=ask, thinking=thinking)
        assert reply.type == "message" and reply.usage.output_tokens > 0


def test_a_streamed_thinking_block_is_what_the_sdk_accumulates_and_its_signature_verifies():
    fmt = MessagesStream(Message(id="msg_1", model=MODEL), SEALER)
    wire = fmt.opening() + fmt.thinking("The user wants ") + fmt.thinking("the weather.") + fmt.closing(Usage(3, 5, 8))
    events = [json.loads(line[6:]) for line in wire.decode().splitlines() if line.startswith("data: ")]
    kinds = [e["type"] if e["type"] != "content_block_delta" else e["delta"]["type"] for e in events]
    assert kinds == [
        "message_start",
        "ping",
        "content_block_start",
        "thinking_delta",
        "thinking_delta",
        "signature_delta",  # once, after the whole text, before the block stops
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    snapshot = None
    for event in events[:-1]:  # the SDK's own accumulator, as MessageStream runs it
        if event["type"] != "ping":
            snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs={})
    [block] = snapshot.content
    assert block.type == "thinking" and block.thinking == "The user wants the weather."
    sent_back = block.model_dump()
    assert sent_back == thinking_block(SEALER, "The user wants the weather.")  # the same HMAC, whole or streamed
    assert thinking_of(sent_back, "messages[1].content[0]", SEALER) == "The user wants the weather."
