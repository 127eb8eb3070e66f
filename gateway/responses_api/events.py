"""The Responses API's stream: typed events, each ``event: <type>`` + ``data: <json>``
with a ``sequence_number``, in OpenAI's documented order::

    response.created, response.in_progress
    per output item:  response.output_item.added
      a message:      response.content_part.added, response.output_text.delta ...,
                      response.output_text.done, response.content_part.done
      a call:         response.function_call_arguments.delta ..., response.function_call_arguments.done
                      response.output_item.done
    response.completed | response.incomplete | response.failed

The reply pieces come from the chat core's :class:`~gateway.chat.ReplyReader`
(content and tool-call deltas); a new kind of piece closes the item before it.
The last event goes out once the response is stored, so a client that reads
``response.completed`` can chain on it from any replica at once.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentgate.gateway.errors import GatewayError, error_parts
from agentgate.gateway.generation import Choice, ChoiceEvent
from agentgate.gateway.responses_api import items as it
from agentgate.gateway.responses_api.turn import Turn
from agentgate.gateway.responses_api.types import ResponseError
from agentgate.gateway.tools import Delta, ToolCall, accumulate

_encoder = msgspec.json.Encoder()

FINAL_EVENTS = {"completed": "response.completed", "incomplete": "response.incomplete",
                "failed": "response.failed", "cancelled": "response.failed"}  # fmt: skip


def named_event(kind: str, payload: Any) -> bytes:
    """One SSE event with its type named (``event:``) and its JSON payload. Lines end with
    ``\n``, as OpenAI's and Anthropic's do (line-splitting clients read nothing else)."""
    return b"event: " + kind.encode() + b"\ndata: " + _encoder.encode(payload) + b"\n\n"


class ResponsesStream:
    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.reader = turn.run.reader()
        self.sequence = 0
        self.deltas: list[Delta] = []
        self.output_index = -1
        self.item: dict[str, Any] | None = None  # the output item open now
        self.text: list[str] = []  # its text (a message) or arguments (a call)
        self.output: list[dict[str, Any]] = []  # the items closed, as streamed
        self.finish_reason: str | None = None

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = named_event(kind, {"type": kind, "sequence_number": self.sequence, **fields})
        self.sequence += 1
        return data

    def _response_event(self, kind: str) -> bytes:
        return self._event(kind, response=self.turn.response)

    def opening(self) -> bytes:
        return self._response_event("response.created") + self._response_event("response.in_progress")

    def chunk(self, choice: Choice, event: ChoiceEvent) -> bytes | None:
        deltas, finish = self.reader.read(event.text, event.finish_reason)
        out = []
        for d in deltas:
            self.deltas.append(d)
            if d.content:
                out.append(self._content(d.content))
            for call in d.tool_calls:
                if call.id is not None:
                    out.append(self._open_call(ToolCall(call.id, call.function.name or "", "")))
                if call.function.arguments:
                    self.text.append(call.function.arguments)
                    out.append(self._event("response.function_call_arguments.delta", item_id=self.item["id"],
                                           output_index=self.output_index, delta=call.function.arguments))  # fmt: skip
        if finish is not None:
            self.finish_reason = finish
        return b"".join(out) or None

    def _content(self, text: str) -> bytes:
        out = b""
        if self.item is None or self.item["type"] != "message":
            out += self._close_item()
            out += self._open(it.message_item("", "in_progress"))
            out += self._event("response.content_part.added", item_id=self.item["id"], output_index=self.output_index,
                               content_index=0, part=self._part(""))  # fmt: skip
        self.text.append(text)
        return out + self._event("response.output_text.delta", item_id=self.item["id"], output_index=self.output_index,
                                 content_index=0, delta=text, logprobs=[])  # fmt: skip

    def _open_call(self, call: ToolCall) -> bytes:
        return self._close_item() + self._open(it.function_call_item(call, "in_progress"))

    def _open(self, item: dict[str, Any]) -> bytes:
        self.output_index += 1
        self.item, self.text = item, []
        return self._event("response.output_item.added", output_index=self.output_index, item=item)

    @staticmethod
    def _part(text: str) -> dict[str, Any]:
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    def _close_item(self) -> bytes:
        item = self.item
        if item is None:
            return b""
        self.item = None
        text, index = "".join(self.text), self.output_index
        status = "incomplete" if self.finish_reason == "length" else "completed"
        if item["type"] == "message":
            part = self._part(text)
            done = it.message_item(text, status, item["id"])
            out = self._event("response.output_text.done", item_id=item["id"], output_index=index, content_index=0,
                              text=text, logprobs=[])  # fmt: skip
            out += self._event("response.content_part.done", item_id=item["id"], output_index=index, content_index=0,
                               part=part)  # fmt: skip
        else:
            done = {**item, "arguments": text, "status": status}
            out = self._event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                              name=item["name"], arguments=text)  # fmt: skip
        self.output.append(done)
        return out + self._event("response.output_item.done", output_index=index, item=done)

    async def closing(self) -> bytes:
        out = self._close_item()
        response = self.turn.finish(accumulate(self.deltas), self.finish_reason, output=self.output)
        try:
            await self.turn.save()
        except GatewayError as exc:  # the store failed at the end (Redis down): the client hears why, then failed
            return out + self.error(exc)
        return out + self._response_event(FINAL_EVENTS[response.status])

    def error(self, exc: BaseException) -> bytes:
        status, info, _ = error_parts(exc)
        response = self.turn.response
        response.status = "failed"
        response.error = ResponseError(str(info.code or "server_error"), info.message)
        return self._event("error", code=str(info.code or status), message=info.message, param=info.param) + (
            self._response_event("response.failed")
        )
