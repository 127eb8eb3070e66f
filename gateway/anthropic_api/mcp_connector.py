"""Anthropic's MCP connector on the Messages API (``mcp_servers``, beta ``mcp-client-2025-04-04``),
on the same core as the Responses API's hosted MCP tools.

A request's ``mcp_servers`` (``{"type": "url", "url", "name", "authorization_token"?,
"tool_configuration"?: {"enabled", "allowed_tools"}}``) name servers the operator allowed
(:mod:`gateway.mcp.allowlist`: any other ``url`` is a 400 naming it); their tools are listed
(a server that cannot list is a 400 naming it: the Messages API has no item to say so) and
offered to the model. The server runs the model's calls of them
(:mod:`gateway.tool_loop`, the same loop as the Responses API's, whose ``mcp_call`` items are the
loop's record) and the reply holds each as an ``mcp_tool_use`` block and its
``mcp_tool_result`` block; the loop goes on until the model answers, calls a client tool, or
``--max-tool-rounds`` rounds ran. The connector has no approvals: every call runs.

In a request's messages, ``mcp_tool_use`` blocks (the assistant's) and ``mcp_tool_result``
blocks (the user's) read back as a call and its result.
"""

from __future__ import annotations

import json
from typing import Any

from agentgate.gateway.api_types.response_items import error_text
from agentgate.gateway.errors import BadRequestError
from agentgate.gateway.mcp import McpHost
from agentgate.gateway.mcp.client import McpEndpoint
from agentgate.gateway.mcp.toolset import McpToolset, ServerTools, list_servers


def _servers(mcp_servers: list[dict[str, Any]], host: McpHost) -> list[ServerTools]:
    out = []
    for i, spec in enumerate(mcp_servers):
        param = f"mcp_servers[{i}]"
        if not isinstance(spec, dict) or spec.get("type", "url") != "url":
            raise BadRequestError('an MCP server must be {"type": "url", "url": ..., "name": ...}', param=param)
        config = spec.get("tool_configuration") or {}
        if config.get("enabled") is False:
            continue
        server = host.allowlist.resolve(spec.get("name"), spec.get("url"), param, label_field="name", url_field="url")
        token = spec.get("authorization_token")
        if token is not None and not isinstance(token, str):
            raise BadRequestError("`authorization_token` must be a string", param=f"{param}.authorization_token")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        allowed = config.get("allowed_tools")
        if allowed is not None and not isinstance(allowed, list):
            raise BadRequestError("`allowed_tools` must be a list of names", param=f"{param}.tool_configuration")
        out.append(ServerTools(McpEndpoint(server, headers), allowed, "never"))
    return out


async def open_connector(mcp_servers: list[dict[str, Any]], host: McpHost) -> McpToolset:
    """The request's servers, allowed and listed; 400 naming the first one refused or unlisted."""
    servers = _servers(mcp_servers, host)
    toolset = await list_servers(servers, host.lists)
    for i, server in enumerate(servers):
        if server.error is not None:
            raise BadRequestError(
                f"MCP server {server.label!r} could not list its tools: {server.error}", param=f"mcp_servers[{i}]"
            )
    return toolset


def use_block(item: dict[str, Any]) -> dict[str, Any]:
    """An ``mcp_call`` item as the ``mcp_tool_use`` block (its arguments as an object)."""
    try:
        arguments = json.loads(item["arguments"]) if item["arguments"] else {}
    except ValueError:
        arguments = {}
    return {
        "type": "mcp_tool_use",
        "id": item["id"],
        "name": item["name"],
        "server_name": item["server_label"],
        "input": arguments if isinstance(arguments, dict) else {},
    }


def result_block(item: dict[str, Any]) -> dict[str, Any]:
    """A run ``mcp_call`` item as its ``mcp_tool_result`` block."""
    failed = item["error"] is not None
    text = error_text(item["error"], prefix="") if failed else item["output"]  # is_error says it failed
    content = [{"type": "text", "text": text}]
    return {"type": "mcp_tool_result", "tool_use_id": item["id"], "is_error": failed, "content": content}
