"""The MCP client, its cached tool lists and a response's calls within their limits, against a
real MCP server from the ``mcp`` SDK on 127.0.0.1 (streamable HTTP and SSE)."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

from agentgate.gateway.mcp.allowlist import McpServer
from agentgate.gateway.mcp.calls import CallLimits, ToolCalls
from agentgate.gateway.mcp.client import TIMEOUT, McpEndpoint, McpFailure, call_tool, list_tools
from agentgate.gateway.mcp.tool_lists import ToolLists
from tests.support.mcp_servers import McpServers, mcp_servers


@pytest.fixture(scope="module")
def servers() -> Iterator[McpServers]:
    with mcp_servers() as running:
        yield running


@pytest.fixture(params=["http", "sse"])
def endpoint(request: pytest.FixtureRequest, servers: McpServers) -> McpEndpoint:
    url = servers.http_url if request.param == "http" else servers.sse_url
    return McpEndpoint(McpServer("calc", url), {"Authorization": "Bearer sekrit"})


def test_lists_and_calls_over_both_transports(endpoint: McpEndpoint):
    async def main() -> None:
        tools = await list_tools(endpoint, 10)
        add = next(t for t in tools if t["name"] == "add")
        assert add["description"] == "Add two integers."
        assert add["input_schema"]["required"] == ["a", "b"]
        assert await call_tool(endpoint, "add", {"a": 2, "b": 40}, timeout=10, max_bytes=100) == "42"
        assert await call_tool(endpoint, "whoami", {}, timeout=10, max_bytes=100) == "Bearer sekrit"

    anyio.run(main)


def _failure(endpoint: McpEndpoint, name: str, args: dict, *, timeout: float = 10, max_bytes: int = 1000) -> dict:
    async def main() -> dict:
        with pytest.raises(McpFailure) as failed:
            await call_tool(endpoint, name, args, timeout=timeout, max_bytes=max_bytes)
        return failed.value.error

    return anyio.run(main)


def test_each_failure_is_an_mcp_call_error(endpoint: McpEndpoint):
    assert _failure(endpoint, "explode", {"reason": "r"}) == {
        "type": "mcp_tool_execution_error",
        "content": [{"type": "text", "text": "Error executing tool explode"}],
    }
    slow = _failure(endpoint, "sleep", {"seconds": 5}, timeout=0.5)
    assert slow["type"] == "mcp_protocol_error" and slow["code"] == TIMEOUT
    big = _failure(endpoint, "big", {"size": 2000}, max_bytes=1000)
    assert big["type"] == "mcp_protocol_error" and "2000 bytes" in big["message"]
    missing = _failure(endpoint, "nope", {})
    assert missing["type"] in ("mcp_protocol_error", "mcp_tool_execution_error")


def test_an_unreachable_server_is_an_error_not_an_exception():
    endpoint = McpEndpoint(McpServer("gone", "http://127.0.0.1:9/mcp"))

    async def main() -> dict:
        with pytest.raises(McpFailure) as failed:
            await list_tools(endpoint, 5)
        return failed.value.error

    error = anyio.run(main)
    assert error["type"] == "mcp_protocol_error" and "could not talk to MCP server 'gone'" in error["message"]


def test_tool_lists_are_cached_per_server_and_credentials():
    listed: list[McpEndpoint] = []

    async def lister(endpoint: McpEndpoint, timeout: float) -> list[dict]:
        listed.append(endpoint)
        if endpoint.server.label == "down":
            raise McpFailure.protocol(-32000, "down")
        return [{"name": "add", "input_schema": {}}]

    server = McpServer("calc", "http://tools.internal/mcp")
    a, b = McpEndpoint(server, {"Authorization": "Bearer a"}), McpEndpoint(server, {"Authorization": "Bearer b"})
    down = McpEndpoint(McpServer("down", "http://down.internal/mcp"))

    async def main() -> None:
        lists = ToolLists(ttl=60, timeout=5, lister=lister)
        await lists.get(a)
        await lists.get(a)
        await lists.get(b)
        assert listed == [a, b]  # another key lists again
        for _ in range(2):
            with pytest.raises(McpFailure):
                await lists.get(down)
        assert listed == [a, b, down, down]  # a failure is not kept
        never = ToolLists(ttl=0, timeout=5, lister=lister)
        await never.get(a)
        await never.get(a)
        assert listed[-2:] == [a, a]
        tiny = ToolLists(ttl=60, timeout=5, lister=lister, max_bytes=64)  # smaller than one list: none kept
        await tiny.get(a)
        await tiny.get(a)
        assert listed[-2:] == [a, a]

    anyio.run(main)


def test_a_responses_calls_share_one_time_budget(servers: McpServers):
    endpoint = McpEndpoint(McpServer("calc", servers.http_url))

    async def main() -> None:
        # Margins for a loaded machine: the first call leaves ~2.7 s of the budget; the second
        # would need 5 s, so the budget, not its own timeout, ends it.
        calls = ToolCalls(CallLimits(timeout=10, max_bytes=1000, budget=3.0))
        first = await calls.run(endpoint, "sleep", '{"seconds": 0.3}')
        assert first.output == "slept 0.3" and first.error is None
        second = await calls.run(endpoint, "sleep", '{"seconds": 5}')
        assert second.error is not None and second.error["code"] == TIMEOUT
        assert "ran out of this response's tool time" in second.error["message"]
        third = await calls.run(endpoint, "add", '{"a": 1, "b": 2}')
        assert third.error is not None and "is spent" in third.error["message"]
        bad = await ToolCalls(CallLimits(10, 1000, 10)).run(endpoint, "add", "[1, 2]")
        assert bad.error == {
            "type": "mcp_protocol_error",
            "code": -32602,
            "message": "the arguments of 'add' are no JSON object",
        }

    anyio.run(main)
