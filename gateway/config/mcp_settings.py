"""The settings of hosted MCP tools (the gateway runs an MCP server's tools beside the model:
``gateway.mcp``, ``docs/mcp.md``). A base of :class:`~gateway.config.settings.Settings`: its
fields are flags and ``AGENTGATE_*`` variables like every other setting."""

from __future__ import annotations

from dataclasses import dataclass

from agentgate.gateway.config.setting_values import setting


@dataclass(frozen=True)
class McpSettings:
    mcp_servers: tuple[str, ...] = setting(
        "an MCP server requests may use, LABEL=URL (repeatable); an mcp tool names it by its label or URL. "
        "With neither this nor --mcp-allow-url no mcp tool is allowed (400)",
        flag="mcp-server",
        default=(),
    )
    mcp_allow_urls: tuple[str, ...] = setting(
        "URL pattern of MCP servers requests may name (repeatable): scheme and host:port exact, the path a "
        "glob (https://tools.internal/mcp/*); any other server_url is a 400 naming it",
        flag="mcp-allow-url",
        default=(),
    )
    max_tool_rounds: int = setting(
        "rounds of server-run (MCP) tool calls in one response; after the last the model answers without tools",
        default=8,
    )
    mcp_call_timeout: float = setting("seconds one MCP tool call may take; then it is an mcp_call error", default=30.0)
    mcp_result_bytes: int = setting(
        "largest MCP tool result fed back, in bytes; larger is an mcp_call error", default=65536
    )
    mcp_tool_budget: float = setting(
        "seconds all MCP tool calls of one response may take together; calls past it are mcp_call errors",
        default=120.0,
    )
    mcp_list_ttl: float = setting(
        "seconds an MCP server's tool list is cached, per server and credentials", default=300.0
    )
