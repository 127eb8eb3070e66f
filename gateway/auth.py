"""API keys: ``Authorization: Bearer <key>`` (or ``x-api-key``, as Anthropic's clients send
it), checked as SHA-256 digests.

Route groups:

- open: ``/health``, ``/metrics``, ``/version``, ``/openapi.json``, and the
  web pages (``GET /``, ``/playground``, ``/dashboard``, ``/static/...``: they
  hold no secret; the keys are typed into them and sent to the API like any
  client's);
- admin: ``/pause``, ``/resume``, ``/is_paused``, ``/abort_requests``,
  ``/dashboard/stats`` and ``DELETE /v1/requests/{id}``: the admin key, required whenever any key is
  configured (with API keys but no admin key, nobody may call them);
- user: everything else (``/v1/*``, ``/tokenize``, ``/detokenize``): an API
  key or the admin key, when API keys are configured.

The presented key's digest is compared with every configured digest by
``secrets.compare_digest``, without stopping at a match, so the time taken
says nothing about which key matched or how much of one.
"""

from __future__ import annotations

import enum
import hashlib
import secrets
from collections.abc import Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

from agentgate.gateway.errors import AuthenticationError, GatewayError, PermissionDeniedError, error_response

OPEN_PATHS = frozenset({"/health", "/metrics", "/version", "/openapi.json", "/ping"})
PAGE_PATHS = frozenset({"/", "/playground", "/dashboard"})
PAGE_PREFIX = "/static/"
ADMIN_PATHS = frozenset({"/pause", "/resume", "/is_paused", "/abort_requests", "/dashboard/stats"})
ADMIN_DELETE_PREFIX = "/v1/requests/"


class Access(enum.Enum):
    OPEN = "open"
    USER = "user"
    ADMIN = "admin"


class Role(enum.IntEnum):
    NONE = 0
    USER = 1
    ADMIN = 2


def route_access(method: str, path: str) -> Access:
    if path in OPEN_PATHS:
        return Access.OPEN
    if method in ("GET", "HEAD") and (path in PAGE_PATHS or path.startswith(PAGE_PREFIX)):
        return Access.OPEN
    if path in ADMIN_PATHS or (method == "DELETE" and path.startswith(ADMIN_DELETE_PREFIX)):
        return Access.ADMIN
    return Access.USER


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


class KeyChecker:
    def __init__(self, api_keys: Sequence[str] = (), admin_key: str | None = None) -> None:
        self._user = [_digest(k) for k in api_keys]
        self._admin = _digest(admin_key) if admin_key is not None else None

    @property
    def enabled(self) -> bool:
        return bool(self._user) or self._admin is not None

    def role(self, presented: str | None) -> Role:
        digest = _digest(presented or "")
        user = False
        for candidate in self._user:
            user |= secrets.compare_digest(digest, candidate)
        admin = self._admin is not None and secrets.compare_digest(digest, self._admin)
        if presented is None:
            return Role.NONE
        return Role.ADMIN if admin else Role.USER if user else Role.NONE

    def check(self, access: Access, presented: str | None) -> None:
        """Raise AuthenticationError / PermissionDeniedError unless ``presented`` may use ``access``."""
        if access is Access.OPEN or not self.enabled:
            return
        if access is Access.USER and not self._user:
            return  # only an admin key is set: the user routes stay open
        role = self.role(presented)
        if access is Access.ADMIN:
            if self._admin is None:
                raise PermissionDeniedError(
                    "operator routes need the admin key, and none is configured (start the server with --admin-key)"
                )
            if role is Role.ADMIN:
                return
            if role is Role.USER:
                raise PermissionDeniedError("this route needs the admin key; an API key is not enough")
        elif role is not Role.NONE:
            return
        if presented is None:
            raise AuthenticationError("missing API key: send it as 'Authorization: Bearer <key>'")
        raise AuthenticationError("invalid API key")


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
    """Pure ASGI: no wrapping of the stream, so streamed responses pay nothing."""

    def __init__(self, app: ASGIApp, keys: KeyChecker) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.keys.enabled:
            try:
                self.keys.check(route_access(scope["method"], scope["path"]), bearer_token(scope))
            except GatewayError as exc:
                if exc.status_code == 401:
                    exc.headers.setdefault("WWW-Authenticate", "Bearer")
                await error_response(exc)(scope, receive, send)
                return
        await self.app(scope, receive, send)
