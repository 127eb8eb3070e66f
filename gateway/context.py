"""Who is asking, for which session: one generation request's context.

:class:`~gateway.http.middleware.RequestContextMiddleware` builds it from the
request's headers alone (the API key's digest, whether that key is the admin's, the
``X-Session-Id`` it names) and leaves it in the ASGI scope; the route reads it with
:func:`~gateway.http.middleware.context_of` and hands it down to dispatch, which
admits the request in one place (the key's rate limit charged, the session opened,
then bound: ``gateway.dispatch``), routes on the session's engine (affinity) and
files the request under its key and session. The key's digest is made in
:mod:`gateway.state.key_digests`.

A leaf: it imports nothing of the gateway.
"""

from __future__ import annotations

from dataclasses import dataclass

ANONYMOUS = "anonymous"  # the key digest of a request without an API key (gateway.key_digests)


@dataclass(frozen=True, slots=True)
class RequestContext:
    key: str = ANONYMOUS  # the API key's digest
    session_id: str | None = None  # X-Session-Id, filed under the key (filed_id): two keys' same id are two sessions
    # The engine to run on when it can (affinity; None: any): a Responses chain's, then, once
    # admitted, the session's engine before it.
    engine: str | None = None
    program: str | None = None  # the Responses chain the request continues (its first response's id)
    admin: bool = False  # the key may act as the admin (its X-Session-Id names its own session, as any key's)
    # Dispatch charged the request's rate limit and opened its session: a later round of the same
    # request (a server-run tool loop's next reply) runs in this context and is not charged again.
    admitted: bool = False


NO_CONTEXT = RequestContext()


def filed_id(key: str, request_id: str) -> str:
    """The id a client's request id (``X-Request-Id``) is filed under inside the server (the request
    registry, Redis, the engine): its key's, so the same id from two keys is two requests, and no
    key can reach, or learn of, another's request by its id. Operators address requests by these ids
    (``GET /v1/requests`` lists them)."""
    return f"{key[:16]}.{request_id}"


def adapter_session(session_id: str, adapter: str | None) -> str:
    """The session a request through the LoRA adapter ``adapter`` keeps under ``session_id`` (a filed or
    a client's id): its own, apart from the base model's and other adapters' sessions of that id (its
    record, conversation and engine affinity), as its programs and KV are. A space joins them, and no
    ``X-Session-Id`` holds one, so no session a client names is an adapter's by accident."""
    return f"{session_id} lora:{adapter}" if adapter else session_id


def client_id(filed: str) -> str:
    """The client's own id of a :func:`filed_id` (or of an engine request id made from one)."""
    return filed.split(".", 1)[1] if "." in filed else filed
