"""API keys: ``Authorization: Bearer <key>`` (or ``x-api-key``, as Anthropic's clients send
it), checked as SHA-256 digests (``gateway.state.key_digests``); the middleware that reads them
from each request is :class:`gateway.http.middleware.AuthMiddleware`.

Route groups:

- open: ``/health``, ``/version``, ``/openapi.json``, and the web pages
  (``GET /``, ``/playground``, ``/static/...``: they hold no secret; the keys
  are typed into them and sent to the API like any client's);
- admin: ``/pause``, ``/resume``, ``/is_paused``, ``/abort_requests``,
  ``/dashboard/stats``, ``/v1/load_lora_adapter``, ``/v1/unload_lora_adapter`` and
  ``DELETE /v1/requests/{id}``: the admin key, required whenever any key is
  configured (with API keys but no admin key, nobody may call them);
- user: everything else (``/v1/*``, ``/tokenize``, ``/detokenize``): an API
  key or the admin key, when API keys are configured.

Off loopback (:mod:`gateway.command.exposure`: bound to ``0.0.0.0``, a LAN address...,
without ``--allow-unauthenticated-ops``) a server with no key does not leave
the operator routes open: the admin group, the dashboard page and the admin
session routes (``gateway.http.routes.sessions``) refuse everyone with 403 naming
``--admin-key``. On loopback they stay open, as before.

``/metrics`` is open on loopback and under ``--allow-unauthenticated-ops``
(Prometheus scrapers in a cluster are trusted and usually send no key); off
loopback otherwise it needs a key, an API key being enough (a scraper should
not hold the key that pauses the cluster), and refuses with 403 when no key is
configured. It carries no per-key series today, but it names the engines'
addresses (labels) and the load and traffic of the whole service, which are
not for whoever finds the port; and a per-key series added later stays private.

The presented key's digest is compared with every configured digest by
``secrets.compare_digest``, without stopping at a match, so the time taken
says nothing about which key matched or how much of one.
"""

from __future__ import annotations

import copy
import enum
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentgate.gateway.command.exposure import ops_exposed
from agentgate.gateway.errors import AuthenticationError, PermissionDeniedError
from agentgate.gateway.state.key_digests import check_digest

if TYPE_CHECKING:
    from agentgate.gateway.config.settings import Settings

OPEN_PATHS = frozenset({"/health", "/version", "/openapi.json", "/ping"})
METRICS_PATH = "/metrics"
PAGE_PATHS = frozenset({"/", "/playground"})
OPS_PAGE_PATHS = frozenset({"/dashboard"})
PAGE_PREFIX = "/static/"
ADMIN_PATHS = frozenset(
    {
        "/pause",
        "/resume",
        "/is_paused",
        "/abort_requests",
        "/dashboard/stats",
        "/v1/load_lora_adapter",
        "/v1/unload_lora_adapter",
    }
)
ADMIN_DELETE_PREFIX = "/v1/requests/"
CLOSED_OFF_LOOPBACK = (
    "{what} need{s} {key} on a server that listens beyond loopback, and none is configured: start it with "
    "{flags} (or, on a private network only, --allow-unauthenticated-ops)"
)


class Access(enum.Enum):
    OPEN = "open"
    USER = "user"
    ADMIN = "admin"
    OPS_PAGE = "ops_page"  # the dashboard page: open, unless the operator routes are closed to everyone off loopback
    METRICS = "metrics"  # open, unless off loopback: then any key


class Role(enum.IntEnum):
    NONE = 0
    USER = 1
    ADMIN = 2


def route_access(method: str, path: str) -> Access:
    if path in OPEN_PATHS:
        return Access.OPEN
    if path == METRICS_PATH:
        return Access.METRICS
    if method in ("GET", "HEAD") and path in OPS_PAGE_PATHS:
        return Access.OPS_PAGE
    if method in ("GET", "HEAD") and (path in PAGE_PATHS or path.startswith(PAGE_PREFIX)):
        return Access.OPEN
    if path in ADMIN_PATHS or (method == "DELETE" and path.startswith(ADMIN_DELETE_PREFIX)):
        return Access.ADMIN
    return Access.USER


class KeyChecker:
    """The configured keys, and what each route group needs. ``exposed``: the server listens off
    loopback without ``--allow-unauthenticated-ops`` (see the module doc)."""

    def __init__(
        self,
        api_keys: Sequence[str] = (),
        admin_key: str | None = None,
        *,
        exposed: bool = False,
        exposed_when_remote: bool | None = None,
    ) -> None:
        """``exposed_when_remote``: whether a caller found off loopback (behind a proxy:
        ``gateway.http.forwarded``) is guarded as on an exposed server (default: ``exposed``)."""
        self._user = [check_digest(k) for k in api_keys]
        self._admin = check_digest(admin_key) if admin_key is not None else None
        self.exposed = exposed
        self.when_remote = self
        if exposed_when_remote is not None and exposed_when_remote != exposed:
            self.when_remote = copy.copy(self)
            self.when_remote.exposed = exposed_when_remote

    @classmethod
    def from_settings(cls, settings: Settings) -> KeyChecker:
        return cls(
            settings.api_keys,
            settings.admin_key,
            exposed=ops_exposed(settings),
            exposed_when_remote=not settings.allow_unauthenticated_ops,
        )

    def for_caller(self, remote: bool) -> KeyChecker:
        """The checks for a caller on this machine, or off it (``gateway.http.forwarded.is_remote``)."""
        return self.when_remote if remote else self

    @property
    def enabled(self) -> bool:
        """Whether any route is guarded (else every caller may do everything)."""
        return bool(self._user) or self._admin is not None or self.exposed

    def role(self, presented: str | None) -> Role:
        digest = check_digest(presented or "")
        user = False
        for candidate in self._user:
            user |= secrets.compare_digest(digest, candidate)
        admin = self._admin is not None and secrets.compare_digest(digest, self._admin)
        if presented is None:
            return Role.NONE
        return Role.ADMIN if admin else Role.USER if user else Role.NONE

    def is_admin(self, presented: str | None) -> bool:
        """Whether ``presented`` may act as the admin: the admin key, or anyone on a server that guards
        nothing (no key, on loopback or under ``--allow-unauthenticated-ops``)."""
        return not self.enabled or self.role(presented) is Role.ADMIN

    def require_admin(self, presented: str | None) -> None:
        """PermissionDeniedError unless :meth:`is_admin` (for routes that check it themselves)."""
        if not self.is_admin(presented):
            raise PermissionDeniedError("this route needs the admin key" if self._admin else self._no_admin_key())

    def _no_admin_key(self) -> str:
        """Why the operator routes refuse everyone: no admin key is configured."""
        if self.exposed and not self._user:  # with API keys, --allow-unauthenticated-ops would not open them
            return CLOSED_OFF_LOOPBACK.format(
                what="operator routes", s="", key="the admin key", flags="--admin-key KEY"
            )
        return "operator routes need the admin key, and none is configured (start the server with --admin-key)"

    def check(self, access: Access, presented: str | None) -> None:
        """Raise AuthenticationError / PermissionDeniedError unless ``presented`` may use ``access``."""
        if access is Access.OPEN or not self.enabled:
            return
        if access is Access.OPS_PAGE:
            if self.exposed and self._admin is None:
                raise PermissionDeniedError(self._no_admin_key())
            return  # the page holds no secret: the admin key is typed into it
        if access is Access.USER and not self._user:
            return  # only an admin key is set: the user routes stay open
        if access is Access.METRICS:
            if not self.exposed:
                return
            if not self._user and self._admin is None:
                raise PermissionDeniedError(
                    CLOSED_OFF_LOOPBACK.format(
                        what="/metrics", s="s", key="a key", flags="--admin-key KEY or --api-key KEY"
                    ),
                    code="key_required",
                )
        role = self.role(presented)
        if access is Access.ADMIN:
            if self._admin is None:
                raise PermissionDeniedError(self._no_admin_key())
            if role is Role.ADMIN:
                return
            if role is Role.USER:
                raise PermissionDeniedError("this route needs the admin key; an API key is not enough")
        elif role is not Role.NONE:
            return
        if presented is None:
            raise AuthenticationError("missing API key: send it as 'Authorization: Bearer <key>'")
        raise AuthenticationError("invalid API key")
