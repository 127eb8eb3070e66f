"""Hosted MCP tools: tools the gateway itself calls on MCP servers the operator allowed, for
``mcp`` tools in ``POST /v1/responses`` (the loop: :mod:`gateway.tool_loop`).

- :mod:`~gateway.mcp.allowlist`: which servers a request may name (``--mcp-server``,
  ``--mcp-allow-url``); any other is a 400, so the gateway is no proxy into its network.
- :mod:`~gateway.mcp.client`: one server's tool list and one tool call, with the ``mcp`` SDK
  (streamable HTTP or SSE).
- :mod:`~gateway.mcp.tool_lists`: tool lists cached per server and credentials.
- :mod:`~gateway.mcp.toolset`: a request's servers, their tools offered to the model, approvals.
- :mod:`~gateway.mcp.calls`: a response's calls within their limits.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentgate.gateway.config.settings import Settings
from agentgate.gateway.mcp.allowlist import McpAllowlist
from agentgate.gateway.mcp.calls import CallLimits
from agentgate.gateway.mcp.tool_lists import ToolLists


@dataclass(frozen=True)
class McpHost:
    """What the gateway's MCP tools run with: the allowlist, the cached lists, the limits."""

    allowlist: McpAllowlist
    lists: ToolLists
    limits: CallLimits
    max_rounds: int  # --max-tool-rounds

    @classmethod
    def from_settings(cls, settings: Settings) -> McpHost:
        """The host of ``--mcp-server``, ``--mcp-allow-url``, ``--max-tool-rounds`` and the ``--mcp-*`` limits."""
        return cls(
            McpAllowlist(settings.mcp_servers, settings.mcp_allow_urls),
            ToolLists(settings.mcp_list_ttl, settings.mcp_call_timeout),
            CallLimits(settings.mcp_call_timeout, settings.mcp_result_bytes, settings.mcp_tool_budget),
            settings.max_tool_rounds,
        )
