"""Talking to one MCP server with the ``mcp`` SDK: its tool list, and one tool call.

Each operation opens its own session (connect, ``initialize``, the request, close), so
nothing is held between a response's rounds and a server that restarts costs nothing.
The transport follows the URL: a path ending in ``/sse`` is the SSE transport (the
2024-11-05 protocol), any other the streamable HTTP one. The SDK follows a redirect only
within the server's own origin, so a server cannot send the gateway elsewhere either.

The headers a request gives (``headers``, and ``authorization`` as a bearer token) go
to that server only: they are never logged (neither here nor by the HTTP client, which
logs the URL, and an allowed URL holds no credentials: :mod:`gateway.mcp.allowlist`).

Whatever goes wrong is an :class:`McpFailure` carrying the ``error`` of an ``mcp_call``
item in OpenAI's shapes (``openai.types.responses.McpToolCallError``): an HTTP status
(``http_error``), a JSON-RPC error or a limit of this gateway (``mcp_protocol_error``:
-32001 a timeout, -32000 anything else), or a result the tool marked as an error
(``mcp_tool_execution_error`` with its content). Never an exception to the caller's caller.

The SDK itself is :mod:`gateway.mcp.sdk`, imported by the first operation: a gateway that
never talks to an MCP server never loads it (it is most of the gateway's imports).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from agentgate.gateway.mcp.allowlist import McpServer

TIMEOUT = -32001  # the SDK's REQUEST_TIMEOUT
MAX_LIST_PAGES = 16  # pages of a tool list read (a server that pages on and on is cut there)
SERVER_ERROR = -32000  # JSON-RPC's implementation-defined server error: unreachable, a gateway limit


class McpFailure(Exception):
    """An MCP operation failed; ``error`` is the ``mcp_call`` item's ``error`` (see the module doc)."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error.get("message") or error["type"])
        self.error = error

    @classmethod
    def protocol(cls, code: int, message: str) -> McpFailure:
        return cls({"type": "mcp_protocol_error", "code": code, "message": message})


@dataclass(frozen=True, slots=True)
class McpEndpoint:
    """A server and the headers a request sends it (kept out of ``repr``: never logged)."""

    server: McpServer
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def is_sse(self) -> bool:
        return self.server.url.rstrip("/").endswith("/sse")


def _leaf(exc: BaseException) -> BaseException:
    """The first error inside nested exception groups (the SDK's task groups wrap them)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def failure_of(exc: BaseException, label: str) -> McpFailure:
    """``exc`` (raised talking to server ``label``) as an :class:`McpFailure`."""
    from agentgate.gateway.mcp import sdk  # loaded already: ``exc`` came from talking to the server

    exc = _leaf(exc)
    if isinstance(exc, McpFailure):
        return exc
    if (status := sdk.http_status(exc)) is not None:
        return McpFailure({"type": "http_error", "code": status, "message": f"MCP server {label!r} answered {status}"})
    if (error := sdk.rpc_error(exc)) is not None:
        return McpFailure.protocol(*error)
    if isinstance(exc, TimeoutError):
        return McpFailure.protocol(TIMEOUT, f"MCP server {label!r} did not answer in time")
    return McpFailure.protocol(SERVER_ERROR, f"could not talk to MCP server {label!r}: {type(exc).__name__}")


async def list_tools(endpoint: McpEndpoint, timeout: float) -> list[dict[str, Any]]:
    """The server's tools as ``mcp_list_tools`` lists them (``name``, ``description``,
    ``input_schema``, ``annotations``), within ``timeout`` seconds in all; at most
    :data:`MAX_LIST_PAGES` pages of them."""
    from agentgate.gateway.mcp import sdk

    try:
        with anyio.fail_after(timeout):
            async with sdk.session(endpoint.server.url, endpoint.headers, timeout, sse=endpoint.is_sse) as session:
                result = await sdk.list_page(session, None)
                tools = list(result.tools)
                for _ in range(MAX_LIST_PAGES - 1):
                    if result.next_cursor is None:
                        break
                    result = await sdk.list_page(session, result.next_cursor)
                    tools += result.tools
    except Exception as exc:  # noqa: BLE001 (any failure is the list's error, never the request's)
        raise failure_of(exc, endpoint.server.label) from None
    return [
        {
            "name": tool.name,
            "description": tool.description,
            "input_schema": tool.input_schema,
            "annotations": tool.annotations.model_dump(exclude_none=True) if tool.annotations else None,
        }
        for tool in tools
    ]


async def call_tool(
    endpoint: McpEndpoint, name: str, arguments: dict[str, Any], *, timeout: float, max_bytes: int
) -> str:
    """Run tool ``name`` within ``timeout`` seconds (connecting included); its output as text,
    at most ``max_bytes`` bytes of UTF-8."""
    from agentgate.gateway.mcp import sdk

    label = endpoint.server.label
    try:
        with anyio.fail_after(timeout):
            async with sdk.session(endpoint.server.url, endpoint.headers, timeout, sse=endpoint.is_sse) as session:
                result = await session.call_tool(name, arguments, read_timeout_seconds=timeout)
    except TimeoutError:
        raise McpFailure.protocol(TIMEOUT, f"tool {name!r} took longer than {timeout:g} s") from None
    except Exception as exc:  # noqa: BLE001 (any failure is the call's error, never the request's)
        raise failure_of(exc, label) from None
    content = [part.model_dump(exclude_none=True) for part in result.content]
    if result.is_error:
        raise McpFailure({"type": "mcp_tool_execution_error", "content": content})
    texts = [part["text"] for part in content if part.get("type") == "text"]
    if texts:
        output = "\n".join(texts)
    else:
        output = json.dumps(result.structured_content if result.structured_content is not None else content)
    size = len(output.encode())
    if size > max_bytes:
        raise McpFailure.protocol(
            SERVER_ERROR, f"tool {name!r} returned {size} bytes, more than this server feeds back ({max_bytes})"
        )
    return output
