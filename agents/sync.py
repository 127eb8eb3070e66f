"""The synchronous twin of :class:`agents.client.AsyncClient`: the same calls, without ``await``.

    with Client("http://127.0.0.1:8000") as client:
        print(client.chat([{"role": "user", "content": "Hi"}]).content)
        with client.chat_stream(messages) as stream:
            for event in stream:
                ...
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx

from agents._core import ChatAccumulator, CompletionAccumulator, Req, RetryPolicy, SSEDecoder
from agents._transport import SyncTransport, TimeoutLike, transport_error
from agents.client import REQUEST_ID_HEADER, SESSION_HEADER, ClientApi
from agents.errors import APIConnectionError
from agents.events import Event


class Stream:
    """A streamed completion: an iterator of events and a context manager (see :class:`agents.client.AsyncStream`)."""

    def __init__(self, client: Client, req: Req, accumulator: ChatAccumulator | CompletionAccumulator) -> None:
        self._client = client
        self._req = req
        self.accumulator = accumulator
        self._events: Iterator[Event] | None = None
        self.request_id: str | None = req.headers.get(REQUEST_ID_HEADER) if req.headers else None
        self.response: httpx.Response | None = None
        self.done = False

    def __iter__(self) -> Iterator[Event]:
        if self._events is None:
            self._events = self._iterate()
        return self._events

    def _iterate(self) -> Iterator[Event]:
        response = self.response = self._client._open(self._req)
        self.request_id = response.headers.get("x-request-id", self.request_id)
        accumulator, decoder, loads = self.accumulator, SSEDecoder(), json.loads
        try:
            try:
                for chunk in response.iter_bytes():
                    for payload in decoder.feed(chunk):
                        if payload == b"[DONE]":
                            self.done = True
                        elif not self.done:
                            yield from accumulator.push(loads(payload))
            except httpx.HTTPError as exc:
                raise transport_error(exc, self._client.base_url) from exc
            if not self.done:
                raise APIConnectionError("the stream ended before data: [DONE]")
            yield from accumulator.finish()
        finally:
            response.close()

    def result(self):
        return self.accumulator.result(self.request_id)

    def final(self):
        for _ in self:
            pass
        return self.result()

    def close(self) -> None:
        if self._events is not None:
            self._events.close()  # type: ignore[attr-defined]
        elif self.response is not None:
            self.response.close()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Client(ClientApi, SyncTransport):
    """Synchronous client; the arguments are :class:`agents.client.AsyncClient`'s."""

    _stream_class = Stream

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
        http_client: httpx.Client | None = None,
        limits: httpx.Limits | None = None,
    ) -> None:
        self._configure(base_url, api_key, timeout, retry, max_retries, headers)
        self.model = model
        self.session_id = session_id
        if session_id:
            self.headers[SESSION_HEADER] = session_id
        self._connect(http_client, limits)
