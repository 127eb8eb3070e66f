"""Pure ASGI middleware (no BaseHTTPMiddleware: it would buffer and slow the streams).

- RequestIdMiddleware: every response carries ``X-Request-Id``: the client's
  (if it sent a usable one) or a fresh one. Routes read it from
  ``request.state.request_id``; it is the base of the engine request ids.
  An exception no handler took becomes a 500 with an OpenAI body here.
- BodyLimitMiddleware: a body larger than the limit gets 413, from its
  Content-Length before anything is read, else while it is read.
"""

from __future__ import annotations

import re
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentgate.gateway.errors import PayloadTooLargeError, error_response

REQUEST_ID_HEADER = b"x-request-id"
USABLE_ID = re.compile(rb"[!-~]{1,128}")  # printable ASCII, no spaces: request and session ids


def request_id_of(scope: Scope) -> str:
    return scope["state"]["request_id"]


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw = None
        for name, value in scope["headers"]:
            if name == REQUEST_ID_HEADER:
                raw = value if USABLE_ID.fullmatch(value) else None
                break
        if raw is None:
            raw = uuid.uuid4().hex.encode()
        scope.setdefault("state", {})["request_id"] = raw.decode()
        header = (REQUEST_ID_HEADER, raw)
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception as exc:
            if started:
                raise
            # A last resort for bugs: the client still gets an OpenAI body and its request id.
            await error_response(exc)(scope, receive, send_with_id)


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes
        for name, value in scope["headers"]:
            if name == b"content-length":
                if value.isdigit() and int(value) > limit:
                    await error_response(self._error(int(value)))(scope, receive, send)
                    return
                break
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise self._error(received)
            return message

        await self.app(scope, limited_receive, send)

    def _error(self, size: int) -> PayloadTooLargeError:
        return PayloadTooLargeError(f"the request body is larger than this server accepts ({self.max_bytes} bytes)")
