"""The Agent loop against a scripted server: parallel tool calls run concurrently, results and
errors go back as tool messages in call order, tool_choice per turn, max turns, streaming."""

from __future__ import annotations

import time

import anyio
import httpx
import pytest

from agentgate.agents import Agent, AsyncClient, ContentDelta, ToolCallComplete, tool
from tests.support.scripted import ScriptedServer, reply

pytestmark = pytest.mark.anyio

running = {"now": 0, "max": 0}


@tool
async def slow_add(a: int, b: int) -> int:
    """Add two integers, slowly."""
    running["now"] += 1
    running["max"] = max(running["max"], running["now"])
    await anyio.sleep(0.3)
    running["now"] -= 1
    return a + b


@tool
def slow_multiply(a: int, b: int) -> int:
    """Multiply two integers, slowly (a sync function: runs in a thread)."""
    time.sleep(0.3)
    return a * b


@tool
def explode() -> str:
    """Always fails."""
    raise RuntimeError("boom")


@tool(timeout=0.1)
async def hang() -> str:
    """Never answers in time."""
    await anyio.sleep(5)
    return "late"


def _client(script: ScriptedServer) -> AsyncClient:
    return AsyncClient("http://test", http_client=httpx.AsyncClient(transport=script.transport()))


@pytest.mark.parametrize("stream", [False, True])
async def test_parallel_calls_run_concurrently_and_results_go_back_in_order(stream):
    running.update(now=0, max=0)
    script = ScriptedServer(
        [
            reply(
                "Computing.",
                [
                    ("c1", "slow_add", {"a": 2, "b": 3}),
                    ("c2", "slow_multiply", {"a": 4, "b": 5}),
                    ("c3", "slow_add", {"a": 1, "b": 1}),
                    ("c4", "explode", {}),
                    ("c5", "nope", {}),
                    ("c6", "hang", {}),
                ],
            ),
            reply("2+3=5 and 4*5=20."),
        ]
    )
    events = []
    async with _client(script) as client:
        agent = Agent(
            client,
            [slow_add, slow_multiply, explode, hang],
            system="sys",
            tool_choice=["required"],
            stream=stream,
            on_event=events.append if stream else None,
        )
        start = time.monotonic()
        result = await agent.run("What are 2+3 and 4*5?")
        elapsed = time.monotonic() - start
    assert elapsed < 0.85, f"the calls ran one after the other ({elapsed:.2f} s)"
    assert running["max"] == 2
    assert result.output == "2+3=5 and 4*5=20." and result.turns == 2 and result.stop_reason == "answer"
    assert result.tools_called == ["slow_add", "slow_multiply", "slow_add", "explode", "nope", "hang"]
    first, second = script.bodies()
    assert first["tool_choice"] == "required" and second["tool_choice"] == "auto"
    assert [t["function"]["name"] for t in first["tools"]] == ["slow_add", "slow_multiply", "explode", "hang"]
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant"] + ["tool"] * 6
    assistant = second["messages"][2]
    assert assistant["content"] == "Computing." and [c["id"] for c in assistant["tool_calls"]] == [
        "c1",
        "c2",
        "c3",
        "c4",
        "c5",
        "c6",
    ]
    tools = second["messages"][3:]
    assert [m["tool_call_id"] for m in tools] == ["c1", "c2", "c3", "c4", "c5", "c6"]
    assert [m["content"] for m in tools[:3]] == ["5", "20", "2"]
    assert "RuntimeError: boom" in tools[3]["content"]
    assert "no tool named 'nope'" in tools[4]["content"]
    assert "timed out after 0.1 s" in tools[5]["content"]
    assert result.usage.total_tokens == 30
    if stream:
        assert "".join(e.text for e in events if isinstance(e, ContentDelta)) == "Computing.2+3=5 and 4*5=20."
        assert len([e for e in events if isinstance(e, ToolCallComplete)]) == 6


async def test_max_turns_stops_a_model_that_keeps_calling():
    script = ScriptedServer([reply(None, [(f"c{i}", "slow_add", {"a": i, "b": 1})]) for i in range(3)])
    async with _client(script) as client:
        result = await Agent(client, [slow_add], max_turns=3, tool_choice=lambda turn: "slow_add").run("loop")
    assert result.turns == 3 and result.stop_reason == "max_turns" and len(result.tool_results) == 3
    assert all(b["tool_choice"] == {"type": "function", "function": {"name": "slow_add"}} for b in script.bodies())


async def test_missing_call_ids_are_filled_and_conversations_continue():
    script = ScriptedServer([reply(None, [("", "slow_add", {"a": 1, "b": 2})]), reply("3")])
    async with _client(script) as client:
        agent = Agent(client, [slow_add])
        result = await agent.run([{"role": "user", "content": "1+2?"}])
    second = script.bodies()[1]["messages"]
    assert second[1]["tool_calls"][0]["id"] == "call_0_0" and second[2]["tool_call_id"] == "call_0_0"
    assert result.output == "3" and result.messages[-1] == {"role": "assistant", "content": "3"}


async def test_an_agent_without_tools_just_answers():
    script = ScriptedServer([reply("hello")])
    async with _client(script) as client:
        result = await Agent(client).run("hi")
    assert result.output == "hello" and "tools" not in script.bodies()[0] and "tool_choice" not in script.bodies()[0]
