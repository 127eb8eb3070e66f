"""Operational routes: pause/resume/abort (admin), health, metrics, version, OpenAPI.

Pause, resume and aborts apply to every replica through Redis (``gateway.state.cluster``):
pause or resume through any gateway reaches every engine; an abort reaches
the replica that holds the request. ``/abort_requests`` takes
``{"request_ids": [...], "session_id": "...", "api_key": "..."}`` (any of
them; none, or an empty list alone, aborts everything).
"""

from __future__ import annotations

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from agentgate.engine.front.protocol import PAUSE_MODES
from agentgate.gateway import package_version
from agentgate.gateway.api_types.openai import AbortRequestsRequest, AbortResponse, PauseResponse, decode_body, encode
from agentgate.gateway.app_state import GatewayState
from agentgate.gateway.engines.discovery import EngineDiscovery
from agentgate.gateway.errors import BadRequestError, NotFoundError, ServiceUnavailableError, redact_paths
from agentgate.gateway.http.openapi import openapi_json
from agentgate.gateway.observation.metrics import CONTENT_TYPE_LATEST
from agentgate.gateway.state.key_digests import key_digest

JSON = "application/json"


class _Status(msgspec.Struct):
    status: str  # ok or degraded
    engines: int
    redis: str  # up, down, or off (no Redis configured)
    replica: str
    engines_serving: int
    reasons: list[str]  # why degraded: each engine down (since when) and Redis
    max_wait: str  # --max-wait as set: auto or seconds
    max_wait_s: float | None  # the wait bound in force (the largest of the engines'); None: no engine answered


class _Version(msgspec.Struct):
    version: str


def _json(value: object) -> Response:
    return Response(encode(value), media_type=JSON)


async def pause(request: Request) -> Response:
    """Pause every engine. abort: end requests in flight; wait: let them finish
    (answers once they have); keep: freeze them in place. New requests wait."""
    gw: GatewayState = request.state.gateway
    mode = request.query_params.get("mode", "abort")
    if mode not in PAUSE_MODES:
        raise BadRequestError(f"mode must be one of {', '.join(PAUSE_MODES)}, got {mode!r}", param="mode")
    warning = await gw.cluster.pause(mode)
    return _json(PauseResponse(True, mode, warning))  # type: ignore[arg-type]


async def resume(request: Request) -> Response:
    gw: GatewayState = request.state.gateway
    return _json(PauseResponse(False, None, await gw.cluster.resume()))


async def is_paused(request: Request) -> Response:
    gw: GatewayState = request.state.gateway
    paused = await gw.pool.is_paused()
    return _json(PauseResponse(paused, (gw.cluster.mode or "abort") if paused else None))


async def abort_requests(request: Request) -> Response:
    """Abort by request id (X-Request-Id, or an engine id such as ``<id>-1``), by
    ``session_id`` or by ``api_key``, on whichever replica holds them; nothing named aborts all."""
    gw: GatewayState = request.state.gateway
    raw = await request.body()
    body = decode_body(raw, AbortRequestsRequest) if raw.strip() else AbortRequestsRequest()
    if not body.request_ids and body.session_id is None and body.api_key is None:
        return _json(AbortResponse([], True, await gw.cluster.abort_all()))
    key = key_digest(body.api_key) if body.api_key is not None else None
    aborted, warning = await gw.cluster.abort(body.request_ids, body.session_id, key)
    return _json(AbortResponse(aborted, False, warning))


async def delete_request(request: Request) -> Response:
    gw: GatewayState = request.state.gateway
    request_id = request.path_params["request_id"]
    aborted, warning = await gw.cluster.abort([request_id])
    if not aborted:
        raise NotFoundError(
            f"no request {request_id!r} is in flight",
            param="request_id",
            code="request_not_found",
        )
    return _json(AbortResponse(aborted, False, warning))


async def health(request: Request) -> Response:
    """``ok`` while every engine answers and Redis (if configured) is reachable; ``degraded``
    (``--health-degraded-status``, 200 by default) while some engine serves but another is down
    or Redis is unreachable, each reason listed; 503 when no engine serves, or fewer than the query's
    ``min_engines`` (a readiness probe's bar: this replica is ready while that many engines serve)."""
    gw: GatewayState = request.state.gateway
    wanted = _min_engines(request)
    serving, problems = await gw.pool.health()
    if isinstance(gw.supervisor, EngineDiscovery):
        problems += [f"the engine at {address} is refused: {why}" for address, why in gw.supervisor.refused.items()]
    problems = [redact_paths(problem) for problem in problems]  # /health is open: no server paths
    if serving == 0:
        raise ServiceUnavailableError("no engine is serving: " + "; ".join(problems), code="engine_dead")
    if serving < wanted:
        raise ServiceUnavailableError(
            f"{serving} engine(s) serving, {wanted} needed: " + "; ".join(problems), code="engine_dead"
        )
    redis = "off"
    if gw.shared is not None:
        redis = "up" if gw.shared.up and gw.shared.subscribed else "down"
        if redis == "down":
            problems.append("redis is unreachable: sessions answer 503 and operator calls reach this replica only")
    status, code = ("degraded", gw.settings.health_degraded_status) if problems else ("ok", 200)
    bounds = [s.max_wait_s for s in await gw.pool.refresh_stats() if s is not None]
    bound = max(bounds) if bounds else None
    body = _Status(
        status, len(gw.pool.engines), redis, gw.replica_id, gw.pool.num_live, problems, str(gw.settings.max_wait), bound
    )
    return Response(
        encode(body),
        code,
        media_type=JSON,
    )


def _min_engines(request: Request) -> int:
    raw = request.query_params.get("min_engines", "0")
    if not raw.isdigit() or int(raw) > 10**6:
        raise BadRequestError(f"min_engines must be an integer in [0, 1000000], got {raw!r}", param="min_engines")
    return int(raw)


async def metrics(request: Request) -> Response:
    gw: GatewayState = request.state.gateway
    await gw.pool.refresh_stats()
    return Response(gw.metrics.render(), media_type=CONTENT_TYPE_LATEST)


async def version_route(request: Request) -> Response:
    return _json(_Version(package_version()))


async def openapi(request: Request) -> Response:
    return Response(openapi_json(), media_type=JSON)


routes = [
    Route("/pause", pause, methods=["POST"]),
    Route("/resume", resume, methods=["POST"]),
    Route("/is_paused", is_paused, methods=["GET"]),
    Route("/abort_requests", abort_requests, methods=["POST"]),
    Route("/v1/requests/{request_id:path}", delete_request, methods=["DELETE"]),
    Route("/health", health, methods=["GET"]),
    Route("/metrics", metrics, methods=["GET"]),
    Route("/version", version_route, methods=["GET"]),
    Route("/openapi.json", openapi, methods=["GET"]),
]
