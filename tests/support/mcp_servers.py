"""A real MCP server from the ``mcp`` SDK on 127.0.0.1, over both transports, for the tests of
hosted MCP tools: a calculator (``add``, ``multiply``), a slow tool (``sleep``), a failing tool
(``explode``), a tool with a large result (``big``), and ``whoami``, which answers the
``Authorization`` header it was sent (so a test sees the credentials reach the server).

:func:`mcp_servers` serves it with uvicorn in a thread: streamable HTTP at ``/mcp`` on one
port, SSE at ``/sse`` on another; both stop when the context ends.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer


def calculator() -> MCPServer:
    server = MCPServer("calculator")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    @server.tool()
    async def sleep(seconds: float) -> str:
        """Sleep for some seconds, then say so."""
        await anyio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool()
    def explode(reason: str) -> str:
        """Always fails."""
        raise ValueError(f"exploded: {reason}")

    @server.tool()
    def big(size: int) -> str:
        """A text of `size` characters."""
        return "x" * size

    @server.tool()
    def whoami(ctx: Context) -> str:
        """The Authorization header this call came with."""
        request = ctx.request_context.request
        return request.headers.get("authorization", "nobody") if request is not None else "nobody"

    return server


@dataclass(frozen=True)
class McpServers:
    http_url: str  # streamable HTTP
    sse_url: str


def _serve(app: object, stack: contextlib.ExitStack) -> int:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, name="mcp-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the MCP server did not start")
        time.sleep(0.02)

    def stop() -> None:
        server.should_exit = True
        thread.join(5)

    stack.callback(stop)
    return server.servers[0].sockets[0].getsockname()[1]


@contextlib.contextmanager
def mcp_servers() -> Iterator[McpServers]:
    with contextlib.ExitStack() as stack:
        http_port = _serve(calculator().streamable_http_app(), stack)
        sse_port = _serve(calculator().sse_app(), stack)
        yield McpServers(f"http://127.0.0.1:{http_port}/mcp", f"http://127.0.0.1:{sse_port}/sse")
