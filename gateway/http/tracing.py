"""The ASGI side of tracing (``gateway.observation.tracing``): a span around each generation request,
its trace id in the ``x-trace-id`` response header, and on uvicorn's access log line.

Pure ASGI, as the other middleware: the span opens when the request arrives (continuing its
``traceparent``) and ends when the response has been sent, its last streamed event included.
Only generation routes are traced (probes and scrapes of /health and /metrics would drown
them); the Responses API's WebSocket mode is not.
"""

from __future__ import annotations

import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentgate.gateway.http.middleware import GENERATION_PATHS
from agentgate.gateway.observation.log_context import noted_adapter
from agentgate.gateway.observation.tracing import TRACE_ID_HEADER, Tracer, current_span

_HEADER = TRACE_ID_HEADER.encode()


class TracingMiddleware:
    def __init__(self, app: ASGIApp, tracer: Tracer) -> None:
        self.app = app
        self.tracer = tracer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in GENERATION_PATHS:
            await self.app(scope, receive, send)
            return
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
        path = scope["path"]
        with self.tracer.request(headers, path, {"http.request.method": scope["method"], "http.route": path}) as span:
            trace_id = span.trace_id.encode()

            async def send_with_trace_id(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status = message["status"]
                    span.set_attributes({"http.response.status_code": status})
                    if status >= 400:
                        span.failed(str(status), server_error=status >= 500)
                    message = {**message, "headers": [*message.get("headers", ()), (_HEADER, trace_id)]}
                await send(message)

            await self.app(scope, receive, send_with_trace_id)


class AccessLogFilter(logging.Filter):
    """Gives a log record ``trace_id``: `` trace_id=<32 hex digits>`` when written while a traced
    request runs (uvicorn writes its access line as the response starts), else empty; and ``lora``:
    `` lora=NAME`` when that request runs through a LoRA adapter (``gateway.observation.log_context``),
    else empty. The access line's format ends with them (``gateway.http.server``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        span = current_span()
        record.trace_id = f" trace_id={span.trace_id}" if span is not None else ""
        adapter = noted_adapter()
        record.lora = f" lora={adapter}" if adapter else ""
        return True
