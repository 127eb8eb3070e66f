"""Streamed chunks in, typed events out.

- :class:`ChatAccumulator` / :class:`CompletionAccumulator`: chunk dicts in,
  typed events out; tool-call deltas accumulate into complete calls.
- :class:`StreamParser`: a streamed response's bytes in, events out (SSE
  decoding, one of the two above, plus ``data: [DONE]``); both stream classes
  drive it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from agentgate.agents._sse import SSEDecoder
from agentgate.agents.errors import APIConnectionError, StreamError
from agentgate.agents.events import (
    ChatResult,
    Choice,
    CompletionResult,
    ContentDelta,
    Event,
    Finish,
    ToolCall,
    ToolCallComplete,
    ToolCallDelta,
    Usage,
    UsageEvent,
)


class _ChoiceState:
    __slots__ = ("index", "parts", "calls", "open_calls", "finish_reason", "has_content")

    def __init__(self, index: int) -> None:
        self.index = index
        self.parts: list[str] = []
        self.calls: dict[int, ToolCall] = {}
        self.open_calls: list[int] = []
        self.finish_reason: str | None = None
        self.has_content = False


def _raise_stream_error(chunk: dict[str, Any]) -> None:
    info = chunk["error"] if isinstance(chunk.get("error"), dict) else {"message": str(chunk.get("error"))}
    raise StreamError(str(info.get("message") or "stream error"), type=info.get("type"), code=info.get("code"))


class ChatAccumulator:
    """``chat.completion.chunk`` dicts in, events out; :meth:`result` is the whole completion."""

    def __init__(self) -> None:
        self.id = ""
        self.model = ""
        self.usage: Usage | None = None
        self.choices: dict[int, _ChoiceState] = {}

    def _choice(self, index: int) -> _ChoiceState:
        state = self.choices.get(index)
        if state is None:
            state = self.choices[index] = _ChoiceState(index)
        return state

    def push(self, chunk: dict[str, Any]) -> list[Event]:
        if chunk.get("error"):
            _raise_stream_error(chunk)
        if not self.id:
            self.id, self.model = chunk.get("id", ""), chunk.get("model", "")
        events: list[Event] = []
        for raw in chunk.get("choices") or ():
            index = raw.get("index", 0)
            state = self._choice(index)
            delta = raw.get("delta") or {}
            text = delta.get("content")
            if text:
                state.parts.append(text)
                state.has_content = True
                events.append(ContentDelta(text, index))
            elif text == "":
                state.has_content = True
            calls = delta.get("tool_calls")
            if calls:
                self._tool_deltas(state, calls, events)
            reason = raw.get("finish_reason")
            if reason is not None:
                state.finish_reason = reason
                self._close_calls(state, events)
                events.append(Finish(reason, index))
        usage = chunk.get("usage")
        if usage:
            self.usage = Usage.from_json(usage)
            events.append(UsageEvent(self.usage))  # type: ignore[arg-type]
        return events

    def _tool_deltas(self, state: _ChoiceState, deltas: list[dict[str, Any]], events: list[Event]) -> None:
        for position, delta in enumerate(deltas):
            call_index = delta.get("index", position)
            function = delta.get("function") or {}
            name = function.get("name")
            arguments = function.get("arguments") or ""
            call = state.calls.get(call_index)
            if call is None:
                # a new call: the ones before it are complete
                self._close_calls(state, events)
                call = state.calls[call_index] = ToolCall(delta.get("id") or "", name or "", "", call_index)
                state.open_calls.append(call_index)
            else:
                if delta.get("id") and not call.id:
                    call.id = delta["id"]
                if name:
                    call.name += name
            call.arguments += arguments
            events.append(ToolCallDelta(call_index, delta.get("id"), name, arguments, state.index))

    def _close_calls(self, state: _ChoiceState, events: list[Event]) -> None:
        for call_index in state.open_calls:
            events.append(ToolCallComplete(state.calls[call_index], state.index))
        state.open_calls.clear()

    def finish(self) -> list[Event]:
        """Events for calls still open when the stream ended (a choice without a finish chunk)."""
        events: list[Event] = []
        for state in self.choices.values():
            self._close_calls(state, events)
        return events

    def result(self, request_id: str | None = None) -> ChatResult:
        choices = []
        for index in sorted(self.choices):
            state = self.choices[index]
            content = "".join(state.parts) if (state.parts or (state.has_content and not state.calls)) else None
            calls = [state.calls[i] for i in sorted(state.calls)]
            choices.append(Choice(index, content, calls, state.finish_reason))
        return ChatResult(self.id, self.model, choices, self.usage, request_id)


class CompletionAccumulator:
    """``text_completion`` chunks in, :class:`ContentDelta` / :class:`Finish` / :class:`UsageEvent` out."""

    def __init__(self) -> None:
        self.id = ""
        self.model = ""
        self.usage: Usage | None = None
        self.texts: dict[int, list[str]] = {}
        self.finish_reasons: dict[int, str | None] = {}

    def push(self, chunk: dict[str, Any]) -> list[Event]:
        if chunk.get("error"):
            _raise_stream_error(chunk)
        if not self.id:
            self.id, self.model = chunk.get("id", ""), chunk.get("model", "")
        events: list[Event] = []
        for raw in chunk.get("choices") or ():
            index = raw.get("index", 0)
            parts = self.texts.get(index)
            if parts is None:
                parts = self.texts[index] = []
            text = raw.get("text")
            if text:
                parts.append(text)
                events.append(ContentDelta(text, index))
            reason = raw.get("finish_reason")
            if reason is not None:
                self.finish_reasons[index] = reason
                events.append(Finish(reason, index))
        usage = chunk.get("usage")
        if usage:
            self.usage = Usage.from_json(usage)
            events.append(UsageEvent(self.usage))  # type: ignore[arg-type]
        return events

    def finish(self) -> list[Event]:
        return []

    def result(self, request_id: str | None = None) -> CompletionResult:
        indices = sorted(self.texts)
        return CompletionResult(
            self.id,
            self.model,
            ["".join(self.texts[i]) for i in indices],
            [self.finish_reasons.get(i) for i in indices],
            self.usage,
            request_id,
        )


class StreamParser:
    """A streamed response's body in, events out: SSE decoding, ``data: [DONE]``, and an accumulator.

    :meth:`feed` is lazy (a generator), so the events of a network read before a
    bad chunk (an error chunk, invalid JSON) are still delivered before it raises.
    Payloads after ``[DONE]`` are ignored; a last event without its blank line is
    not read."""

    __slots__ = ("accumulator", "decoder", "done")

    def __init__(self, accumulator: ChatAccumulator | CompletionAccumulator) -> None:
        self.accumulator = accumulator
        self.decoder = SSEDecoder()
        self.done = False  # data: [DONE] arrived

    def feed(self, chunk: bytes) -> Iterator[Event]:
        """The events of one network read."""
        push, loads = self.accumulator.push, json.loads
        for payload in self.decoder.feed(chunk):
            if payload == b"[DONE]":
                self.done = True
            elif not self.done:
                yield from push(loads(payload))

    def end(self) -> list[Event]:
        """The events left when the body has ended; APIConnectionError when it ended before ``[DONE]``."""
        if not self.done:
            raise APIConnectionError("the stream ended before data: [DONE]")
        return self.accumulator.finish()
