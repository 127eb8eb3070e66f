"""Who is asking, for which session: one generation request's context.

:class:`~gateway.middleware.RequestContextMiddleware` builds it (the API
key's digest, rate limits checked, the ``X-Session-Id`` session opened) and
leaves it in the ASGI scope; the route reads it with :func:`context_of` and
hands it to :func:`~gateway.dispatch.dispatch`, which routes on its session
engine (affinity) and files the request under its key and session.

A leaf: it imports nothing of the gateway.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from starlette.types import Scope

ANONYMOUS = "anonymous"  # the key digest of a request without an API key


_secret = b""  # the key of key digests: use_digest_secret() sets it when a gateway is built


def key_digest(key: str | None) -> str:
    """An API key's keyed digest, HMAC-SHA256 under the gateway's digest secret (what Redis and
    the registry store; without the secret a digest cannot be brute-forced back to a weak key),
    or ``"anonymous"``."""
    return hmac.new(_secret, key.encode(), hashlib.sha256).hexdigest() if key else ANONYMOUS


def use_digest_secret(secret: str | None) -> None:
    """Key digests from now on use ``secret`` (``--key-digest-secret``), else this machine's own
    (:func:`machine_secret`), so every gateway of one deployment files a key under one digest."""
    global _secret
    _secret = (secret or machine_secret()).encode()


def machine_secret() -> str:
    """A random secret kept in the state directory (made once, mode 0600): shared by the gateways
    of one machine. Gateways on several machines need one ``--key-digest-secret``."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    path = Path(base) / "agentgate" / "key-digest-secret"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another gateway made it meanwhile
            return path.read_text().strip()
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        return path.read_text().strip()


@dataclass(frozen=True, slots=True)
class RequestContext:
    key: str = ANONYMOUS  # the API key's digest
    session_id: str | None = None
    engine: str | None = None  # the address of the engine the session is bound to; None: any
    program: str | None = None  # the Responses chain the request continues (its first response's id)


NO_CONTEXT = RequestContext()


def context_of(scope: Scope) -> RequestContext:
    """The request's context, as the middleware left it (none: an anonymous request without a session)."""
    return scope.get("state", {}).get("context", NO_CONTEXT)
