"""The Responses API's stream: typed events, each with a ``sequence_number``, in OpenAI's
documented order::

    response.created, response.in_progress
    per output item:  response.output_item.added
      a message:      response.content_part.added, response.output_text.delta ...,
                      response.output_text.done, response.content_part.done
      a call:         response.function_call_arguments.delta ..., response.function_call_arguments.done
                      response.output_item.done
    response.completed | response.incomplete | response.failed

:class:`ResponseEvents` is the one core under both transports: it turns the
reply pieces of the chat core's :class:`~gateway.chat.ReplyReader` (content
and tool-call deltas; a new kind of piece closes the item before it) into
event payloads. :class:`ResponsesStream` frames them as SSE (``event: <type>``
+ ``data: <json>``); the WebSocket mode (:mod:`gateway.http.websocket`)
sends each as one text message. The last event goes out once the response is
stored, so a client that reads ``response.completed`` can chain on it from
any replica at once.

An error after the start is an ``error`` event, then ``response.failed``. Its
fields differ by transport: SSE puts ``code``, ``message`` and ``param`` at
the top (OpenAI's stream), the WebSocket mode nests them in ``error`` with a
``status`` (OpenAI's WebSocket error envelope).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from agentgate.gateway.errors import ErrorInfo, GatewayError, error_parts
from agentgate.gateway.generation import Choice, ChoiceEvent
from agentgate.gateway.responses_api import items as it
from agentgate.gateway.responses_api.turn import Turn
from agentgate.gateway.responses_api.types import ResponseError
from agentgate.gateway.tools import Delta, ToolCall, accumulate

_encoder = msgspec.json.Encoder()

FINAL_EVENTS = {"completed": "response.completed", "incomplete": "response.incomplete",
                "failed": "response.failed", "cancelled": "response.failed"}  # fmt: skip

Event = dict[str, Any]
ErrorFields = Callable[[int, ErrorInfo], dict[str, Any]]  # (status, error) -> the error event's fields


def named_event(kind: str, payload: Any) -> bytes:
    """One SSE event with its type named (``event:``) and its JSON payload. Lines end with
    ``\n``, as OpenAI's and Anthropic's do (line-splitting clients read nothing else)."""
    return b"event: " + kind.encode() + b"\ndata: " + _encoder.encode(payload) + b"\n\n"


def sse_error_fields(status: int, info: ErrorInfo) -> dict[str, Any]:
    return {"code": str(info.code or status), "message": info.message, "param": info.param}


class ResponseEvents:
    """A turn's events as payloads (dicts), in order; ``error_fields``: the transport's error event."""

    def __init__(self, turn: Turn, error_fields: ErrorFields = sse_error_fields) -> None:
        self.turn = turn
        self.error_fields = error_fields
        self.reader = turn.run.reader()
        self.sequence = 0
        self.deltas: list[Delta] = []
        self.output_index = -1
        self.item: dict[str, Any] | None = None  # the output item open now
        self.text: list[str] = []  # its text (a message) or arguments (a call)
        self.output: list[dict[str, Any]] = []  # the items closed, as streamed
        self.finish_reason: str | None = None

    def _event(self, kind: str, **fields: Any) -> Event:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event

    def _response_event(self, kind: str) -> Event:
        return self._event(kind, response=self.turn.response)

    def opening(self) -> list[Event]:
        return [self._response_event("response.created"), self._response_event("response.in_progress")]

    def chunk(self, event: ChoiceEvent) -> list[Event]:
        deltas, finish = self.reader.read(event.text, event.finish_reason)
        out: list[Event] = []
        for d in deltas:
            self.deltas.append(d)
            if d.content:
                out += self._content(d.content)
            for call in d.tool_calls:
                if call.id is not None:
                    out += self._open_call(ToolCall(call.id, call.function.name or "", ""))
                if call.function.arguments:
                    self.text.append(call.function.arguments)
                    out.append(self._event("response.function_call_arguments.delta", item_id=self.item["id"],
                                           output_index=self.output_index, delta=call.function.arguments))  # fmt: skip
        if finish is not None:
            self.finish_reason = finish
        return out

    def _content(self, text: str) -> list[Event]:
        out = []
        if self.item is None or self.item["type"] != "message":
            out += self._close_item()
            out.append(self._open(it.message_item("", "in_progress")))
            out.append(self._event("response.content_part.added", item_id=self.item["id"],
                                   output_index=self.output_index, content_index=0, part=self._part("")))  # fmt: skip
        self.text.append(text)
        out.append(self._event("response.output_text.delta", item_id=self.item["id"], output_index=self.output_index,
                               content_index=0, delta=text, logprobs=[]))  # fmt: skip
        return out

    def _open_call(self, call: ToolCall) -> list[Event]:
        return self._close_item() + [self._open(it.function_call_item(call, "in_progress"))]

    def _open(self, item: dict[str, Any]) -> Event:
        self.output_index += 1
        self.item, self.text = item, []
        return self._event("response.output_item.added", output_index=self.output_index, item=item)

    @staticmethod
    def _part(text: str) -> dict[str, Any]:
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    def _close_item(self) -> list[Event]:
        item = self.item
        if item is None:
            return []
        self.item = None
        text, index = "".join(self.text), self.output_index
        status = "incomplete" if self.finish_reason == "length" else "completed"
        if item["type"] == "message":
            done = it.message_item(text, status, item["id"])
            out = [self._event("response.output_text.done", item_id=item["id"], output_index=index, content_index=0,
                               text=text, logprobs=[]),
                   self._event("response.content_part.done", item_id=item["id"], output_index=index, content_index=0,
                               part=self._part(text))]  # fmt: skip
        else:
            done = {**item, "arguments": text, "status": status}
            out = [self._event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                               name=item["name"], arguments=text)]  # fmt: skip
        self.output.append(done)
        return out + [self._event("response.output_item.done", output_index=index, item=done)]

    async def closing(self) -> list[Event]:
        """The last item's closing events, then (the response finished and stored) the final event."""
        out = self._close_item()
        response = self.turn.finish(accumulate(self.deltas), self.finish_reason, output=self.output)
        try:
            await self.turn.save()
        except GatewayError as exc:  # the store failed at the end (Redis down): the client hears why, then failed
            return out + self.error(exc)
        return out + [self._response_event(FINAL_EVENTS[response.status])]

    def error(self, exc: BaseException) -> list[Event]:
        """The ``error`` event, then ``response.failed``: the response failed with ``exc``."""
        status, info, _ = error_parts(exc)
        response = self.turn.response
        response.status = "failed"
        response.error = ResponseError(str(info.code or "server_error"), info.message)
        return [self._event("error", **self.error_fields(status, info)), self._response_event("response.failed")]


class ResponsesStream:
    """:class:`ResponseEvents` as SSE (a :class:`~gateway.http.sse.StreamFormat`)."""

    def __init__(self, turn: Turn) -> None:
        self.events = ResponseEvents(turn)

    @staticmethod
    def _sse(events: list[Event]) -> bytes:
        return b"".join(named_event(event["type"], event) for event in events)

    def opening(self) -> bytes:
        return self._sse(self.events.opening())

    def chunk(self, choice: Choice, event: ChoiceEvent) -> bytes | None:
        return self._sse(self.events.chunk(event)) or None

    async def closing(self) -> bytes:
        return self._sse(await self.events.closing())

    def error(self, exc: BaseException) -> bytes:
        return self._sse(self.events.error(exc))
