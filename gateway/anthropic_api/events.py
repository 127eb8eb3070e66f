"""The Anthropic Messages API's reply, whole and streamed.

Streamed, as Anthropic sends it (``event: <type>`` + ``data: <json>``)::

    message_start, ping
    per content block: content_block_start, content_block_delta ... (text_delta or
                       input_json_delta), content_block_stop
    message_delta (stop_reason, stop_sequence, usage), message_stop

An error after the stream started is an ``error`` event with Anthropic's body.
The reply pieces come from the chat core's :class:`~gateway.chat.ReplyReader`;
a call arrives whole (its arguments with its header), so a ``tool_use``
block opens and closes around one ``input_json_delta``.
"""

from __future__ import annotations

from typing import Any

from agentgate.gateway.anthropic_api.translate import stop_reason
from agentgate.gateway.anthropic_api.types import AnthropicError, AnthropicErrorInfo, Message, MessageUsage
from agentgate.gateway.chat import ChatRun
from agentgate.gateway.errors import error_parts
from agentgate.gateway.generation import Choice, ChoiceEvent
from agentgate.gateway.responses_api.events import named_event

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 405: "invalid_request_error", 409: "invalid_request_error",
               413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error"}  # fmt: skip


def anthropic_error(status: int, message: str) -> AnthropicError:
    return AnthropicError(AnthropicErrorInfo(ERROR_TYPES.get(status, "api_error"), message))


def usage(run: ChatRun) -> MessageUsage:
    u = run.generation.usage
    return MessageUsage(u.prompt_tokens, u.completion_tokens, u.cached_tokens)


class MessagesStream:
    def __init__(self, run: ChatRun, message: Message) -> None:
        self.run = run
        self.message = message
        self.reader = run.reader()
        self.index = -1
        self.block: str | None = None  # the type of the content block open now
        self.finish_reason: str | None = None

    def _event(self, kind: str, **fields: Any) -> bytes:
        return named_event(kind, {"type": kind, **fields})

    def opening(self) -> bytes:
        return self._event("message_start", message=self.message) + self._event("ping")

    def chunk(self, choice: Choice, event: ChoiceEvent) -> bytes | None:
        deltas, finish = self.reader.read(event.text, event.finish_reason)
        out = []
        for d in deltas:
            if d.content:
                if self.block != "text":
                    out.append(self._start({"type": "text", "text": ""}))
                out.append(self._event("content_block_delta", index=self.index,
                                       delta={"type": "text_delta", "text": d.content}))  # fmt: skip
            for call in d.tool_calls:
                if call.id is not None:
                    block = {"type": "tool_use", "id": call.id, "name": call.function.name, "input": {}}
                    out.append(self._start(block))
                if call.function.arguments:
                    delta = {"type": "input_json_delta", "partial_json": call.function.arguments}
                    out.append(self._event("content_block_delta", index=self.index, delta=delta))
        if finish is not None:
            self.finish_reason = finish
        return b"".join(out) or None

    def _start(self, block: dict[str, Any]) -> bytes:
        out = self._stop()
        self.index += 1
        self.block = block["type"]
        return out + self._event("content_block_start", index=self.index, content_block=block)

    def _stop(self) -> bytes:
        if self.block is None:
            return b""
        self.block = None
        return self._event("content_block_stop", index=self.index)

    async def closing(self) -> bytes:
        choice = self.run.generation.choices[0]
        stop = choice.matched_stop
        delta = {"stop_reason": stop_reason(self.finish_reason, stop), "stop_sequence": stop}
        u = usage(self.run)
        return (
            self._stop()
            + self._event("message_delta", delta=delta, usage={"output_tokens": u.output_tokens,
                                                               "input_tokens": u.input_tokens,
                                                               "cache_read_input_tokens": u.cache_read_input_tokens})
            + self._event("message_stop")
        )  # fmt: skip

    def error(self, exc: BaseException) -> bytes:
        status, info, _ = error_parts(exc)
        body = anthropic_error(status, info.message)
        return named_event("error", body)
