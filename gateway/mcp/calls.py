"""Running the model's MCP tool calls of one response, within its limits.

Each call may take ``--mcp-call-timeout`` seconds, and all the calls of one response
``--mcp-tool-budget`` seconds together (a call gets what is left of the budget when that is
less); a call once the budget is spent fails without being sent. A result larger than
``--mcp-result-bytes`` fails. Arguments that are not a JSON object fail before they are
sent. Every failure is the ``error`` of the call's ``mcp_call`` item (the model reads it in
the next round), never an error of the response.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from agentgate.gateway.mcp.client import SERVER_ERROR, TIMEOUT, McpEndpoint, McpFailure, call_tool

INVALID_PARAMS = -32602  # JSON-RPC


@dataclass(frozen=True, slots=True)
class CallLimits:
    timeout: float  # seconds, one call
    max_bytes: int  # one result
    budget: float  # seconds, every call of a response


@dataclass(frozen=True, slots=True)
class CallResult:
    output: str | None
    error: dict[str, Any] | None  # an McpToolCallError (gateway.mcp.client)


class ToolCalls:
    """The MCP calls of one response: each run within what is left of the response's budget."""

    def __init__(self, limits: CallLimits) -> None:
        self.limits = limits
        self.spent = 0.0  # seconds the response's calls took so far

    async def run(self, endpoint: McpEndpoint, name: str, arguments: str) -> CallResult:
        try:
            args = json.loads(arguments or "{}")
        except ValueError:
            args = None
        if not isinstance(args, dict):
            return self._failed(McpFailure.protocol(INVALID_PARAMS, f"the arguments of {name!r} are no JSON object"))
        left = self.limits.budget - self.spent
        if left <= 0:
            message = f"this response's tool time ({self.limits.budget:g} s) is spent; {name!r} was not called"
            return self._failed(McpFailure.protocol(SERVER_ERROR, message))
        timeout = min(self.limits.timeout, left)
        start = time.monotonic()
        try:
            output = await call_tool(endpoint, name, args, timeout=timeout, max_bytes=self.limits.max_bytes)
        except McpFailure as exc:
            if exc.error.get("code") == TIMEOUT and timeout < self.limits.timeout:
                exc = McpFailure.protocol(TIMEOUT, f"{name!r} ran out of this response's tool time")
            return self._failed(exc)
        finally:
            self.spent += time.monotonic() - start
        return CallResult(output, None)

    @staticmethod
    def _failed(exc: McpFailure) -> CallResult:
        return CallResult(None, exc.error)
