"""Hosted MCP tools: tools the gateway itself calls on MCP servers the operator allowed, for
``mcp`` tools in ``POST /v1/responses`` (the loop: :mod:`gateway.tool_loop`).

- :mod:`~gateway.mcp.allowlist`: which servers a request may name (``--mcp-server``,
  ``--mcp-allow-url``); any other is a 400, so the gateway is no proxy into its network.
- :mod:`~gateway.mcp.client`: one server's tool list and one tool call, with the ``mcp`` SDK
  (streamable HTTP or SSE), which only :mod:`~gateway.mcp.sdk` imports, on the first call.
- :mod:`~gateway.mcp.tool_lists`: tool lists cached per server and credentials.
- :mod:`~gateway.mcp.toolset`: a request's servers, their tools offered to the model, approvals.
- :mod:`~gateway.mcp.calls`: a response's calls within their limits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from agentgate.gateway.mcp.allowlist import McpAllowlist
from agentgate.gateway.mcp.calls import CallLimits
from agentgate.gateway.mcp.tool_lists import ToolLists


class McpFlags(Protocol):
    """The flags a host is built from (the gateway's ``Settings`` has them): this package reads
    them and never imports the configuration, which checks ``--mcp-server`` with
    :mod:`~gateway.mcp.allowlist`."""

    mcp_servers: Sequence[str]
    mcp_allow_urls: Sequence[str]
    mcp_list_ttl: float
    mcp_call_timeout: float
    mcp_result_bytes: int
    mcp_tool_budget: float
    max_tool_rounds: int
    hosted_tools: Sequence[str]
    omit_unrunnable_tools: bool


@dataclass(frozen=True)
class McpHost:
    """What the gateway's MCP tools run with: the allowlist, the cached lists, the limits."""

    allowlist: McpAllowlist
    lists: ToolLists
    limits: CallLimits
    max_rounds: int  # --max-tool-rounds
    hosted_by: Mapping[str, str] = field(default_factory=dict)  # --hosted-tool: {hosted tool: MCP server label}
    omit_unrunnable: bool = False  # --omit-unrunnable-tools

    @classmethod
    def from_settings(cls, settings: McpFlags) -> McpHost:
        """The host of ``--mcp-server``, ``--mcp-allow-url``, ``--max-tool-rounds`` and the ``--mcp-*`` limits."""
        return cls(
            McpAllowlist(settings.mcp_servers, settings.mcp_allow_urls),
            ToolLists(settings.mcp_list_ttl, settings.mcp_call_timeout),
            CallLimits(settings.mcp_call_timeout, settings.mcp_result_bytes, settings.mcp_tool_budget),
            settings.max_tool_rounds,
            dict(entry.split("=", 1) for entry in settings.hosted_tools),
            settings.omit_unrunnable_tools,
        )
