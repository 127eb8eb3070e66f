"""Pure ASGI middleware (no BaseHTTPMiddleware: it would buffer and slow the streams).

- AuthMiddleware: the API keys (:class:`gateway.state.auth.KeyChecker` says which key each
  route group needs), read from ``Authorization: Bearer`` or ``x-api-key``.
- WebSocketOriginMiddleware: a WebSocket handshake whose ``Origin`` is not one of
  ``--allowed-origins`` gets 403 (CORS does not cover WebSockets: without it any page the
  user opens could drive the server over ``ws://127.0.0.1``); a handshake without ``Origin``
  (a program, not a browser) passes, as a plain HTTP request does.
- RequestIdMiddleware: every response carries ``X-Request-Id``: the client's
  (if it sent a usable one) or a fresh one. Routes read it from
  ``request.state.request_id``; it is the base of the engine request ids.
  An exception no handler took becomes a 500 with an OpenAI body here.
- BodyLimitMiddleware: a body larger than the limit gets 413, from its
  Content-Length before anything is read, else while it is read; a body that
  stalls longer than its timeout between two chunks gets 408.
- RequestContextMiddleware (innermost), for the generation routes
  (``GENERATION_PATHS``; the Responses WebSocket mode calls its
  :func:`request_context` for each turn): reads the request's headers into a
  :class:`~gateway.context.RequestContext` left in the scope for the route
  (:func:`context_of`): the API key's digest (``"anonymous"`` without a key), whether
  it is the admin's, the ``X-Session-Id`` it names (400 for an unusable one). It makes no
  Redis call: the request is admitted in one place, by dispatch (``gateway.dispatch``:
  the key's rate limit charged, 429 + Retry-After; the session opened and bound).

Each gets its collaborators when the app is built, as Starlette's
``AuthenticationMiddleware`` gets its backend.
"""

from __future__ import annotations

import re
import uuid

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket

from agentgate.gateway.context import NO_CONTEXT, RequestContext, filed_id
from agentgate.gateway.errors import (
    BadRequestError,
    GatewayError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RequestTimeoutError,
)
from agentgate.gateway.http.errors import error_response
from agentgate.gateway.http.forwarded import is_remote
from agentgate.gateway.state.auth import KeyChecker, route_access
from agentgate.gateway.state.key_digests import key_digest

REQUEST_ID_HEADER = b"x-request-id"
SESSION_HEADER = b"x-session-id"
USABLE_ID = re.compile(rb"[!-~]{1,128}")  # printable ASCII, no spaces: request and session ids
GENERATION_PATHS = frozenset(
    {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/responses/compact", "/v1/messages"}
)


def request_id_of(scope: Scope) -> str:
    return scope["state"]["request_id"]


def context_of(scope: Scope) -> RequestContext:
    """The request's context, as the middleware left it (none: an anonymous request without a session)."""
    return scope.get("state", {}).get("context", NO_CONTEXT)


def bearer_token(scope: Scope) -> str | None:
    """The presented key: ``Authorization: Bearer <key>``, or Anthropic's ``x-api-key: <key>``."""
    api_key = None
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
        if name == b"x-api-key":
            api_key = value.decode("latin-1").strip()
    return api_key


class AuthMiddleware:
    """Pure ASGI: no wrapping of the stream, so streamed responses pay nothing. A WebSocket
    (the Responses API's WebSocket mode) is checked at its handshake, as a GET of its path: a
    refused one gets the same HTTP error response (or, where the server cannot send one, is
    closed with 1008, policy violation)."""

    def __init__(self, app: ASGIApp, keys: KeyChecker) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        keys = self.keys.for_caller(is_remote(scope))
        if scope["type"] in ("http", "websocket") and keys.enabled:
            try:
                keys.check(route_access(scope.get("method", "GET"), scope["path"]), bearer_token(scope))
            except GatewayError as exc:
                if exc.status_code == 401:
                    exc.headers.setdefault("WWW-Authenticate", "Bearer")
                if scope["type"] == "websocket":
                    await _refuse_websocket(scope, receive, send, exc)
                else:
                    await error_response(exc)(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _refuse_websocket(scope: Scope, receive: Receive, send: Send, exc: GatewayError) -> None:
    websocket = WebSocket(scope, receive, send)
    if "websocket.http.response" in scope.get("extensions", {}):
        await websocket.send_denial_response(error_response(exc))
    else:
        await websocket.close(code=1008, reason=exc.message[:120])


class WebSocketOriginMiddleware:
    """See the module doc. ``allowed``: ``--allowed-origins`` (``*``: every origin)."""

    def __init__(self, app: ASGIApp, allowed: tuple[str, ...]) -> None:
        self.app = app
        self.allowed = frozenset(origin.rstrip("/") for origin in allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            origin = next((value.decode("latin-1") for name, value in scope["headers"] if name == b"origin"), None)
            if origin is not None and "*" not in self.allowed and origin.rstrip("/") not in self.allowed:
                refused = PermissionDeniedError(
                    f"WebSocket connections from origin {origin!r} are not allowed: the server takes those "
                    "of --allowed-origins only",
                    code="origin_not_allowed",
                )
                await _refuse_websocket(scope, receive, send, refused)
                return
        await self.app(scope, receive, send)


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
            await error_response(exc, raw.decode())(scope, receive, send_with_id)


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int, timeout: float = 30.0) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout = timeout  # seconds the body may stall between two chunks (408)

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
        body_done = False

        async def limited_receive() -> Message:
            nonlocal received, body_done
            if body_done:  # waiting for a disconnect: no clock
                return await receive()
            message = None
            with anyio.move_on_after(self.timeout):
                message = await receive()
            if message is None:
                raise RequestTimeoutError(f"the request body stalled for {self.timeout:g} s")
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise self._error(received)
                body_done = not message.get("more_body", False)
            return message

        await self.app(scope, limited_receive, send)

    def _error(self, size: int) -> PayloadTooLargeError:
        return PayloadTooLargeError(f"the request body is larger than this server accepts ({self.max_bytes} bytes)")


def session_id_of(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == SESSION_HEADER:
            if not USABLE_ID.fullmatch(value):
                raise BadRequestError(
                    "X-Session-Id must be 1-128 printable ASCII characters without spaces",
                    param="X-Session-Id",
                    code="invalid_session_id",
                )
            return value.decode()
    return None


class RequestContextMiddleware:
    def __init__(self, app: ASGIApp, *, keys: KeyChecker) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in GENERATION_PATHS:
            await self.app(scope, receive, send)
            return
        try:
            context = request_context(scope, self.keys)
        except GatewayError as exc:
            await error_response(exc)(scope, receive, send)
            return
        scope.setdefault("state", {})["context"] = context
        await self.app(scope, receive, send)


def request_context(scope: Scope, keys: KeyChecker) -> RequestContext:
    """One generation's context from its scope's headers (the middleware's, and each turn of a
    Responses WebSocket: every ``response.create`` is admitted like a POST, by dispatch)."""
    token = bearer_token(scope)
    session_id = session_id_of(scope)
    admin = session_id is not None and keys.for_caller(is_remote(scope)).is_admin(token)
    key = key_digest(token)
    # filed under the key, as request ids are: the same X-Session-Id from two keys is two sessions
    return RequestContext(key, filed_id(key, session_id) if session_id is not None else None, admin=admin)
