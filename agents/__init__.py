"""agentgate's client side: an httpx SDK, a tool-calling agent loop, and the ops CLI.

Pure HTTP (httpx + anyio): nothing here imports ``engine`` or ``gateway``.

- :class:`AsyncClient` / :class:`Client`: chat and completions, streamed as
  typed events or not, retries on 429/503, sessions, API keys.
- :class:`Agent`: a tool-calling loop over Python functions (:func:`tool`).
- :class:`Admin` / :class:`AsyncAdmin`: pause, resume, abort, status, sessions.
- ``agentgate ops``: the operator CLI (:mod:`agents.ops_cli`).
"""

from agentgate.agents._retries import RetryPolicy
from agentgate.agents.admin import Admin, AsyncAdmin, Status
from agentgate.agents.agent import Agent, AgentResult
from agentgate.agents.client import AsyncClient, AsyncStream
from agentgate.agents.errors import (
    AgentGateError,
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    RateLimitError,
    ServiceUnavailableError,
    StreamError,
    UnsupportedError,
)
from agentgate.agents.events import (
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
from agentgate.agents.sync import Client, Stream
from agentgate.agents.tools import Tool, ToolResult, tool

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
