"""The SDK's I/O-free core, shared by the async client and its sync twin.

- :class:`Req` / :class:`Resp`: a request to send and what came back.
- API calls are generators that yield :class:`Req` and receive :class:`Resp`
  (sans-I/O); each transport drives them (``_run``), so every call is written
  once for both twins.
- :class:`RetryPolicy`: which answers are retried and how long to wait
  (``Retry-After`` first, else exponential backoff with jitter).
- :class:`SSEDecoder`: bytes in, ``data:`` payloads out; kept to a split and a
  few comparisons per network read, since a load generator runs it per token.
- :class:`ChatAccumulator` / :class:`CompletionAccumulator`: chunk dicts in,
  typed events out; tool-call deltas accumulate into complete calls.
- :class:`StreamParser`: a streamed response's bytes in, events out (the two
  above, plus ``data: [DONE]``); both stream classes drive it.
"""

from __future__ import annotations

import email.utils
import json
import os
import random
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

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

DEFAULT_URL = "http://127.0.0.1:8000"
USER_AGENT = "agentgate-agents/0.1"


def normalize_url(url: str | None) -> str:
    """The server's root URL: ``AGENTGATE_URL`` when ``url`` is None; a trailing ``/v1`` is dropped."""
    url = (url or os.environ.get("AGENTGATE_URL") or DEFAULT_URL).rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    if "://" not in url:
        url = "http://" + url
    return url


# -- requests and responses -------------------------------------------------------------


@dataclass(slots=True)
class Req:
    method: str
    path: str
    json: Any = None
    params: dict[str, Any] | None = None
    headers: dict[str, str] | None = None
    timeout: Any = None
    accept: tuple[int, ...] = ()  # error statuses returned as a Resp instead of raised
    retry: bool = True


@dataclass(slots=True)
class Resp:
    status_code: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    @property
    def request_id(self) -> str | None:
        return self.headers.get("x-request-id")


Op = Generator[Req, Resp, Any]


def json_op(req: Req) -> Op:
    """The one-request call: send ``req``, return its JSON body."""
    return (yield req).json()


def error_body(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return body.decode("utf-8", errors="replace")


# -- retries ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    """Retry 429 and 503 answers (and failures to connect) up to ``max_retries`` times.

    The wait is the server's ``Retry-After`` (seconds or an HTTP date, capped at
    ``max_retry_after``) when it sent one, else ``backoff * 2**attempt`` capped
    at ``max_backoff``, with full jitter in [50%, 100%]."""

    max_retries: int = 3
    backoff: float = 0.25
    max_backoff: float = 8.0
    max_retry_after: float = 60.0
    statuses: frozenset[int] = frozenset({429, 503})

    def delay(self, attempt: int, headers: dict[str, str] | None = None) -> float:
        retry_after = parse_retry_after((headers or {}).get("retry-after"))
        if retry_after is not None:
            return min(retry_after, self.max_retry_after)
        base = min(self.max_backoff, self.backoff * (2**attempt))
        return base * random.uniform(0.5, 1.0)


def parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


# -- SSE ------------------------------------------------------------------------------------


class SSEDecoder:
    """Server-sent events: feed bytes as they arrive, get the ``data`` payloads of complete events.

    Comments (``: ping``) and other fields (``event:``, ``id:``, ``retry:``) are skipped;
    several ``data:`` lines of one event are joined with newlines."""

    __slots__ = ("_buffer", "_data")

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        if self._buffer:
            chunk = self._buffer + chunk
        lines = chunk.split(b"\n")
        self._buffer = lines.pop()
        out: list[bytes] = []
        data = self._data
        for line in lines:
            if line[-1:] == b"\r":
                line = line[:-1]
            if not line:
                if data:
                    out.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data.clear()
            elif line[:5] == b"data:":
                data.append(line[6:] if line[5:6] == b" " else line[5:])
        return out

    def flush(self) -> list[bytes]:
        """The last event when the stream ended without its blank line."""
        out = self.feed(b"\n\n") if (self._buffer or self._data) else []
        self._buffer = b""
        return out


# -- stream accumulation --------------------------------------------------------------------


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


# -- request bodies -------------------------------------------------------------------------


def drop_none(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}
