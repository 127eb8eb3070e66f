"""agentgate's client side: an httpx SDK, a tool-calling agent loop, and the ops CLI.

Pure HTTP (httpx + anyio): nothing here imports ``engine`` or ``gateway``.

- :class:`AsyncClient` / :class:`Client`: chat and completions, streamed as
  typed events or not, retries on 429/503, sessions, API keys.
- :class:`Agent`: a tool-calling loop over Python functions (:func:`tool`).
- :class:`Admin` / :class:`AsyncAdmin`: pause, resume, abort, status, sessions.
- ``agentgate ops``: the operator CLI (:mod:`agents.ops_cli`).
"""

from agents._core import RetryPolicy
from agents.admin import Admin, AsyncAdmin, Status
from agents.agent import Agent, AgentResult
from agents.client import AsyncClient, AsyncStream
from agents.errors import (
    AgentGateError,
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    RateLimitError,
    ServiceUnavailableError,
    StreamError,
    UnsupportedError,
)
from agents.events import (
    ChatResult,
    CompletionResult,
    ContentDelta,
    Finish,
    ToolCall,
    ToolCallComplete,
    ToolCallDelta,
    Usage,
    UsageEvent,
)
from agents.sync import Client, Stream
from agents.tools import Tool, ToolResult, tool

__all__ = [
    "APIConnectionError",
    "APIStatusError",
    "APITimeoutError",
    "Admin",
    "Agent",
    "AgentGateError",
    "AgentResult",
    "AsyncAdmin",
    "AsyncClient",
    "AsyncStream",
    "ChatResult",
    "Client",
    "CompletionResult",
    "ContentDelta",
    "Finish",
    "RateLimitError",
    "RetryPolicy",
    "ServiceUnavailableError",
    "Status",
    "Stream",
    "StreamError",
    "Tool",
    "ToolCall",
    "ToolCallComplete",
    "ToolCallDelta",
    "ToolResult",
    "UnsupportedError",
    "Usage",
    "UsageEvent",
    "tool",
]
