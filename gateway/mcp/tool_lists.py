"""MCP servers' tool lists, cached per server and credentials for ``--mcp-list-ttl`` seconds.

A response with an ``mcp`` tool starts by listing the server's tools; agents send the
same tools every turn, so a list is kept and the next turn's costs nothing. The key is
the server's URL with a digest of the headers the request sends it (two API keys of
one server may see different tools, and no credential is kept in clear as a key). The
cache is bounded in bytes (:data:`CACHE_BYTES`, least recently used first out): a list
is as large as a server makes it. A failed list is not kept: the next request tries again.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from agentgate.engine.byte_lru import ByteLRU
from agentgate.gateway.mcp.client import McpEndpoint, list_tools

CACHE_BYTES = 8 * 1024 * 1024

Tools = list[dict[str, Any]]
Lister = Callable[[McpEndpoint, float], Awaitable[Tools]]


def endpoint_key(endpoint: McpEndpoint) -> tuple[str, str]:
    """(URL, SHA-256 of the headers): the cache key, with no header in clear."""
    headers = json.dumps(sorted((k.lower(), v) for k, v in endpoint.headers.items()))
    return endpoint.server.url, hashlib.sha256(headers.encode()).hexdigest()


class ToolLists:
    """Tool lists by server and credentials, each kept ``ttl`` seconds (0: never kept)."""

    def __init__(self, ttl: float, timeout: float, lister: Lister = list_tools, max_bytes: int = CACHE_BYTES) -> None:
        self.ttl = ttl
        self.timeout = timeout
        self._lister = lister
        self._lists: ByteLRU[tuple[str, str], tuple[float, Tools]] = ByteLRU(max_bytes)

    async def get(self, endpoint: McpEndpoint) -> Tools:
        """The server's tools, from the cache while fresh; raises
        :class:`~gateway.mcp.client.McpFailure` when listing fails."""
        key = endpoint_key(endpoint)
        cached = self._lists.get(key)
        now = time.monotonic()
        if cached is not None and cached[0] > now:
            return cached[1]
        tools = await self._lister(endpoint, self.timeout)
        if self.ttl > 0:
            self._lists.put(key, (now + self.ttl, tools), len(json.dumps(tools)) + len(key[0]) + len(key[1]))
        return tools
