"""The ``mcp`` SDK, the one module that imports it (and its HTTP client, ``httpx2``): a session
with one server, a page of its tool list, and what its errors say.

:mod:`gateway.mcp.client` imports this module on its first operation, so a gateway with no
MCP server configured, or none named yet, never loads the SDK (with its pydantic models and
HTTP stack, most of the gateway's imports).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import httpx2
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import ListToolsResult, PaginatedRequestParams


@asynccontextmanager
async def session(url: str, headers: Mapping[str, str], timeout: float, *, sse: bool) -> AsyncIterator[ClientSession]:
    """An initialized session with the server at ``url``: the SSE transport (``sse``) or the
    streamable HTTP one, whose redirects follow the SDK's rule (same origin only)."""
    headers = dict(headers)
    if sse:
        transport = sse_client(url, headers=headers, timeout=timeout, sse_read_timeout=timeout)
        async with transport as (read, write), ClientSession(read, write, read_timeout_seconds=timeout) as session:
            await session.initialize()
            yield session
        return
    client = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(timeout))
    async with (
        client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write, read_timeout_seconds=timeout) as session,
    ):
        await session.initialize()
        yield session


async def list_page(session: ClientSession, cursor: str | None) -> ListToolsResult:
    """The page of the server's tools at ``cursor`` (None: the first)."""
    if cursor is None:
        return await session.list_tools()
    return await session.list_tools(params=PaginatedRequestParams(cursor=cursor))


def http_status(exc: BaseException) -> int | None:
    """The status of the HTTP error ``exc`` is, or None."""
    return exc.response.status_code if isinstance(exc, httpx2.HTTPStatusError) else None


def rpc_error(exc: BaseException) -> tuple[int, str] | None:
    """(code, message) of the JSON-RPC error ``exc`` is, or None."""
    return (exc.code, exc.message) if isinstance(exc, MCPError) else None
