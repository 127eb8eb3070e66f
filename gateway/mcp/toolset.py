"""A request's ``mcp`` tools, resolved: each server allowed (or a 400), its tools listed (an
``mcp_list_tools`` item, with ``error`` when listing failed), ``allowed_tools`` applied, and
the tools offered to the model as function tools.

``allowed_tools`` is a list of names or a filter ``{"tool_names": [...], "read_only": bool}``
(every criterion given must hold; ``read_only`` reads the tool's ``readOnlyHint``).
``require_approval`` is ``"always"`` (OpenAI's default, also when absent), ``"never"``, or
``{"always": filter, "never": filter}``: a tool the ``never`` filter matches runs at once,
any other waits for approval. A tool whose name another server (or a function tool) of the
request already offers is not offered again: the first one keeps the name. A tool whose name
is not a valid function name (``^[a-zA-Z0-9_-]{1,64}$``) is listed but not offered.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentgate.gateway.api_types.ids import new_id
from agentgate.gateway.errors import BadRequestError
from agentgate.gateway.mcp.allowlist import McpAllowlist, McpServer
from agentgate.gateway.mcp.client import McpEndpoint, McpFailure
from agentgate.gateway.mcp.tool_lists import ToolLists

FUNCTION_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
REDACTED = "<redacted>"
# Headers a request's ``headers`` may not set on the gateway's connection to an MCP server: the
# host (it would pick another virtual host behind the allowed origin) and the hop-by-hop ones
# (the HTTP client frames the request itself). Dropped, compared without case.
CONNECTION_HEADERS = frozenset(
    ("host", "connection", "content-length", "transfer-encoding", "te", "trailer", "upgrade", "keep-alive")
)


def _matches(rule: Any, tool: dict[str, Any]) -> bool:
    """Whether ``tool`` matches a filter ``{"tool_names", "read_only"}`` (an empty one matches nothing)."""
    if not isinstance(rule, dict):
        return False
    names, read_only = rule.get("tool_names"), rule.get("read_only")
    if names is None and read_only is None:
        return False
    hint = bool((tool.get("annotations") or {}).get("readOnlyHint"))
    return (names is None or tool["name"] in names) and (read_only is None or hint == read_only)


def _check_rule(value: Any, param: str, words: tuple[str, ...]) -> None:
    if value is None or value in words:
        return
    if not isinstance(value, (dict, list)):
        raise BadRequestError(f"`{param}` must be one of {words}, a list or a filter object", param=param)


@dataclass
class ServerTools:
    """One ``mcp`` tool of the request: where to call it, what it offers, what needs approval."""

    endpoint: McpEndpoint
    allowed_tools: Any = None
    require_approval: Any = None
    tools: list[dict[str, Any]] = field(default_factory=list)  # as listed, allowed_tools applied
    error: str | None = None  # the list failed

    @property
    def label(self) -> str:
        return self.endpoint.server.label

    def allowed(self, tool: dict[str, Any]) -> bool:
        rule = self.allowed_tools
        if rule is None:
            return True
        return tool["name"] in rule if isinstance(rule, list) else _matches(rule, tool)

    def needs_approval(self, name: str) -> bool:
        rule = self.require_approval
        if rule == "never":
            return False
        if not isinstance(rule, dict):
            return True
        tool = next((t for t in self.tools if t["name"] == name), {"name": name})
        return not _matches(rule.get("never"), tool)

    def list_item(self) -> dict[str, Any]:
        """The ``mcp_list_tools`` output item."""
        item = {"id": new_id("mcpl"), "type": "mcp_list_tools", "server_label": self.label, "tools": self.tools}
        return item | {"error": self.error} if self.error is not None else item


@dataclass
class McpToolset:
    """The servers of a request, in its order, and which server runs each offered tool."""

    servers: list[ServerTools]
    by_name: dict[str, ServerTools] = field(default_factory=dict)

    def offer(self, taken: set[str]) -> list[dict[str, Any]]:
        """The listed tools as Responses function tools (names in ``taken`` left out, see the module doc)."""
        out = []
        for server in self.servers:
            for tool in server.tools:
                name = tool["name"]
                if name in taken or not FUNCTION_NAME.match(name):
                    continue
                taken.add(name)
                self.by_name[name] = server
                parameters = tool.get("input_schema") or {"type": "object", "properties": {}}
                description = tool.get("description") or f"A tool of the MCP server {server.label!r}."
                out.append(
                    {
                        "type": "function",
                        "name": name,
                        "description": description,
                        "parameters": parameters,
                        "strict": True,
                    }
                )
        return out

    @property
    def labels(self) -> Mapping[str, str]:
        """Offered tool name -> its server's label."""
        return {name: server.label for name, server in self.by_name.items()}


def echoed(tool: dict[str, Any]) -> dict[str, Any]:
    """An ``mcp`` tool as the response echoes (and stores) it: no credential in clear."""
    out = dict(tool)
    if out.get("authorization") is not None:
        out["authorization"] = REDACTED
    if isinstance(out.get("headers"), dict):
        out["headers"] = dict.fromkeys(out["headers"], REDACTED)
    return out


def resolve_servers(tools: list[tuple[int, dict[str, Any]]], allowlist: McpAllowlist) -> list[ServerTools]:
    """The request's ``mcp`` tools (with their index in ``tools``) checked against the allowlist;
    400 naming the field of the first one refused or malformed."""
    servers = []
    for index, tool in tools:
        param = f"tools[{index}]"
        server: McpServer = allowlist.resolve(tool.get("server_label"), tool.get("server_url"), param)
        headers = tool.get("headers") or {}
        if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
            raise BadRequestError("`headers` must map header names to strings", param=f"{param}.headers")
        headers = {name: value for name, value in headers.items() if name.lower() not in CONNECTION_HEADERS}
        authorization = tool.get("authorization")
        if authorization is not None:
            if not isinstance(authorization, str):
                raise BadRequestError("`authorization` must be a string", param=f"{param}.authorization")
            headers = {**headers, "Authorization": f"Bearer {authorization}"}
        _check_rule(tool.get("allowed_tools"), f"{param}.allowed_tools", ())
        _check_rule(tool.get("require_approval"), f"{param}.require_approval", ("always", "never"))
        servers.append(
            ServerTools(McpEndpoint(server, headers), tool.get("allowed_tools"), tool.get("require_approval"))
        )
    return servers


async def list_servers(servers: list[ServerTools], lists: ToolLists) -> McpToolset:
    """List each server's tools (a failure is kept in its ``error``, never raised)."""
    for server in servers:
        try:
            listed = await lists.get(server.endpoint)
        except McpFailure as exc:
            server.error = str(exc)
            continue
        server.tools = [tool for tool in listed if server.allowed(tool)]
    return McpToolset(servers)
