"""Operational routes: pause/resume/abort (admin), health, metrics, version, OpenAPI."""

from __future__ import annotations

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway import package_version
from gateway.errors import BadRequestError, NotFoundError, ServiceUnavailableError
from gateway.metrics import CONTENT_TYPE_LATEST
from gateway.openapi import openapi_json
from gateway.schemas import AbortRequestsRequest, AbortResponse, PauseResponse, decode_body, encode
from gateway.state import GatewayState

JSON = "application/json"
PAUSE_MODES = ("abort", "wait", "keep")


class _Status(msgspec.Struct):
    status: str
    engines: int


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
    await gw.pool.pause(mode)
    return _json(PauseResponse(True, mode))  # type: ignore[arg-type]


async def resume(request: Request) -> Response:
    gw: GatewayState = request.state.gateway
    await gw.pool.resume()
    return _json(PauseResponse(False))


async def is_paused(request: Request) -> Response:
    gw: GatewayState = request.state.gateway
    return _json(PauseResponse(await gw.pool.is_paused()))


async def abort_requests(request: Request) -> Response:
    """Abort by request id (X-Request-Id, or an engine id such as ``<id>-1``); an empty list aborts all."""
    gw: GatewayState = request.state.gateway
    raw = await request.body()
    body = decode_body(raw, AbortRequestsRequest) if raw.strip() else AbortRequestsRequest()
    if not body.request_ids:
        await gw.pool.abort_all()
        return _json(AbortResponse([], all=True))
    return _json(AbortResponse(await gw.pool.abort(body.request_ids)))


async def delete_request(request: Request) -> Response:
    gw: GatewayState = request.state.gateway
    request_id = request.path_params["request_id"]
    if not await gw.pool.abort([request_id]):
        raise NotFoundError(f"no request {request_id!r} is in flight", param="request_id", code="request_not_found")
    return _json(AbortResponse([request_id]))


async def health(request: Request) -> Response:
    gw: GatewayState = request.state.gateway
    problems = await gw.pool.health()
    if problems:
        raise ServiceUnavailableError("; ".join(problems), code="engine_dead")
    return _json(_Status("ok", len(gw.pool.engines)))


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
