"""The Responses API's stream: typed events, each with a ``sequence_number``, in OpenAI's
documented order::

    response.created, response.in_progress
    per output item:  response.output_item.added
      a reasoning:    response.content_part.added, response.reasoning_text.delta ...,
                      response.reasoning_text.done, response.content_part.done
      a message:      response.content_part.added, response.output_text.delta ...,
                      response.output_text.done, response.content_part.done
      a call:         response.function_call_arguments.delta ..., response.function_call_arguments.done
                      response.output_item.done
    response.completed | response.incomplete | response.failed

:class:`ResponseEvents` is the one core under both transports: it turns the
reply pieces a choice read (content and tool-call deltas, carried by its events:
``gateway.choice``; a new kind of piece closes the item before it) into event payloads.
The turn's events (``gateway.responses_api.turn_events``) go out as SSE
(``event: <type>`` + ``data: <json>``, framed by the route) or, in the WebSocket mode
(:mod:`gateway.http.websocket`), each as one text message. Between the last item's
closing events (:meth:`ResponseEvents.ending`) and the final one
(:meth:`ResponseEvents.final`) the route finishes and stores the response (never
this format), so a client that reads
``response.completed`` can chain on it from any replica at once.

An error after the start is an ``error`` event, then ``response.failed``. Its
fields differ by transport: SSE puts ``code``, ``message`` and ``param`` at
the top (OpenAI's stream), the WebSocket mode nests them in ``error`` with a
``status`` (OpenAI's WebSocket error envelope).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agentgate.gateway.api_types import response_items as it
from agentgate.gateway.api_types.responses import ResponseError, ResponseObject
from agentgate.gateway.errors import ErrorInfo, error_parts
from agentgate.gateway.events import ChoiceEvent
from agentgate.gateway.tools import Delta, ParsedOutput, ToolCall, accumulate

FINAL_EVENTS = {
    "completed": "response.completed",
    "incomplete": "response.incomplete",
    "failed": "response.failed",
    "cancelled": "response.failed",
}

Event = dict[str, Any]
_TEXT_EVENTS = {"message": "response.output_text", "reasoning": "response.reasoning_text"}
ErrorFields = Callable[[int, ErrorInfo], dict[str, Any]]  # (status, error) -> the error event's fields


def sse_error_fields(status: int, info: ErrorInfo) -> dict[str, Any]:
    return {"code": str(info.code or status), "message": info.message, "param": info.param}


class ResponseEvents:
    """The events of ``response``, from its reply as read, as payloads (dicts), in order;
    ``error_fields``: the transport's error event."""

    def __init__(
        self,
        response: ResponseObject,
        error_fields: ErrorFields = sse_error_fields,
        mcp_labels: Mapping[str, tuple[str, bool]] | None = None,
        names: it.CallNames | None = None,
        seal: it.Sealing | None = None,
    ) -> None:
        self.response = response
        self.error_fields = error_fields
        self.sequence = 0
        self.deltas: list[Delta] = []
        self.output_index = -1
        self.item: dict[str, Any] | None = None  # the output item open now
        self.text: list[str] = []  # its text (a message) or arguments (a call)
        self.output: list[dict[str, Any]] = []  # the items closed, as streamed
        self.finish_reason: str | None = None
        # tool name -> (MCP server label, whether a call waits for approval): mcp_call (or
        # mcp_approval_request) items, not function_call ones
        self.mcp_labels = mcp_labels or {}
        self.pending: list[dict[str, Any]] = []  # mcp_call items whose arguments are done, to run
        self.names = names or {}  # namespaced and custom tools' calls (response_items.CallNames)
        self.seal = seal  # include: reasoning.encrypted_content (responses_api.reasoning_items)

    def next_round(self) -> None:
        """The server ran the reply's tool calls; the model's next reply follows in the same response."""
        self.deltas, self.finish_reason, self.pending = [], None, []

    def _event(self, kind: str, **fields: Any) -> Event:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event

    def _response_event(self, kind: str) -> Event:
        return self._event(kind, response=self.response)

    def opening(self) -> list[Event]:
        return [self._response_event("response.created"), self._response_event("response.in_progress")]

    def chunk(self, event: ChoiceEvent) -> list[Event]:
        out: list[Event] = []
        for d in event.deltas:
            self.deltas.append(d)
            if d.reasoning:
                out += self._text("reasoning", d.reasoning)
            if d.content:
                out += self._text("message", d.content)
            for call in d.tool_calls:
                if call.id is not None:
                    out += self._open_call(ToolCall(call.id, call.function.name or "", ""))
                if call.function.arguments:
                    self.text.append(call.function.arguments)
                    if self.item["type"] in ("mcp_approval_request", "custom_tool_call"):  # sent whole when it closes
                        continue
                    mcp_call = self.item["type"] == "mcp_call"
                    kind = "mcp_call_arguments" if mcp_call else "function_call_arguments"
                    out.append(self._item_event(f"response.{kind}.delta") | {"delta": call.function.arguments})
        if event.reply_finish is not None:
            self.finish_reason = event.reply_finish
        return out

    def _text(self, kind: str, text: str) -> list[Event]:
        """A piece of a ``message``'s text or of a ``reasoning`` item's, opening the item first."""
        out = []
        if self.item is None or self.item["type"] != kind:
            out += self._close_item()
            item = it.message_item("", "in_progress") if kind == "message" else it.reasoning_item("", "in_progress")
            out.append(self._open(item))
            out.append(
                self._event(
                    "response.content_part.added",
                    item_id=self.item["id"],
                    output_index=self.output_index,
                    content_index=0,
                    part=self._part("", kind),
                )
            )
        self.text.append(text)
        fields = {"logprobs": []} if kind == "message" else {}
        out.append(
            self._event(
                _TEXT_EVENTS[kind] + ".delta",
                item_id=self.item["id"],
                output_index=self.output_index,
                content_index=0,
                delta=text,
                **fields,
            )
        )
        return out

    def _open_call(self, call: ToolCall) -> list[Event]:
        server = self.mcp_labels.get(call.name)
        if server is None:
            return self._close_item() + [self._open(it.client_call_item(call, self.names, "in_progress"))]
        label, approval = server
        if approval:  # held until its arguments are whole: an approval request is one item, added and done
            out = self._close_item()
            self.output_index += 1
            self.item, self.text = it.approval_request_item(label, call.name, ""), []
            return out
        out = self._close_item() + [self._open(it.call_item(label, call.name))]
        return out + [self._item_event("response.mcp_call.in_progress")]

    def _item_event(self, kind: str, item: dict[str, Any] | None = None, index: int | None = None) -> Event:
        item = item or self.item
        return self._event(kind, item_id=item["id"], output_index=self.output_index if index is None else index)

    def _open(self, item: dict[str, Any]) -> Event:
        self.output_index += 1
        self.item, self.text = item, []
        return self._event("response.output_item.added", output_index=self.output_index, item=item)

    @staticmethod
    def _part(text: str, kind: str = "message") -> dict[str, Any]:
        if kind == "reasoning":
            return {"type": "reasoning_text", "text": text}
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    def _close_item(self) -> list[Event]:
        item = self.item
        if item is None:
            return []
        self.item = None
        text, index = "".join(self.text), self.output_index
        status = it.item_status(self.finish_reason)
        if item["type"] in _TEXT_EVENTS:
            kind = item["type"]
            make = it.message_item if kind == "message" else it.reasoning_item
            done = it.sealed(make(text, status, item["id"]), self.seal)
            fields = {"logprobs": []} if kind == "message" else {}
            out = [
                self._event(
                    _TEXT_EVENTS[kind] + ".done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    text=text,
                    **fields,
                ),
                self._event(
                    "response.content_part.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    part=self._part(text, kind),
                ),
            ]
        elif item["type"] == "mcp_call":  # done once the server ran it (settled)
            item["arguments"] = text
            self.output.append(item)
            self.pending.append(item)
            return [self._item_event("response.mcp_call_arguments.done", item, index) | {"arguments": text}]
        elif item["type"] == "custom_tool_call":  # its input is known once its arguments are whole
            done = {**item, "input": it.custom_input(text), "status": status}
            fields = {"item_id": item["id"], "output_index": index}
            out = [
                self._event("response.custom_tool_call_input.delta", **fields, delta=done["input"]),
                self._event("response.custom_tool_call_input.done", **fields, input=done["input"]),
            ]
        elif item["type"] == "mcp_approval_request":
            item["arguments"] = text
            self.output.append(item)
            added = self._event("response.output_item.added", output_index=index, item=item)
            return [added, self._event("response.output_item.done", output_index=index, item=item)]
        else:
            done = {**item, "arguments": text, "status": status}
            out = [
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    name=item["name"],
                    arguments=text,
                )
            ]
        self.output.append(done)
        return out + [self._event("response.output_item.done", output_index=index, item=done)]

    def settled(self, item: dict[str, Any]) -> list[Event]:
        """An ``mcp_call`` item's last events, once run (its output or error written in it) or
        left (``incomplete``: the response ended first)."""
        index = next(i for i, done in enumerate(self.output) if done is item)
        out = []
        if item["status"] != "incomplete":
            kind = "response.mcp_call.failed" if item["error"] is not None else "response.mcp_call.completed"
            out.append(self._item_event(kind, item, index))
        return out + [self._event("response.output_item.done", output_index=index, item=item)]

    def whole_item(self, item: dict[str, Any], progress: str | None = None) -> list[Event]:
        """An item that is known whole at once (an ``mcp_list_tools``, an approval request):
        added, then ``progress``'s ``.in_progress`` and ``.completed`` (or ``.failed``) events, done."""
        out = self._close_item()
        added = self._open({**item, "tools": []} if item["type"] == "mcp_list_tools" else item)
        self.item = None
        out.append(added)
        if progress is not None:
            end = "failed" if item.get("error") is not None else "completed"
            out += [self._item_event(f"{progress}.in_progress", item), self._item_event(f"{progress}.{end}", item)]
        self.output.append(item)
        return out + [self._event("response.output_item.done", output_index=self.output_index, item=item)]

    @property
    def parsed(self) -> ParsedOutput:
        """The reply as streamed."""
        return accumulate(self.deltas)

    def ending(self) -> list[Event]:
        """The last item's closing events (the reply has ended)."""
        return self._close_item()

    def final(self) -> list[Event]:
        """The final event of the response as it is now (finished: ``response.completed``, ...)."""
        return [self._response_event(FINAL_EVENTS[self.response.status])]

    def error(self, exc: BaseException) -> list[Event]:
        """The ``error`` event, then ``response.failed``: the response failed with ``exc``."""
        status, info, _ = error_parts(exc)
        response = self.response
        response.status = "failed"
        response.error = ResponseError(str(info.code or "server_error"), info.message)
        return [self._event("error", **self.error_fields(status, info)), self._response_event("response.failed")]
