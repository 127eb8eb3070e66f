"""The synchronous twin of :class:`agents.client.AsyncClient`: the same calls, without ``await``.

with Client("http://127.0.0.1:8000") as client:
    print(client.chat([{"role": "user", "content": "Hi"}]).content)
    with client.chat_stream(messages) as stream:
        for event in stream:
            ...
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx

from agentgate.agents._accumulators import ChatAccumulator, CompletionAccumulator, StreamParser
from agentgate.agents._requests import Req
from agentgate.agents._transport import SyncTransport, transport_error
from agentgate.agents.client import REQUEST_ID_HEADER, ClientApi
from agentgate.agents.events import Event


class Stream:
    """A streamed completion: an iterator of events and a context manager (see :class:`agents.client.AsyncStream`)."""

    def __init__(self, client: Client, req: Req, accumulator: ChatAccumulator | CompletionAccumulator) -> None:
        self._client = client
        self._req = req
        self.accumulator = accumulator
        self._parser = StreamParser(accumulator)
        self._events: Iterator[Event] | None = None
        self.request_id: str | None = req.headers.get(REQUEST_ID_HEADER) if req.headers else None
        self.response: httpx.Response | None = None

    @property
    def done(self) -> bool:
        """Whether ``data: [DONE]`` arrived."""
        return self._parser.done

    def __iter__(self) -> Iterator[Event]:
        if self._events is None:
            self._events = self._iterate()
        return self._events

    def _iterate(self) -> Iterator[Event]:
        response = self.response = self._client._open(self._req)
        self.request_id = response.headers.get("x-request-id", self.request_id)
        parser = self._parser
        try:
            try:
                for chunk in response.iter_bytes():
                    yield from parser.feed(chunk)
            except httpx.HTTPError as exc:
                raise transport_error(exc, self._client.base_url) from exc
            yield from parser.end()
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
