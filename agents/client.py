"""The client: chat and completions against an agentgate (or any OpenAI-compatible) server.

    async with AsyncClient("http://127.0.0.1:8000", api_key="...") as client:
        result = await client.chat([{"role": "user", "content": "Hi"}], max_tokens=32)
        print(result.content)

        async with client.chat_stream(messages, tools=[get_weather]) as stream:
            async for event in stream:
                match event:
                    case ContentDelta(text=text): print(text, end="")
                    case ToolCallComplete(call=call): print(call.name, call.parsed_arguments())
        final = stream.result()       # the accumulated ChatResult

        session = client.session("conv-42")   # every request carries X-Session-Id: conv-42

Leaving a stream early (``break``, an exception, ``aclose()``, cancelling the
task that reads it) closes its connection, which the server takes as an abort:
the engine request stops and frees its KV cache within a step. Use ``async
with`` (or ``await stream.aclose()``) to close at once; a stream only dropped
is closed when it is garbage-collected.

429 and 503 answers are retried (``Retry-After`` honoured) before a call
raises; so are failures to connect. A stream is retried only until it starts.
:class:`agents.sync.Client` is the same API without ``await``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import anyio
import httpx

from agentgate.agents._accumulators import ChatAccumulator, CompletionAccumulator, StreamParser
from agentgate.agents._requests import Op, Req, drop_none, json_op
from agentgate.agents._retries import RetryPolicy
from agentgate.agents._transport import AsyncTransport, TimeoutLike, transport_error
from agentgate.agents.events import ChatResult, CompletionResult, Event

SESSION_HEADER = "X-Session-Id"
REQUEST_ID_HEADER = "X-Request-Id"

_CHOICE_WORDS = ("auto", "none", "required")


def tool_choice_json(choice: Any) -> Any:
    """``"auto"``/``"none"``/``"required"``, a tool's name, a :class:`~agents.tools.Tool`, or OpenAI's dict."""
    if choice is None or isinstance(choice, dict) or choice in _CHOICE_WORDS:
        return choice
    name = choice if isinstance(choice, str) else getattr(choice, "name", None) or getattr(choice, "__name__", None)
    if not name:
        raise TypeError(f"tool_choice must be auto, none, required, a tool or its name; got {choice!r}")
    return {"type": "function", "function": {"name": name}}


class ClientApi:
    """The calls, written once (sans-I/O) for both twins; ``_run``, ``_configure`` and ``_connect``
    come from the transport, ``_stream_class`` from the twin."""

    model: str | None
    session_id: str | None
    headers: dict[str, str]
    _stream_class: type

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        model: str | None = None,
        session_id: str | None = None,
        timeout: TimeoutLike = 120.0,
        max_retries: int | None = None,
        retry: RetryPolicy | None = None,
        headers: dict[str, str] | None = None,
        http_client: httpx.AsyncClient | httpx.Client | None = None,
        limits: httpx.Limits | None = None,
    ) -> None:
        """See :class:`AsyncClient`; ``http_client`` is the twin's kind (``httpx.AsyncClient`` or ``httpx.Client``)."""
        self._configure(base_url, api_key, timeout, retry, max_retries, headers)
        self.model = model
        self.session_id = session_id
        if session_id:
            self.headers[SESSION_HEADER] = session_id
        self._connect(http_client, limits)

    # -- request building ------------------------------------------------------------
    def _headers(self, request_id: str | None, extra: dict[str, str] | None) -> dict[str, str] | None:
        if request_id is None and not extra:
            return None
        headers = dict(extra or {})
        if request_id is not None:
            headers[REQUEST_ID_HEADER] = request_id
        return headers

    def _chat_req(
        self,
        messages: Iterable[dict[str, Any]],
        stream: bool,
        *,
        model: str | None = None,
        tools: Sequence[Any] | None = None,
        tool_choice: Any = None,
        parallel_tool_calls: bool | None = None,
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        request_id: str | None = None,
        timeout: TimeoutLike = None,
        extra_headers: dict[str, str] | None = None,
        **params: Any,
    ) -> Req:
        if "stream" in params:
            raise TypeError("pass no `stream` option: use chat() for a whole answer, chat_stream() for events")
        body: dict[str, Any] = {"messages": list(messages)}
        if tools:
            from agentgate.agents.tools import openai_tools

            body["tools"] = openai_tools(tools)
        body.update(
            drop_none(
                {
                    "model": model or self.model,
                    "tool_choice": tool_choice_json(tool_choice),
                    "parallel_tool_calls": parallel_tool_calls,
                    "response_format": response_format,
                    "max_tokens": max_tokens,
                    "temperature": temperature,
                    **params,
                }
            )
        )
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return Req(
            "POST", "/v1/chat/completions", body, headers=self._headers(request_id, extra_headers), timeout=timeout
        )

    def _completion_req(
        self,
        prompt: str | list[int] | list[str],
        stream: bool,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        request_id: str | None = None,
        timeout: TimeoutLike = None,
        extra_headers: dict[str, str] | None = None,
        **params: Any,
    ) -> Req:
        if "stream" in params:
            raise TypeError("pass no `stream` option: use complete() or complete_stream()")
        body: dict[str, Any] = {"prompt": prompt}
        body.update(
            drop_none({"model": model or self.model, "max_tokens": max_tokens, "temperature": temperature, **params})
        )
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return Req("POST", "/v1/completions", body, headers=self._headers(request_id, extra_headers), timeout=timeout)

    # -- calls -------------------------------------------------------------------------
    @staticmethod
    def _chat_op(req: Req) -> Op:
        resp = yield req
        return ChatResult.from_json(resp.json(), resp.request_id)

    @staticmethod
    def _completion_op(req: Req) -> Op:
        resp = yield req
        return CompletionResult.from_json(resp.json(), resp.request_id)

    def chat(self, messages: Iterable[dict[str, Any]], **options: Any):
        """A chat completion (not streamed) -> :class:`~agents.events.ChatResult`.

        Options: ``model``, ``tools`` (functions, :class:`~agents.tools.Tool` or
        OpenAI dicts), ``tool_choice``, ``parallel_tool_calls``,
        ``response_format``, ``max_tokens``, ``temperature``, ``request_id``
        (sent as X-Request-Id), ``timeout``, ``extra_headers``, and any other
        body field (``seed``, ``stop``, ``top_p``, ``ignore_eos``, ...)."""
        return self._run(self._chat_op(self._chat_req(messages, False, **options)))

    def chat_stream(self, messages: Iterable[dict[str, Any]], **options: Any):
        """A streamed chat completion: iterate it for events (see :mod:`agents.events`)."""
        return self._stream_class(self, self._chat_req(messages, True, **options), ChatAccumulator())

    def complete(self, prompt: str | list[int] | list[str], **options: Any):
        """A text completion (not streamed) -> :class:`~agents.events.CompletionResult`."""
        return self._run(self._completion_op(self._completion_req(prompt, False, **options)))

    def complete_stream(self, prompt: str | list[int] | list[str], **options: Any):
        return self._stream_class(self, self._completion_req(prompt, True, **options), CompletionAccumulator())

    def models(self):
        """The served model names."""

        def op() -> Op:
            resp = yield Req("GET", "/v1/models")
            return [m["id"] for m in resp.json().get("data", [])]

        return self._run(op())

    # -- sessions ------------------------------------------------------------------------
    def session(self, session_id: str | None = None):
        """A client whose requests all carry ``X-Session-Id`` (a fresh id when none is given);
        it shares this client's connections."""
        session_id = session_id or uuid.uuid4().hex
        twin = self._derive(**{SESSION_HEADER: session_id})
        twin.session_id = session_id
        return twin

    def _session_path(self) -> str:
        if not self.session_id:
            raise ValueError("this client has no session: use client.session(id) first")
        return f"/v1/sessions/{self.session_id}"

    def _session_op(self, method: str) -> Op:
        """``method`` on this session's path; the path (and its ValueError) is made when the call runs."""
        return (yield from json_op(Req(method, self._session_path())))

    def session_info(self):
        """This session's state from the server (``GET /v1/sessions/{id}``), as a dict."""
        return self._run(self._session_op("GET"))

    def delete_session(self):
        """Remove this session (its requests in flight are aborted): ``DELETE /v1/sessions/{id}``."""
        return self._run(self._session_op("DELETE"))


class AsyncStream:
    """A streamed completion: an async iterator of events, and an async context manager.

    ``request_id`` is the server's X-Request-Id once the stream has started;
    ``result()`` is what has arrived so far (the whole completion once iterated
    to the end); ``await final()`` reads the rest and returns it."""

    def __init__(self, client: AsyncClient, req: Req, accumulator: ChatAccumulator | CompletionAccumulator) -> None:
        self._client = client
        self._req = req
        self.accumulator = accumulator
        self._parser = StreamParser(accumulator)
        self._events: AsyncIterator[Event] | None = None
        self.request_id: str | None = req.headers.get(REQUEST_ID_HEADER) if req.headers else None
        self.response: httpx.Response | None = None

    @property
    def done(self) -> bool:
        """Whether ``data: [DONE]`` arrived."""
        return self._parser.done

    def __aiter__(self) -> AsyncIterator[Event]:
        if self._events is None:
            self._events = self._iterate()
        return self._events

    async def _iterate(self) -> AsyncIterator[Event]:
        response = self.response = await self._client._open(self._req)
        self.request_id = response.headers.get("x-request-id", self.request_id)
        parser = self._parser
        try:
            try:
                async for chunk in response.aiter_bytes():
                    for event in parser.feed(chunk):
                        yield event
            except httpx.HTTPError as exc:
                raise transport_error(exc, self._client.base_url) from exc
            for event in parser.end():
                yield event
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()

    def result(self):
        return self.accumulator.result(self.request_id)

    async def final(self):
        async for _ in self:
            pass
        return self.result()

    async def aclose(self) -> None:
        """Stop reading; an unfinished stream's connection is closed (the server aborts the request)."""
        if self._events is not None:
            await self._events.aclose()
        elif self.response is not None:
            await self.response.aclose()

    async def __aenter__(self) -> AsyncStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class AsyncClient(ClientApi, AsyncTransport):
    """Async client (httpx + anyio). ``base_url`` defaults to ``AGENTGATE_URL`` or
    http://127.0.0.1:8000 (a trailing /v1 is fine); ``api_key`` to ``AGENTGATE_API_KEY``.

    ``timeout``: seconds (or an ``httpx.Timeout``) for connecting, each read and
    each write; ``max_retries`` / ``retry``: see :class:`~agents._retries.RetryPolicy`;
    ``http_client``: an ``httpx.AsyncClient`` to share (not closed by this one)."""

    _stream_class = AsyncStream
