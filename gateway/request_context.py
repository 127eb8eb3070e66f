"""Who is asking, for which session: the shared-state side of a generation request.

:class:`RequestContextMiddleware` (pure ASGI, innermost) runs before the
chat and completion routes. For each ``POST /v1/chat/completions`` and
``POST /v1/completions`` it

1. takes the API key's digest (``"anonymous"`` without a key),
2. checks the key's rate limits (Redis, one script call; 429 + Retry-After),
3. opens the ``X-Session-Id`` session, if the request names one (Redis, one
   script call: created on first use, owner checked, affinity read; 403 for
   another key's session, 503 when Redis is down),

and leaves a :class:`RequestContext` in a context variable for the rest of
the request: the engine pool reads it to route the request (session
affinity) and to file it in the request registry; when the request ends,
the registry's listener records the session's turn and the key's tokens.
Requests without a session and without rate limits make no Redis call here.
"""

from __future__ import annotations

import hashlib
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentgate.gateway.auth import Role, bearer_token
from agentgate.gateway.errors import (
    BadRequestError,
    GatewayError,
    ServiceUnavailableError,
    error_response,
)
from agentgate.gateway.middleware import USABLE_ID

if TYPE_CHECKING:
    from agentgate.gateway.state import GatewayState

SESSION_HEADER = b"x-session-id"
GENERATION_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})
ANONYMOUS = "anonymous"


@dataclass(slots=True)
class RequestContext:
    key: str  # the API key's SHA-256 hex digest, or "anonymous"
    path: str = ""
    session_id: str | None = None
    engine: str | None = None  # the engine (address) the session is bound to, None: any
    body: list[bytes] | None = None  # the request body, kept for a session's messages


CURRENT: ContextVar[RequestContext | None] = ContextVar("agentgate_request_context", default=None)


def key_digest(key: str | None) -> str:
    return hashlib.sha256(key.encode()).hexdigest() if key else ANONYMOUS


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


class StateHolder:
    """Filled by the lifespan: the middleware exists before the state does."""

    state: GatewayState | None = None


class RequestContextMiddleware:
    def __init__(self, app: ASGIApp, holder: StateHolder) -> None:
        self.app = app
        self.holder = holder

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gw = self.holder.state
        if gw is None or scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in GENERATION_PATHS:
            await self.app(scope, receive, send)
            return
        token = bearer_token(scope)
        ctx = RequestContext(key_digest(token), scope["path"])
        try:
            session_id = session_id_of(scope)
            if gw.limiter is not None:
                await gw.limiter.admit(ctx.key)
            if session_id is not None:
                if gw.sessions is None:
                    raise ServiceUnavailableError(
                        "X-Session-Id needs Redis, and this gateway runs without it (start it with --redis-url, "
                        "or through `agentgate serve`, which embeds one)",
                        code="redis_not_configured",
                    )
                admin = gw.keys.role(token) is Role.ADMIN if gw.keys.enabled else True
                ctx.session_id = session_id
                ctx.engine = await gw.sessions.open(session_id, ctx.key, admin)
        except GatewayError as exc:
            await error_response(exc)(scope, receive, send)
            return
        if ctx.session_id is not None:
            receive = _keeping_body(receive, ctx)
        reset = CURRENT.set(ctx)
        try:
            await self.app(scope, receive, send)
        finally:
            CURRENT.reset(reset)


def _keeping_body(receive: Receive, ctx: RequestContext) -> Receive:
    """``receive`` that also keeps the body's chunks in ``ctx.body`` (parsed only when the request ends)."""
    ctx.body = []

    async def wrapped() -> Message:
        message = await receive()
        if message["type"] == "http.request":
            chunk = message.get("body", b"")
            if chunk:
                ctx.body.append(chunk)
        return message

    return wrapped
