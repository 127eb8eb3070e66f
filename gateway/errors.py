"""The gateway's exception tree: plain exceptions, each with the status and the OpenAI
error fields it stands for, and what any exception becomes as an error body.

Every error body is OpenAI's: ``{"error": {"message", "type", "param",
"code"}}``. Engine errors map here too: InvalidRequestError -> 400 (with its
``param``), EngineDeadError -> 503, any other EngineError -> 500. Nothing here
knows HTTP: ``gateway.http.errors`` turns these into responses, in one place
(as Starlette keeps its exceptions apart from the middleware that answers them).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping

import msgspec

from agentgate.engine.errors import EngineDeadError, EngineError, InvalidRequestError

log = logging.getLogger("agentgate.gateway")


class ErrorInfo(msgspec.Struct):
    message: str
    type: str
    param: str | None = None
    code: str | int | None = None


class ErrorBody(msgspec.Struct):
    error: ErrorInfo


class GatewayError(Exception):
    """An error with its HTTP status and OpenAI error fields."""

    status_code = 500
    error_type = "internal_server_error"
    code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        self.headers = dict(headers or {})


class BadRequestError(GatewayError):
    status_code = 400
    error_type = "invalid_request_error"


class AuthenticationError(GatewayError):
    status_code = 401
    error_type = "authentication_error"
    code = "invalid_api_key"


class PermissionDeniedError(GatewayError):
    status_code = 403
    error_type = "permission_error"
    code = "admin_key_required"


class NotFoundError(GatewayError):
    status_code = 404
    error_type = "invalid_request_error"
    code = "not_found"


class ConflictError(GatewayError):
    status_code = 409
    error_type = "invalid_request_error"
    code = "conflict"


class PayloadTooLargeError(GatewayError):
    status_code = 413
    error_type = "invalid_request_error"
    code = "request_too_large"


class QueueFullError(GatewayError):
    status_code = 429
    error_type = "rate_limit_error"
    code = "queue_full"


class ServiceUnavailableError(GatewayError):
    status_code = 503
    error_type = "service_unavailable"
    code = "engine_unavailable"


class RequestTimeoutError(GatewayError):
    """A client too slow to be served: its headers or its body stalled (``gateway.http.slow_clients``)."""

    status_code = 408
    error_type = "invalid_request_error"
    code = "request_timeout"


_encoder = msgspec.json.Encoder()

# A source location inside a library's message ("/src/cpp/grammar.cc:123: ", "[12:00:01] "): the
# client gets what was wrong with its request, not where in our dependencies it was found.
_SOURCE_LOCATION = re.compile(
    r"\[\d{1,2}:\d{2}:\d{2}\]\s*|(?:[\w.+-]*/)+[\w.+-]+\.(?:cc|cpp|cxx|h|hpp|c|py)(?::\d+)*:?\s*"
)


def scrub(message: str) -> str:
    """``message`` without source paths and log timestamps (see ``_SOURCE_LOCATION``)."""
    return _SOURCE_LOCATION.sub("", message).strip()


# The directories of an absolute path on the server ("/srv/models/", the "/tmp/" of "ipc:///tmp/x.sock")
# where one starts a word or follows "scheme://"; not a URL's path, which follows its host.
_SERVER_DIRECTORIES = re.compile(
    r"(?:(?<=://)|(?<![\w.~:/#-]))/(?:[^\s/'\"`()<>\[\]]+/)+"
    r"(?=[^\s/'\"`()<>\[\]])"
)


def redact_paths(message: str) -> str:
    """``message`` (the engine's words: why it died, why a model did not load) with each absolute
    server path cut to its last part: ``/srv/models/m.gguf`` -> ``m.gguf``, ``ipc:///tmp/e.sock`` ->
    ``ipc://e.sock``. The full text stays in the server's log."""
    return _SERVER_DIRECTORIES.sub("", message)


def error_parts(exc: BaseException, request_id: str | None = None) -> tuple[int, ErrorInfo, dict[str, str]]:
    """(status, error fields, extra headers) for any exception. No internal detail reaches the
    body of a 5xx the gateway did not word itself: that is logged, under ``request_id``."""
    if isinstance(exc, GatewayError):
        return exc.status_code, ErrorInfo(exc.message, exc.error_type, exc.param, exc.code), exc.headers
    if isinstance(exc, InvalidRequestError):
        return 400, ErrorInfo(scrub(str(exc)), "invalid_request_error", exc.param, None), {}
    if isinstance(exc, EngineDeadError):
        return 503, ErrorInfo(redact_paths(str(exc)), "service_unavailable", None, "engine_dead"), {}
    where = f" (request id {request_id})" if request_id else ""
    if isinstance(exc, EngineError):
        log.error("engine error%s: %s", where, exc)
        return (
            500,
            ErrorInfo(f"the engine failed this request{where}", "internal_server_error", None, "engine_error"),
            {},
        )
    log.error("unhandled error%s", where, exc_info=exc)
    return 500, ErrorInfo(f"internal server error{where}", "internal_server_error", None, None), {}


def error_json(exc: BaseException, request_id: str | None = None) -> bytes:
    """The OpenAI error body of ``exc`` (for SSE streams, which cannot change status)."""
    return _encoder.encode(ErrorBody(error_parts(exc, request_id)[1]))
