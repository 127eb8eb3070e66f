"""The SDK, the Agent loop and the examples on the default model (SmolLM2-135M, sync runner).

The tool-calling tests need the gateway to return ``tool_calls`` and to
enforce ``tool_choice`` (issue 7); on a gateway without them they skip,
saying so."""

from __future__ import annotations

import json

import jsonschema
import pytest

from agentgate.agents import Agent, AsyncClient, ContentDelta, tool
from tests.support.answers import CAPITAL_CHAT, CAPITAL_PROMPT, reference_chat, reference_completion

pytestmark = pytest.mark.anyio


@tool
def get_weather(city: str) -> dict:
    """Get the current weather in a city.

    Args:
        city: the city's name, e.g. "Paris".
    """
    return {"city": city, "sky": "sunny", "celsius": 21}


@tool
def get_time(city: str) -> str:
    """Get the current local time in a city.

    Args:
        city: the city's name, e.g. "Paris".
    """
    return f"It is 14:05 in {city}."


async def _tool_calls_supported(client: AsyncClient) -> bool:
    probe = await client.chat(
        [{"role": "user", "content": "Weather in Paris?"}],
        tools=[get_weather],
        tool_choice="required",
        max_tokens=48,
        temperature=0,
    )
    return bool(probe.tool_calls)


@pytest.mark.slow
async def test_greedy_streaming_matches_the_non_streaming_answer(model_server):
    # The server's own answers over plain HTTP, each decided with margin.
    reference = reference_chat(model_server.url, CAPITAL_CHAT, max_tokens=16)
    reference_text = reference_completion(model_server.url, CAPITAL_PROMPT, max_tokens=4)["text"]
    async with AsyncClient(model_server.url) as client:
        plain = await client.chat(CAPITAL_CHAT, max_tokens=16, temperature=0)
        async with client.chat_stream(CAPITAL_CHAT, max_tokens=16, temperature=0) as stream:
            texts = [e.text async for e in stream if isinstance(e, ContentDelta)]
        completion = await client.complete(CAPITAL_PROMPT, max_tokens=4, temperature=0)
    assert plain.content == reference["message"]["content"] and "".join(texts) == plain.content
    assert stream.result().usage == plain.usage and plain.usage.completion_tokens <= 16
    assert completion.text == reference_text


@pytest.mark.slow
async def test_agent_runs_a_two_tool_task_with_enforced_tool_choice(model_server):
    async with AsyncClient(model_server.url, timeout=300) as client:
        if not await _tool_calls_supported(client):
            pytest.skip("the gateway does not return tool calls yet (issue 7)")
        called: list[str] = []

        def choice(turn: int):
            if turn == 0:
                return "required"  # some tool, the model picks which (constrained decoding)
            missing = [t for t in ("get_weather", "get_time") if t not in called]
            return missing[0] if missing else "none"  # then the other tool by name, then a plain answer

        agent = Agent(
            client,
            [get_weather, get_time],
            tool_choice=choice,
            max_turns=4,
            max_tokens=40,
            parallel_tool_calls=False,  # one call a turn: the grammar ends after it
            system="You answer questions about cities using the tools.",
            on_tool_result=lambda r: called.append(r.call.name),
        )
        result = await agent.run("What is the weather and the local time in Paris?")
    assert set(result.tools_called) == {"get_weather", "get_time"}, result.messages
    for outcome in result.tool_results:
        tool_schema = {"get_weather": get_weather, "get_time": get_time}[outcome.call.name].parameters
        jsonschema.validate(json.loads(outcome.call.arguments), tool_schema)  # arguments always parse and validate
        assert outcome.ok, outcome.error
    assert result.stop_reason == "answer" and result.output and result.turns <= 4
    roles = [m["role"] for m in result.messages]
    assert roles.count("tool") == len(result.tool_results) and roles[-1] == "assistant"


@pytest.mark.slow
async def test_the_calculator_example_runs_on_the_default_model(model_server, capsys):
    from agentgate.agents.examples import calculator

    async with AsyncClient(model_server.url) as client:
        if not await _tool_calls_supported(client):
            pytest.skip("the gateway does not return tool calls yet (issue 7)")
    capsys.readouterr()
    # 64 tokens: a call takes about 33, and one that max_tokens cuts is no longer returned (issue 17)
    code = await calculator.run(
        ["--url", model_server.url, "--max-turns", "2", "--max-tokens", "64", "What is 12 * 7?"]
    )
    out = capsys.readouterr().out
    assert code == 0 and "→" in out and "←" in out and "turn(s)" in out  # a call, its result, the summary
