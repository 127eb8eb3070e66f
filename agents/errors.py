"""The SDK's exception tree: one base, an HTTP-status branch, transport failures.

AgentGateError
├── APIConnectionError          the server could not be reached (after retries)
│   └── APITimeoutError         connect/read/write/pool timeout
├── APIStatusError              an HTTP error status with OpenAI's error body
│   ├── BadRequestError         400 (and 413, 422)
│   ├── AuthenticationError     401
│   ├── PermissionDeniedError   403
│   ├── NotFoundError           404
│   ├── ConflictError           409
│   ├── RateLimitError          429 (retried first, honouring Retry-After)
│   ├── InternalServerError     500
│   └── ServiceUnavailableError 503 (retried first)
├── StreamError                 an error event inside an SSE stream (the status was already 200)
├── UnsupportedError            the server lacks a route or field this call needs
└── ToolError                   a tool could not be described or called (see agents.tools)
"""

from __future__ import annotations

from typing import Any


class AgentGateError(Exception):
    """Base of every error the SDK raises."""


class APIConnectionError(AgentGateError):
    pass


class APITimeoutError(APIConnectionError):
    pass


class APIStatusError(AgentGateError):
    """An HTTP error status. ``message``/``type``/``param``/``code`` come from OpenAI's error body."""

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        type: str | None = None,
        param: str | None = None,
        code: Any = None,
        headers: dict[str, str] | None = None,
        request_id: str | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(f"{status_code}: {message}")
        self.status_code = status_code
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}
        self.request_id = request_id
        self.attempts = attempts


class BadRequestError(APIStatusError):
    pass


class AuthenticationError(APIStatusError):
    pass


class PermissionDeniedError(APIStatusError):
    pass


class NotFoundError(APIStatusError):
    pass


class ConflictError(APIStatusError):
    pass


class RateLimitError(APIStatusError):
    pass


class InternalServerError(APIStatusError):
    pass


class ServiceUnavailableError(APIStatusError):
    pass


class StreamError(AgentGateError):
    """The server reported an error inside a stream it had started (OpenAI error body as an event)."""

    def __init__(self, message: str, *, type: str | None = None, code: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.type = type
        self.code = code


class UnsupportedError(AgentGateError):
    """The server does not offer what this call needs (an older or differently configured gateway)."""


class ToolError(AgentGateError):
    pass


_BY_STATUS: dict[int, type[APIStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: BadRequestError,
    422: BadRequestError,
    429: RateLimitError,
    500: InternalServerError,
    503: ServiceUnavailableError,
}


def status_error(
    status_code: int,
    body: Any,
    *,
    headers: dict[str, str] | None = None,
    request_id: str | None = None,
    attempts: int = 1,
) -> APIStatusError:
    """The exception for an error response (``body``: its decoded JSON, or its text)."""
    info = body.get("error") if isinstance(body, dict) else None
    if isinstance(info, dict):
        message = str(info.get("message") or "")
        kind, param, code = info.get("type"), info.get("param"), info.get("code")
    else:
        message = body if isinstance(body, str) and body else f"HTTP {status_code}"
        kind = param = code = None
    cls = _BY_STATUS.get(status_code)
    if cls is None:
        cls = InternalServerError if status_code >= 500 else APIStatusError
    return cls(
        status_code,
        message,
        type=kind,
        param=param,
        code=code,
        headers=headers,
        request_id=request_id,
        attempts=attempts,
    )
