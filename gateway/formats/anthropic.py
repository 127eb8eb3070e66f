r"""The Anthropic Messages API's reply, whole and streamed, and its error bodies.

Streamed, as Anthropic sends it (``event: <type>`` + ``data: <json>``)::

    message_start, ping
    per content block: content_block_start, content_block_delta ... (text_delta,
                       input_json_delta, or thinking_delta ... then one signature_delta),
                       content_block_stop
    message_delta (stop_reason, stop_sequence, usage), message_stop

A ``thinking`` block comes first when the reply thinks: its text as ``thinking_delta``\ s, and its
signature (the server's HMAC over the whole text: ``gateway.formats.anthropic_thinking``) as one
``signature_delta`` just before its ``content_block_stop``, as Anthropic sends it.

An error after the stream started is an ``error`` event with Anthropic's body.
The reply pieces come read (a choice's events carry them: ``gateway.choice``); a call
arrives whole (its arguments with its header), so a ``tool_use`` block opens
and closes around one ``input_json_delta``. Whole: a parsed reply becomes
content blocks (``text``, ``tool_use`` with its ``input`` object) and the finish
reason Anthropic's ``stop_reason``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from msgspec import UNSET

from agentgate.gateway.api_types import response_items as it
from agentgate.gateway.api_types.anthropic import AnthropicError, AnthropicErrorInfo, Message, MessageUsage
from agentgate.gateway.api_types.openai import CompletionTokensDetails, Usage
from agentgate.gateway.errors import error_parts
from agentgate.gateway.events import ChoiceEvent
from agentgate.gateway.formats.anthropic_thinking import thinking_block, thinking_signature
from agentgate.gateway.formats.framing import named_event
from agentgate.gateway.state.sealing import Sealer
from agentgate.gateway.tools import ParsedOutput, ToolCall

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}
STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens", "stop": "end_turn"}


def anthropic_error(status: int, message: str) -> AnthropicError:
    return AnthropicError(AnthropicErrorInfo(ERROR_TYPES.get(status, "api_error"), message))


def message_usage(usage: Usage) -> MessageUsage:
    """Anthropic's usage: ``input_tokens`` are the prompt tokens not read from the prefix cache, as
    Anthropic counts them (the prompt is ``input_tokens + cache_read_input_tokens``, what Claude Code
    adds up as the context used); a reasoning model's reply also says its
    ``output_tokens_details.thinking_tokens``."""
    cached = usage.cached_tokens
    u = MessageUsage(usage.prompt_tokens - cached, usage.completion_tokens, cached)
    if isinstance(usage.completion_tokens_details, CompletionTokensDetails):
        u.output_tokens_details = {"thinking_tokens": usage.reasoning_tokens}
    return u


def stop_reason(finish_reason: str | None, matched_stop: str | None) -> str | None:
    if finish_reason == "stop" and matched_stop is not None:
        return "stop_sequence"
    return STOP_REASONS.get(finish_reason or "", finish_reason)


def tool_use_block(call: ToolCall) -> dict[str, Any]:
    try:
        arguments = json.loads(call.arguments) if call.arguments else {}
    except ValueError:
        arguments = {}  # a call whose arguments the model broke (never under tool_choice any/tool)
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": arguments}


def content_blocks(parsed: ParsedOutput) -> list[dict[str, Any]]:
    blocks = [{"type": "text", "text": parsed.content}] if parsed.content else []
    return blocks + [tool_use_block(call) for call in parsed.tool_calls]


def message_blocks(parsed: ParsedOutput, sealer: Sealer) -> list[dict[str, Any]]:
    """A whole reply's content blocks: its thinking first (signed by ``sealer``), when it thought."""
    thinking = [thinking_block(sealer, parsed.reasoning)] if parsed.reasoning else []
    return thinking + content_blocks(parsed)


class MessagesStream:
    """The stream of ``message`` (as ``message_start`` carries it), from its reply as read."""

    def __init__(self, message: Message, sealer: Sealer, mcp_labels: Mapping[str, str] | None = None) -> None:
        self.message = message
        self.sealer = sealer  # signs thinking blocks
        self.index = -1
        self.block: str | None = None  # the type of the content block open now
        self.thought = ""  # the open thinking block's text so far
        self.finish_reason: str | None = None
        self.matched_stop: str | None = None
        # the MCP connector's: tool name -> server name (its calls are mcp_tool_use blocks), and the
        # reply's items as the Responses API writes them, the tool loop's record of a round
        self.mcp_labels = mcp_labels or {}
        self.items: list[dict[str, Any]] = []

    def next_round(self) -> None:
        """The server ran the reply's MCP calls; the model's next reply goes on in the same message."""
        self.finish_reason, self.matched_stop, self.items = None, None, []

    def round_end(self) -> tuple[list[dict[str, Any]], str | None]:
        """The reply's items and finish reason (its last block closed by the next event written)."""
        return self.items, self.finish_reason

    def result(self, block: dict[str, Any]) -> bytes:
        """A whole block the server wrote (an ``mcp_tool_result``): started and stopped at once."""
        return self._start(block) + self._stop()

    def _event(self, kind: str, **fields: Any) -> bytes:
        return named_event(kind, {"type": kind, **fields})

    def opening(self) -> bytes:
        return self._event("message_start", message=self.message) + self._event("ping")

    def chunk(self, index: int, event: ChoiceEvent) -> bytes | None:
        out = []
        for d in event.deltas:
            if d.reasoning:
                out.append(self.thinking(d.reasoning))
            if d.content:
                if self.block != "text":
                    out.append(self._start({"type": "text", "text": ""}))
                    self.items.append(it.message_item(""))
                self.items[-1]["content"][0]["text"] += d.content
                delta = {"type": "text_delta", "text": d.content}
                out.append(self._event("content_block_delta", index=self.index, delta=delta))
            for call in d.tool_calls:
                if call.id is not None:
                    out.append(self._start(self._call_block(call.id, call.function.name or "")))
                if call.function.arguments:
                    self.items[-1]["arguments"] += call.function.arguments
                    delta = {"type": "input_json_delta", "partial_json": call.function.arguments}
                    out.append(self._event("content_block_delta", index=self.index, delta=delta))
        if event.reply_finish is not None:
            self.finish_reason, self.matched_stop = event.reply_finish, event.matched_stop
        return b"".join(out) or None

    def thinking(self, text: str) -> bytes:
        """A piece of the reply's thinking: a ``thinking`` block opened at its first piece, signed
        when it closes (:meth:`_stop`)."""
        out = b""
        if self.block != "thinking":
            out = self._start({"type": "thinking", "thinking": "", "signature": ""})
            self.thought = ""
        self.thought += text
        delta = {"type": "thinking_delta", "thinking": text}
        return out + self._event("content_block_delta", index=self.index, delta=delta)

    def _call_block(self, call_id: str, name: str) -> dict[str, Any]:
        """A call's block (``mcp_tool_use`` for the MCP connector's tools), its item kept."""
        label = self.mcp_labels.get(name)
        if label is None:
            self.items.append(it.function_call_item(ToolCall(call_id, name, "")))
            return {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        item = it.call_item(label, name)
        self.items.append(item)
        return {"type": "mcp_tool_use", "id": item["id"], "name": name, "server_name": label, "input": {}}

    def _start(self, block: dict[str, Any]) -> bytes:
        out = self._stop()
        self.index += 1
        self.block = block["type"]
        return out + self._event("content_block_start", index=self.index, content_block=block)

    def _stop(self) -> bytes:
        if self.block is None:
            return b""
        signed = b""
        if self.block == "thinking":
            delta = {"type": "signature_delta", "signature": thinking_signature(self.sealer, self.thought)}
            signed = self._event("content_block_delta", index=self.index, delta=delta)
        self.block = None
        return signed + self._event("content_block_stop", index=self.index)

    def closing(self, usage: Usage) -> bytes:
        stop = self.matched_stop
        delta = {"stop_reason": stop_reason(self.finish_reason, stop), "stop_sequence": stop}
        u = message_usage(usage)
        counts = {
            "output_tokens": u.output_tokens,
            "input_tokens": u.input_tokens,
            "cache_read_input_tokens": u.cache_read_input_tokens,
        }
        if u.output_tokens_details is not UNSET:
            counts["output_tokens_details"] = u.output_tokens_details
        return self._stop() + self._event("message_delta", delta=delta, usage=counts) + self._event("message_stop")

    def error(self, exc: BaseException) -> bytes:
        status, info, _ = error_parts(exc)
        return named_event("error", anthropic_error(status, info.message))
