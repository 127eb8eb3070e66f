"""Clients too slow to be served: each costs a connection (and perhaps a
stream's KV blocks) for as long as it likes, unless the server says how long.

- **Headers** (:class:`GuardedH11Protocol`, uvicorn's h11 protocol): a
  request whose headers are not all in within ``--header-timeout`` seconds of
  its first byte (or of the connection, for a client that sends nothing)
  gets 408 and the connection is closed; slowloris holds nothing for long.
- **Connections**: past ``--max-connections`` open connections in this
  process, a new one gets 503 (``too_many_connections``) and is closed at once.
- **Bodies** (:func:`body_read_timeout`, used by the body-limit middleware):
  a body that stalls for ``--body-timeout`` seconds between two chunks is a 408.
- **Streams**: an SSE write that cannot complete within ``--sse-send-timeout``
  seconds (the reader stopped reading and every buffer is full) ends the
  stream; its generation is closed, so the engine request is aborted and its
  KV blocks freed (``gateway.http.sse``).
"""

from __future__ import annotations

import asyncio

import msgspec
from uvicorn.protocols.http.h11_impl import H11Protocol

from agentgate.gateway.errors import ErrorBody, ErrorInfo


def _raw_response(status: int, reason: str, message: str, code: str) -> bytes:
    """A whole HTTP response with an OpenAI error body, written before any request was read."""
    error_type = "invalid_request_error" if status < 500 else "service_unavailable"
    body = msgspec.json.encode(ErrorBody(ErrorInfo(message, error_type, None, code)))
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    ).encode()
    return head + body


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header read timeout and a connection cap (class attributes,
    set by :func:`guarded_protocol`)."""

    header_timeout: float = 10.0
    max_connections: int = 0  # 0: no cap

    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self.max_connections and len(self.connections) > self.max_connections:
            message = f"this server holds {self.max_connections} connections already; retry later"
            transport.write(_raw_response(503, "Service Unavailable", message, "too_many_connections"))
            transport.close()
            return
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self.cycle is None or self.cycle.response_complete:
            self._arm()  # the bytes of a new request: its headers are on the clock
        super().data_received(data)
        if self.cycle is not None and not self.cycle.response_complete:
            self._disarm()  # the headers are in: the request runs

    def handle_websocket_upgrade(self, event) -> None:  # type: ignore[no-untyped-def]
        """A WebSocket's headers are in: the socket (the Responses API's WebSocket mode) is no
        longer this protocol's, and no 408 may be written into it."""
        self._disarm()
        super().handle_websocket_upgrade(event)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout, self._headers_too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.cycle is not None and not self.cycle.response_complete:
            return
        message = f"the request headers did not arrive within {self.header_timeout:g} s"
        self.transport.write(_raw_response(408, "Request Timeout", message, "request_timeout"))
        self.transport.close()


def guarded_protocol(header_timeout: float, max_connections: int) -> type[GuardedH11Protocol]:
    """The protocol class uvicorn runs (``uvicorn.Config(http=...)``), with these bounds."""
    return type(
        "GuardedH11Protocol",
        (GuardedH11Protocol,),
        {"header_timeout": header_timeout, "max_connections": max_connections},
    )
