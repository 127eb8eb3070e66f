"""The server-run tool loop under the Responses API's ``mcp`` tools and the Messages API's MCP
connector: :mod:`~gateway.tool_loop.rounds` (what a round offers, runs and ends on, each reply's
id) and :mod:`~gateway.tool_loop.loop` (the one loop, whole or streamed, each API rendering it)."""
