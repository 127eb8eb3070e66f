"""The Anthropic Messages API's request and response types, as msgspec structs.

Content blocks and tools stay plain JSON objects here; they are read and
written by :mod:`gateway.anthropic_api.translate`, which names the field of
anything it cannot take.
"""

from __future__ import annotations

from typing import Any

from msgspec import UNSET, Struct, UnsetType, field


class CountTokensRequest(Struct, kw_only=True):
    """``POST /v1/messages/count_tokens``: what a message request would put in the prompt."""

    model: str
    messages: list[dict[str, Any]]
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    context_management: dict[str, Any] | None = None  # its edits: gateway.anthropic_api.context_edits


class MessagesRequest(CountTokensRequest, kw_only=True):
    """``POST /v1/messages``."""

    max_tokens: int
    stop_sequences: list[str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stream: bool = False
    metadata: dict[str, Any] | None = None
    mcp_servers: list[dict[str, Any]] | None = None  # the MCP connector's (gateway.anthropic_api.mcp_connector)
    thinking: Any = None  # enabled / disabled / adaptive (gateway.anthropic_api.thinking_config)
    output_config: Any = None  # its effort (the rest of it is not read)


class MessageUsage(Struct):
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int = 0  # prompt tokens the engine's prefix cache served
    cache_creation_input_tokens: int = 0
    output_tokens_details: dict[str, int] | UnsetType = UNSET  # thinking_tokens, a reasoning model's only


class Message(Struct, kw_only=True):
    """A reply (``type: "message"``), whole or as ``message_start`` carries it."""

    id: str
    model: str
    content: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str | None = None  # end_turn | max_tokens | stop_sequence | tool_use | pause_turn (MCP loop)
    stop_sequence: str | None = None
    usage: MessageUsage = field(default_factory=lambda: MessageUsage(0, 0))
    type: str = "message"
    role: str = "assistant"


class TokenCount(Struct):
    input_tokens: int


class AnthropicErrorInfo(Struct):
    type: str
    message: str


class AnthropicError(Struct):
    error: AnthropicErrorInfo
    type: str = "error"


REQUEST_TYPES: tuple[type, ...] = (MessagesRequest, CountTokensRequest)
RESPONSE_TYPES: tuple[type, ...] = (Message, TokenCount, AnthropicError)
