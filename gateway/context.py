"""Who is asking, for which session: one generation request's context.

:class:`~gateway.http.middleware.RequestContextMiddleware` builds it (the API
key's digest, rate limits checked, the ``X-Session-Id`` session opened) and
leaves it in the ASGI scope; the route reads it with
:func:`~gateway.http.middleware.context_of` and hands it down to dispatch,
which routes on its session engine (affinity) and files the request under its
key and session. The key's digest is made in :mod:`gateway.state.key_digests`.

A leaf: it imports nothing of the gateway.
"""

from __future__ import annotations

from dataclasses import dataclass

ANONYMOUS = "anonymous"  # the key digest of a request without an API key (gateway.key_digests)


@dataclass(frozen=True, slots=True)
class RequestContext:
    key: str = ANONYMOUS  # the API key's digest
    session_id: str | None = None
    engine: str | None = None  # the address of the engine the session is bound to; None: any
    program: str | None = None  # the Responses chain the request continues (its first response's id)


NO_CONTEXT = RequestContext()
