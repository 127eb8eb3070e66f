"""The one place exceptions become HTTP responses: the Starlette exception handlers, the
router's own 404 and 405 with a hint of what this server serves, and the response of any
exception (``gateway.errors`` holds the plain exceptions and their OpenAI fields).
"""

from __future__ import annotations

import difflib

import msgspec
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match

from agentgate.engine.errors import EngineError
from agentgate.gateway.errors import ErrorBody, GatewayError, NotFoundError, error_parts

_HTTP_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}


def _from_http(exc: HTTPException) -> GatewayError:
    """Starlette's HTTPException (the router's, a body it could not read) as the gateway's error:
    its detail for the message, its status for the code."""
    status = exc.status_code
    error = GatewayError(exc.detail, headers=exc.headers)
    error.status_code, error.error_type, error.code = status, _HTTP_TYPES.get(status, "api_error"), status
    return error


def error_response(exc: BaseException, request_id: str | None = None) -> Response:
    """The response of any exception: its status, OpenAI error body and headers."""
    if isinstance(exc, HTTPException):
        exc = _from_http(exc)
    status, info, headers = error_parts(exc, request_id)
    return Response(msgspec.json.encode(ErrorBody(info)), status, headers=headers, media_type="application/json")


async def handle_exception(request: Request, exc: Exception) -> Response:
    """Starlette exception handler for every exception type the gateway maps; the router's
    own 404 and 405 name the method and path, and what this server serves instead."""
    if type(exc) is HTTPException and exc.status_code in (404, 405):
        exc = _route_error(request, exc)
    return error_response(exc, request.scope.get("state", {}).get("request_id"))


def _route_error(request: Request, exc: HTTPException) -> GatewayError:
    method, path = request.method, request.url.path
    served: dict[str, set[str]] = {}
    takes: set[str] = set()  # the methods of every route whose path matches this one
    for route in request.app.routes:
        if getattr(route, "methods", None):
            served.setdefault(route.path, set()).update(route.methods - {"HEAD"})
            if route.matches(request.scope)[0] is not Match.NONE:
                takes |= route.methods - {"HEAD"}
    if exc.status_code == 405:
        allowed = " or ".join(sorted(takes))
        error = GatewayError(f"{method} {path} is not supported; {path} takes {allowed}", code="method_not_allowed")
        error.status_code, error.error_type, error.headers = 405, "invalid_request_error", dict(exc.headers or {})
        return error
    nearest = difflib.get_close_matches(path, list(served), n=1, cutoff=0.5)
    hint = f"; did you mean {'/'.join(sorted(served[nearest[0]]))} {nearest[0]}?" if nearest else ""
    return NotFoundError(f"no route {method} {path} on this server{hint}", code="unknown_route")


EXCEPTION_HANDLERS = {
    GatewayError: handle_exception,
    EngineError: handle_exception,
    HTTPException: handle_exception,
}
