"""The Anthropic Messages API with the real anthropic SDK, as its users write it,
against `agentgate serve` with the default model (the shared ``model_server``):
a message, a stream, a tool round trip with ``tool_choice`` any, ``tool`` and
``none`` enforced, ``stop_sequences``, count_tokens. And, on the in-process
gateway (keys configured): ``x-api-key`` beside Bearer, Anthropic-shaped errors."""

from __future__ import annotations

import anthropic
import pytest

from tests.support.answers import CAPITAL_CHAT, reference_chat
from tests.support.servers import USER_KEY

MODEL = "SmolLM2-135M-Instruct"
WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def client(model_server):
    with anthropic.Anthropic(base_url=model_server.url, api_key="unused", max_retries=0) as c:
        yield c


def test_a_message_and_its_token_count(client, model_server):
    messages = CAPITAL_CHAT
    # The same server's answer through chat completions, with Anthropic's system prompt as a system message.
    reference = reference_chat(model_server.url, [{"role": "system", "content": "Be brief."}, *messages], max_tokens=24)
    reply = client.messages.create(
        model=MODEL, max_tokens=24, messages=messages, system="Be brief.", extra_body={"temperature": 0}
    )  # the SDK has no temperature argument any more
    assert reply.type == "message" and reply.role == "assistant" and reply.model == MODEL
    [block] = reply.content
    assert block.type == "text" and block.text == reference["message"]["content"]
    stop = {"stop": "end_turn", "length": "max_tokens"}[reference["finish_reason"]]
    assert reply.stop_reason == stop and 0 < reply.usage.output_tokens <= 24
    count = client.messages.count_tokens(model=MODEL, messages=messages, system="Be brief.")
    # Anthropic's counting: the prompt is input_tokens plus what the cache served (the reference's
    # request computed this prompt, so most of it is read from the prefix cache).
    assert reply.usage.cache_read_input_tokens > 0
    assert count.input_tokens == reply.usage.input_tokens + reply.usage.cache_read_input_tokens


def test_streaming_with_the_sdk_helper(client):
    with client.messages.stream(model=MODEL, max_tokens=16, messages=ASK, extra_body={"temperature": 0}) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.content[0].text == text
    assert final.stop_reason in ("end_turn", "max_tokens") and final.usage.output_tokens > 0


def test_stop_sequences_end_the_reply_and_are_named(client):
    reply = client.messages.create(
        model=MODEL, max_tokens=32, messages=ASK, stop_sequences=[" "], extra_body={"temperature": 0}
    )
    assert reply.stop_reason == "stop_sequence" and reply.stop_sequence == " "
    assert " " not in reply.content[0].text if reply.content else True


def test_tool_round_trip_with_tool_choice_any(client):
    reply = client.messages.create(
        model=MODEL,
        max_tokens=160,
        messages=ASK,
        tools=[WEATHER],
        tool_choice={"type": "any"},
        extra_body={"temperature": 0.7},
    )
    # tool_use when the model ended its calls; max_tokens when the budget closed them (issue 35: a
    # reply the budget cut says so), the calls whole either way.
    assert reply.stop_reason in ("tool_use", "max_tokens") and reply.usage.output_tokens <= 160, reply
    uses = [b for b in reply.content if b.type == "tool_use"]
    assert uses and all(u.name == "get_weather" and isinstance(u.input["city"], str) for u in uses)
    assert not [b for b in reply.content if b.type == "text"]
    _round_trip(client, ASK, reply)


def _round_trip(client, ask: list[dict], reply) -> None:
    """The tool results of ``reply``'s calls sent back: the model answers, on a longer prompt."""
    results = [
        {"type": "tool_result", "tool_use_id": b.id, "content": "Sunny, 22 C"}
        for b in reply.content
        if b.type == "tool_use"
    ]
    follow = client.messages.create(
        model=MODEL,
        max_tokens=24,
        tools=[WEATHER],
        extra_body={"temperature": 0},
        messages=[*ask, {"role": "assistant", "content": reply.content}, {"role": "user", "content": results}],
    )

    def prompt(message) -> int:  # Anthropic's input_tokens leave out what the prefix cache served
        return message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0)

    assert prompt(follow) > prompt(reply) and follow.content


@pytest.mark.parametrize("disable_parallel", [False, True], ids=["parallel", "one-call"])
def test_any_with_64_tokens_ends_on_tool_use_and_the_round_trip_completes(client, disable_parallel):
    """Issue 28: ``any`` with max_tokens 64 wrote two identical get_weather calls and a third cut
    (stop_reason max_tokens). Now the calls fit the budget (the grammar closes in time), a repeat
    is dropped, and ``disable_parallel_tool_use`` allows exactly one: stop_reason tool_use. With
    parallel calls the model goes on calling until the budget closes the last call, which issue 35
    has the reply say (max_tokens), its calls whole."""
    choice = {"type": "any", "disable_parallel_tool_use": disable_parallel}
    ask = [{"role": "user", "content": "Weather in Paris?"}]
    reply = client.messages.create(model=MODEL, max_tokens=64, messages=ask, tools=[WEATHER], tool_choice=choice)
    uses = [b for b in reply.content if b.type == "tool_use"]
    ends = ("tool_use",) if disable_parallel else ("tool_use", "max_tokens")
    assert reply.stop_reason in ends and reply.usage.output_tokens <= 64, reply
    assert uses and all(u.name == "get_weather" and isinstance(u.input["city"], str) for u in uses)
    assert len({str(u.input) for u in uses}) == len(uses) and not [b for b in reply.content if b.type == "text"]
    if disable_parallel:
        assert len(uses) == 1
    _round_trip(client, ask, reply)


def test_a_budget_below_one_whole_call_is_refused(client):
    """A max_tokens that cannot hold the shortest call ``any`` allows is a 400 naming max_tokens and
    the minimum, before anything runs."""
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(model=MODEL, max_tokens=5, messages=ASK, tools=[WEATHER], tool_choice={"type": "any"})
    message = info.value.body["error"]["message"]
    assert "`max_tokens` is 5" in message and "at least" in message, message


def test_tool_choice_tool_and_none_streaming(client):
    with client.messages.stream(
        model=MODEL, max_tokens=64, messages=ASK, tools=[WEATHER], tool_choice={"type": "tool", "name": "get_weather"}
    ) as stream:
        final = stream.get_final_message()
    [use] = final.content
    assert use.type == "tool_use" and isinstance(use.input["city"], str) and final.stop_reason == "tool_use"
    reply = client.messages.create(
        model=MODEL,
        max_tokens=16,
        messages=ASK,
        tools=[WEATHER],
        tool_choice={"type": "none"},
        extra_body={"temperature": 0},
    )
    assert all(b.type == "text" for b in reply.content) and reply.stop_reason != "tool_use"


def test_x_api_key_beside_bearer_and_anthropic_errors(gateway):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]}
    path = "/v1/messages/count_tokens"
    assert gateway.client.post(path, json=body, headers={"x-api-key": USER_KEY}).status_code == 200
    assert gateway.client.post(path, json=body, headers={"Authorization": f"Bearer {USER_KEY}"}).status_code == 200
    r = gateway.client.post(path, json=body, headers={"x-api-key": "wrong"})
    assert r.status_code == 401
    assert r.json() == {"type": "error", "error": {"type": "authentication_error", "message": "invalid API key"}}
    r = gateway.client.post("/v1/messages", json={**body, "max_tokens": "many"}, headers={"x-api-key": USER_KEY})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in r.json()["error"]["message"]
    r = gateway.client.post(
        "/v1/messages", json={**body, "max_tokens": 4, "model": "claude-x"}, headers={"x-api-key": USER_KEY}
    )
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    bad = {**body, "max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}
    r = gateway.client.post("/v1/messages", json=bad, headers={"x-api-key": USER_KEY})
    assert r.status_code == 400 and "messages[0].content[0]" in r.json()["error"]["message"]
