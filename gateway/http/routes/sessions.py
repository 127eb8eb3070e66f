"""Session, registry and rate-limit routes (shared state in Redis).

| route | who | what |
|---|---|---|
| ``GET /v1/sessions/{id}[?model=ADAPTER]`` | the owner or admin | the session, its messages and requests in flight |
| ``DELETE /v1/sessions/{id}[?model=ADAPTER]`` | the owner or admin | abort its requests (every replica), remove it |
| ``GET /v1/sessions?limit=&offset=`` | admin | sessions, most recently active first (no messages) |
| ``GET /v1/requests`` | admin | requests in flight on every replica (the registry) |
| ``GET /v1/replicas`` | admin | the live gateway replicas |
| ``GET /v1/rate_limits`` | any key | the caller's limits and what is left |

Each answers 503 (``redis_unavailable``) while Redis is unreachable, and 503
(``redis_not_configured``) on a gateway started without Redis. A session that
does not exist, or belongs to another key, is a 404. Session ids are the keys' own (filed under
the key, as request ids are): a key names its sessions by its ``X-Session-Id``; the admin names
any by the id the list shows. A request through a LoRA adapter keeps the adapter's own session of
its ``X-Session-Id`` (``docs/lora.md``); ``?model=ADAPTER`` names that one.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from agentgate.gateway.api_types.openai import encode
from agentgate.gateway.app_state import GatewayState
from agentgate.gateway.context import adapter_session
from agentgate.gateway.errors import BadRequestError, ServiceUnavailableError
from agentgate.gateway.http.forwarded import is_remote
from agentgate.gateway.http.middleware import bearer_token
from agentgate.gateway.state.key_digests import key_digest
from agentgate.gateway.state.sessions import owner_label

JSON = "application/json"


class RedisNotConfiguredError(ServiceUnavailableError):
    code = "redis_not_configured"


def _json(value: object) -> Response:
    return Response(encode(value), media_type=JSON)


def _shared(gw: GatewayState):
    if gw.shared is None or gw.sessions is None:
        raise RedisNotConfiguredError("this gateway runs without Redis, so it keeps no sessions or shared state")
    return gw.shared


def caller(request: Request) -> tuple[str, bool]:
    """(the caller's key digest, whether it is the admin key). An open server treats everyone as admin."""
    gw: GatewayState = request.state.gateway
    token = bearer_token(request.scope)
    return key_digest(token), gw.keys.for_caller(is_remote(request.scope)).is_admin(token)


def _require_admin(request: Request) -> None:
    """403 unless the caller is the admin (off loopback with no admin key: nobody, naming --admin-key)."""
    request.state.gateway.keys.for_caller(is_remote(request.scope)).require_admin(bearer_token(request.scope))


def _int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequestError(f"{name} must be an integer", param=name) from None
    if not low <= value <= high:
        raise BadRequestError(f"{name} must be in [{low}, {high}]", param=name)
    return value


async def _session(request: Request) -> tuple[str, str, str, bool]:
    """(the id the caller named, the session's filed id, the caller's key digest, admin)
    (:meth:`~gateway.state.sessions.SessionStore.resolve`); ``?model=ADAPTER`` names the session a
    LoRA adapter keeps under that id (`adapter_session`), and an unknown model is a 404 naming it."""
    gw: GatewayState = request.state.gateway
    _shared(gw)
    assert gw.sessions is not None
    key, admin = caller(request)
    given = request.path_params["session_id"]
    model = request.query_params.get("model")
    if model is not None:
        gw.model.check(model)  # 404 naming a model this gateway does not serve
        if model in gw.model.adapters:
            given = adapter_session(given, model)
    return given, await gw.sessions.resolve(given, key, admin), key, admin


async def get_session(request: Request) -> Response:
    gw: GatewayState = request.state.gateway
    given, filed, key, admin = await _session(request)
    return _json(await gw.sessions.get(filed, key, admin, shown=given))


async def delete_session(request: Request) -> Response:
    gw: GatewayState = request.state.gateway
    given, filed, key, admin = await _session(request)
    in_flight = await gw.sessions.delete(filed, key, admin, shown=given)
    aborted, _ = await gw.cluster.abort(session_id=filed)  # deleting the session needed Redis: it is up
    return _json(
        {
            "id": given,
            "object": "session.deleted",
            "deleted": True,
            "aborted": sorted(set(in_flight) | set(aborted)),
        }
    )


async def list_sessions(request: Request) -> Response:
    gw: GatewayState = request.state.gateway
    _shared(gw)
    _require_admin(request)
    limit = _int_param(request, "limit", 100, 1, 1000)
    offset = _int_param(request, "offset", 0, 0, 10**9)
    return _json({"object": "list", "data": await gw.sessions.list(limit, offset)})


async def list_requests(request: Request) -> Response:
    gw: GatewayState = request.state.gateway
    _shared(gw)
    _require_admin(request)
    entries: list[dict[str, Any]] = []
    for entry in await gw.registry.list():
        entries.append(
            {
                "id": entry["id"],
                "replica": entry.get("replica"),
                "engine": entry.get("engine"),
                "session": entry.get("session") or None,
                "owner": owner_label(entry.get("key", "anonymous")),
                "started": float(entry.get("started", 0)),
            }
        )
    entries.sort(key=lambda e: e["started"])
    return _json({"object": "list", "data": entries})


async def list_replicas(request: Request) -> Response:
    gw: GatewayState = request.state.gateway
    shared = _shared(gw)
    _require_admin(request)
    return _json(
        {
            "object": "list",
            "data": sorted(await shared.replicas(), key=lambda r: r.id),
        }
    )


async def rate_limits(request: Request) -> Response:
    gw: GatewayState = request.state.gateway
    _shared(gw)
    key, _ = caller(request)
    if gw.limiter is None:
        return _json(
            {
                "requests": {"limit_per_minute": None, "remaining": None},
                "tokens": {"limit_per_minute": None, "remaining": None},
            }
        )
    return _json(await gw.limiter.status(key))


routes = [
    Route("/v1/sessions", list_sessions, methods=["GET"]),
    Route("/v1/sessions/{session_id:path}", get_session, methods=["GET"]),
    Route("/v1/sessions/{session_id:path}", delete_session, methods=["DELETE"]),
    Route("/v1/requests", list_requests, methods=["GET"]),
    Route("/v1/replicas", list_replicas, methods=["GET"]),
    Route("/v1/rate_limits", rate_limits, methods=["GET"]),
]
