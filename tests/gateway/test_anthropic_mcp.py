"""Anthropic's MCP connector on ``POST /v1/messages`` (issue 38), as the anthropic SDK sends it
(``client.beta.messages.create(mcp_servers=..., betas=["mcp-client-2025-04-04"])``): the same
core as the Responses API's hosted MCP tools, over the scripted model of
``tests.support.mcp_scripts`` and a real MCP server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from tests.support.mcp_scripts import mcp_gateway
from tests.support.mcp_servers import McpServers, mcp_servers
from tests.support.scripted_engine import served_over_http

BETA = "mcp-client-2025-04-04"


@pytest.fixture(scope="module")
def client() -> Iterator[anthropic.Anthropic]:
    with mcp_servers() as servers, mcp_gateway(servers) as gateway, served_over_http(gateway) as url:
        with anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0) as c:
            c.servers = servers  # type: ignore[attr-defined]
            yield c


def calc(servers: McpServers, **extra: Any) -> dict[str, Any]:
    return {"type": "url", "url": servers.http_url, "name": "calc", **extra}


def create(client: anthropic.Anthropic, request_id: str, servers: list[dict[str, Any]], **extra: Any):
    return client.beta.messages.create(
        model="m",
        max_tokens=200,
        messages=[{"role": "user", "content": "What is 2 + 3?"}],
        mcp_servers=servers,
        betas=[BETA],
        extra_headers={"X-Request-Id": request_id},
        **extra,
    )


def test_the_server_runs_the_call_and_the_model_answers(client: anthropic.Anthropic):
    message = create(client, "add-1", [calc(client.servers, authorization_token="tok")])
    use, result, text = message.content
    assert use.type == "mcp_tool_use" and use.name == "add" and use.server_name == "calc"
    assert use.input == {"a": 2, "b": 3}
    assert result.type == "mcp_tool_result" and result.tool_use_id == use.id and result.is_error is False
    assert [block.text for block in result.content] == ["5"]
    assert text.type == "text" and text.text == "The sum is 5."
    assert message.stop_reason == "end_turn" and message.usage.output_tokens > 0


def test_a_failing_tool_is_a_result_with_is_error(client: anthropic.Anthropic):
    message = create(client, "fail-1", [calc(client.servers)])
    result = message.content[1]
    assert result.type == "mcp_tool_result" and result.is_error is True
    assert result.content[0].text == "Error executing tool explode"
    assert message.content[-1].text == "It failed."


def test_a_client_tool_call_ends_the_message_with_tool_use(client: anthropic.Anthropic):
    weather = {"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
    message = create(client, "client-1", [calc(client.servers)], tools=[weather])
    assert [block.type for block in message.content] == ["tool_use"] and message.stop_reason == "tool_use"


def test_a_server_not_allowed_is_a_400_naming_it(client: anthropic.Anthropic):
    with pytest.raises(anthropic.BadRequestError) as refused:
        create(client, "add-2", [{"type": "url", "url": "http://10.0.0.1/mcp", "name": "x"}])
    assert "http://10.0.0.1/mcp" in str(refused.value)


def test_allowed_tools_and_a_disabled_server(client: anthropic.Anthropic):
    only_add = calc(client.servers, tool_configuration={"allowed_tools": ["add"]})
    assert create(client, "add-3", [only_add]).content[1].content[0].text == "5"
    off = calc(client.servers, tool_configuration={"enabled": False})
    answer = create(client, "text-2", [off])  # a disabled server is neither listed nor offered
    assert [block.type for block in answer.content] == ["text"]


def test_streamed_blocks_in_order(client: anthropic.Anthropic):
    with client.beta.messages.stream(
        model="m",
        max_tokens=200,
        messages=[{"role": "user", "content": "What is 2 + 3?"}],
        mcp_servers=[calc(client.servers)],
        betas=[BETA],
        extra_headers={"X-Request-Id": "add-5"},
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    starts = [event.content_block.type for event in events if event.type == "content_block_start"]
    assert starts == ["mcp_tool_use", "mcp_tool_result", "text"]
    assert [event.index for event in events if event.type == "content_block_start"] == [0, 1, 2]
    assert events[0].type == "message_start" and events[-1].type == "message_stop"
    use, result, text = final.content
    assert use.input == {"a": 2, "b": 3} and result.content[0].text == "5" and text.text == "The sum is 5."
    assert final.stop_reason == "end_turn"


def test_the_blocks_read_back_in_the_next_request(client: anthropic.Anthropic):
    first = create(client, "add-6", [calc(client.servers)])
    history = [
        {"role": "user", "content": "What is 2 + 3?"},
        {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in first.content]},
        {"role": "user", "content": "Thanks. And now?"},
    ]
    again = client.beta.messages.create(
        model="m",
        max_tokens=50,
        messages=history,
        mcp_servers=[calc(client.servers)],
        betas=[BETA],
        extra_headers={"X-Request-Id": "text-1"},
    )
    assert again.content[0].text == "Hello."


def test_calls_that_ran_before_the_loop_could_not_go_on_end_the_message_on_pause_turn(client: anthropic.Anthropic):
    """Issue 50: a 6000-character result leaves no room in the context for the next reply. The call
    ran, so the reply is no HTTP error hiding it (a client would retry and run it twice): the message
    holds its use and result blocks and stops on ``pause_turn``."""
    message = create(client, "huge-1", [calc(client.servers)])
    assert [block.type for block in message.content] == ["mcp_tool_use", "mcp_tool_result"]
    assert message.content[1].is_error is False and message.stop_reason == "pause_turn"
