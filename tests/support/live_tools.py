"""Tool calls against a live server as agents make them: the forced-call bodies of the 50 random
schemas (`tests.support.tool_schemas`), sent all at once so the engine batches them, and the
replies read as agent frameworks read them (chat streams accumulated by index, the openai SDK's
named calls, LangChain's ``bind_tools(tool_choice="any")``). Shared by the tool tests that run on
servers of their own (`tests/gateway/test_tools_live.py`, `test_tools_speculative_live.py`)."""

from __future__ import annotations

import json

import anyio
import httpx
import jsonschema
import openai

from tests.support.http import parse_sse
from tests.support.servers import LiveServer

NUM_SCHEMAS = 50
SYSTEM = {"role": "system", "content": "You are an assistant that calls functions."}
ASK = {"role": "user", "content": "Call the function with example arguments."}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "web_search",
        "description": "Search the web",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "maxLength": 30}},
            "required": ["query"],
        },
    },
}
PARIS = [{"role": "user", "content": "What's the weather like in Paris right now?"}]


def stream_calls(payloads: list[str]) -> tuple[str, list[dict], str | None]:
    """(content, calls, finish_reason) of a chat stream, accumulated the way agent frameworks
    do: content concatenated, tool calls by index (id/type/name from the first delta, arguments
    concatenated). Checks OpenAI's delta shape on the way."""
    assert payloads[-1] == "[DONE]"
    content, calls, finish = "", {}, None
    for payload in payloads[:-1]:
        chunk = json.loads(payload)
        assert "error" not in chunk, chunk
        for choice in chunk["choices"]:
            delta = choice["delta"]
            content += delta.get("content") or ""
            for tc in delta.get("tool_calls") or ():
                if tc["index"] not in calls:  # the first delta of a call carries id, type and name
                    assert tc["id"].startswith("call_") and tc["type"] == "function" and tc["function"]["name"]
                    calls[tc["index"]] = {"id": tc["id"], "name": "", "arguments": ""}
                else:
                    assert "id" not in tc and "name" not in tc["function"]
                calls[tc["index"]]["name"] += tc["function"].get("name") or ""
                calls[tc["index"]]["arguments"] += tc["function"].get("arguments") or ""
            if choice["finish_reason"] is not None:
                finish = choice["finish_reason"]
    assert sorted(calls) == list(range(len(calls)))
    return content, [calls[i] for i in sorted(calls)], finish


async def post(client: httpx.AsyncClient, body: dict) -> tuple[int, dict | list[str]]:
    if not body.get("stream"):
        r = await client.post("/v1/chat/completions", json=body)
        return r.status_code, r.json()
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        raw = (await r.aread()).decode()
    return r.status_code, parse_sse(raw) if r.status_code == 200 else json.loads(raw)


async def post_all(server: LiveServer, bodies: list[dict]) -> list[tuple[int, dict | list[str]]]:
    results: list = [None] * len(bodies)
    async with httpx.AsyncClient(base_url=server.url, timeout=900, limits=httpx.Limits(max_connections=128)) as client:

        async def one(i: int) -> None:
            results[i] = await post(client, bodies[i])

        async with anyio.create_task_group() as tasks:
            for i in range(len(bodies)):
                tasks.start_soon(one, i)
    return results


def forced_body(tool: dict, seed: int, *, parallel: bool, temperature: float, max_tokens: int, stream: bool) -> dict:
    return {
        "messages": [SYSTEM, ASK],
        "tools": [tool],
        "tool_choice": "required",
        "parallel_tool_calls": parallel,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "seed": seed,
        "stream": stream,
    }


def named_call_streamed_and_not(server: LiveServer) -> None:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=600)
    forced = {"type": "function", "function": {"name": "web_search"}}
    args = {
        "model": "SmolLM2-135M-Instruct",
        "messages": PARIS,
        "tools": [WEATHER, SEARCH],
        "tool_choice": forced,
        # Room past the last tokens before the budget, where it narrows the grammar and a finished call
        # may be said to be cut (issue 35); at 60 this ~30-token call ended there.
        "max_tokens": 120,
        "temperature": 0,
    }
    completion = client.chat.completions.create(**args)
    [choice] = completion.choices
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "web_search"
    jsonschema.validate(json.loads(call.function.arguments), SEARCH["function"]["parameters"])

    calls: dict[int, dict] = {}
    finish = None
    for chunk in client.chat.completions.create(**args, stream=True):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        for tc in delta.tool_calls or ():
            entry = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            entry["id"] = tc.id or entry["id"]
            if tc.function is not None:
                entry["name"] += tc.function.name or ""
                entry["arguments"] += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    [streamed] = calls.values()
    assert streamed["id"].startswith("call_")
    assert (streamed["name"], streamed["arguments"]) == ("web_search", call.function.arguments)


def langchain_any(server: LiveServer) -> None:
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        return f"sunny in {city}"

    llm = ChatOpenAI(
        model="SmolLM2-135M-Instruct",
        base_url=f"{server.url}/v1",
        api_key="unused",
        max_tokens=160,
        temperature=0.7,
        max_retries=0,
    )
    bound = llm.bind_tools([get_weather], tool_choice="any")
    reply = bound.invoke("What is the weather in Paris?")
    assert reply.tool_calls and not reply.invalid_tool_calls and not reply.content
    assert all(c["name"] == "get_weather" and isinstance(c["args"]["city"], str) for c in reply.tool_calls)
    merged = None
    for chunk in bound.stream("What is the weather in Paris?"):
        merged = chunk if merged is None else merged + chunk
    assert merged.tool_calls and not merged.invalid_tool_calls
    assert all(c["name"] == "get_weather" and isinstance(c["args"]["city"], str) for c in merged.tool_calls)
