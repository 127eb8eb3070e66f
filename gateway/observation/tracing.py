"""OpenTelemetry traces of generation requests: optional (``pip install 'agentgate[otel]'``),
off unless an OTLP traces endpoint is given (:func:`traces_endpoint`).

Each generation request (``/v1/chat/completions``, ``/v1/completions``, ``/v1/responses``,
``/v1/messages``) is one span, kind SERVER, continuing the trace of an incoming W3C
``traceparent`` header, named and attributed after the OpenTelemetry GenAI semantic
conventions (``{gen_ai.operation.name} {gen_ai.request.model}``; ``gen_ai.provider.name``,
``gen_ai.request.*``, ``gen_ai.usage.input_tokens`` / ``output_tokens``,
``gen_ai.response.finish_reasons``; each tool call the reply made is an event
``gen_ai.tool.call`` with ``gen_ai.tool.name``). Its children:

- ``queue``, ``prefill`` and ``decode`` for each engine request, from the durations the
  engine sends with its last output (``engine.front.protocol.RequestTimings``: no extra round
  trip, no clock compared across hosts), placed back to back ending when the gateway got
  that output;
- one span per Redis call the request makes (``SharedState.guard``: a session opened, a
  program's last turn read).

The span's trace id goes back in the ``x-trace-id`` response header and onto the access
log line (``gateway.http.tracing``, the ASGI side). Only this module imports OpenTelemetry,
and only when tracing is on, so the gateway runs without the extra.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span

    from agentgate.engine.front.protocol import RequestTimings
    from agentgate.engine.sampling_params import SamplingParams

TRACE_ID_HEADER = "x-trace-id"
PROVIDER = "agentgate"  # gen_ai.provider.name: the server's own telemetry, not one vendor's API
# gen_ai.operation.name of each traced route (the Responses and Messages APIs are chats).
OPERATIONS = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "text_completion",
    "/v1/responses": "chat",
    "/v1/responses/compact": "chat",
    "/v1/messages": "chat",
}


class TracingUnavailableError(ValueError):
    """Tracing was asked for, but the ``otel`` extra is not installed (a start-up error)."""


def check_tracing(endpoint: str | None) -> None:
    """TracingUnavailableError when tracing to ``endpoint`` is asked for and cannot be done."""
    if endpoint is None:
        return
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter  # noqa: F401
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError as exc:
        raise TracingUnavailableError(
            f"tracing to {endpoint} was asked for (--otlp-traces-endpoint or OTEL_EXPORTER_OTLP_*), but "
            f"OpenTelemetry is not installed ({exc.name} is missing): pip install 'agentgate[otel]', or unset it"
        ) from None


def traces_endpoint(flag: str | None, environ: Mapping[str, str] = os.environ) -> str | None:
    """The OTLP/HTTP traces URL: ``--otlp-traces-endpoint``, else the standard
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (as it is), else ``OTEL_EXPORTER_OTLP_ENDPOINT``
    plus ``/v1/traces`` (as the OTLP exporter specification says); None: tracing is off."""
    if flag:
        return flag
    if environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
    base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return base.rstrip("/") + "/v1/traces" if base else None


# The span of the request the code runs for; None when tracing is off (or outside a request).
REQUEST_SPAN: ContextVar[RequestSpan | None] = ContextVar("agentgate_request_span", default=None)


def current_span() -> RequestSpan | None:
    """The span of the request this code runs for; None when tracing is off (or outside a request)."""
    return REQUEST_SPAN.get()


class Tracer:
    """The gateway's tracer: its own provider (not the global one)."""

    def __init__(self, provider: TracerProvider) -> None:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._provider = provider
        self.tracer = provider.get_tracer("agentgate.gateway")
        self._propagator = TraceContextTextMapPropagator()

    @classmethod
    def to_endpoint(cls, endpoint: str) -> Tracer:
        """Spans to the OTLP/HTTP receiver at ``endpoint`` (TracingUnavailableError without the extra)."""
        check_tracing(endpoint)
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return cls.to_exporter(OTLPSpanExporter(endpoint=endpoint), batch=True)

    @classmethod
    def to_exporter(cls, exporter: SpanExporter, *, batch: bool = False) -> Tracer:
        """Spans to ``exporter``: in batches from a background thread, or each as it ends (tests)."""
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        resource = Resource.create()  # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, when set
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": "agentgate"}))
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter))
        return cls(provider)

    @contextmanager
    def request(self, headers: Mapping[str, str], path: str, attributes: Mapping[str, Any]) -> Iterator[RequestSpan]:
        """The span of one request to ``path`` (continuing ``headers``' ``traceparent``; the
        HTTP edge's ``attributes``), current in the block."""
        from opentelemetry.trace import SpanKind

        operation = OPERATIONS.get(path, "chat")
        attributes = {"gen_ai.operation.name": operation, "gen_ai.provider.name": PROVIDER, **attributes}
        with self.tracer.start_as_current_span(
            operation, context=self._propagator.extract(headers), kind=SpanKind.SERVER, attributes=attributes
        ) as span:
            request_span = RequestSpan(self.tracer, span, operation)
            token = REQUEST_SPAN.set(request_span)
            try:
                yield request_span
            finally:
                REQUEST_SPAN.reset(token)
                request_span.open = False

    def shutdown(self) -> None:
        """Export what is left and stop (the lifespan's end)."""
        self._provider.shutdown()


class RequestSpan:
    """One request's span, as the gateway's plain code fills it in."""

    def __init__(self, tracer: Any, span: Span, operation: str) -> None:
        self.tracer = tracer
        self.span = span
        self.operation = operation
        self.open = True  # False once the HTTP response ended: a background reply adds nothing more

    @property
    def trace_id(self) -> str:
        return format(self.span.get_span_context().trace_id, "032x")

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        self.span.set_attributes(attributes)

    def failed(self, error_type: str, *, server_error: bool) -> None:
        """The request failed: ``error.type`` (an HTTP status); the span's status is an error
        when the server is at fault (a client's bad request is not the server's error)."""
        self.span.set_attribute("error.type", error_type)
        if server_error:
            from opentelemetry.trace import Status, StatusCode

            self.span.set_status(Status(StatusCode.ERROR))

    @contextmanager
    def child(self, name: str, attributes: Mapping[str, Any]) -> Iterator[None]:
        """A child span around the block (a Redis call)."""
        with self.tracer.start_as_current_span(name, attributes=attributes):
            yield

    def requested(self, model: str, params: SamplingParams, choices: int) -> None:
        """The request as the engine got it: the model it named (one of the served names) and its
        sampling parameters; no text the client wrote (stop sequences, messages): a span holds
        numbers and names only, so the exporter's queue of spans is bounded in bytes too."""
        self.span.update_name(f"{self.operation} {model}")
        attributes: dict[str, Any] = {"gen_ai.request.model": model, "gen_ai.response.model": model}
        for name, value in (
            ("max_tokens", params.max_tokens),
            ("temperature", params.temperature),
            ("top_p", params.top_p),
            ("top_k", params.top_k or None),
            ("seed", params.seed),
            ("frequency_penalty", params.frequency_penalty or None),
            ("presence_penalty", params.presence_penalty or None),
        ):
            if value is not None:
                attributes[f"gen_ai.request.{name}"] = value
        if choices != 1:
            attributes["gen_ai.request.choice.count"] = choices
        self.span.set_attributes(attributes)

    def ended(
        self,
        usage: tuple[int, int],
        finish_reasons: Sequence[str],
        tool_calls: Sequence[str],
        phases: Sequence[tuple[str, RequestTimings, float]],
    ) -> None:
        """The generation ended: its (input, output) tokens, each choice's finish reason, the
        tools its first reply called (by name), and each engine request's id and timings with
        the ``time.monotonic()`` at which the gateway got its last output."""
        if not self.open:
            return
        span = self.span
        span.set_attributes(
            {
                "gen_ai.usage.input_tokens": usage[0],
                "gen_ai.usage.output_tokens": usage[1],
                "gen_ai.response.finish_reasons": list(finish_reasons),
            }
        )
        for name in tool_calls:
            span.add_event("gen_ai.tool.call", {"gen_ai.tool.name": name})
        epoch_offset = time.time_ns() - time.monotonic_ns()
        for request_id, timings, ended_at in phases:
            self._phases(request_id, timings, int(ended_at * 1e9) + epoch_offset)

    def _phases(self, request_id: str, timings: RequestTimings, end_ns: int) -> None:
        """``queue``, ``prefill``, ``decode``: back to back, the last ending at ``end_ns``."""
        from opentelemetry import trace

        parent = trace.set_span_in_context(self.span)
        for name, seconds in (("decode", timings.decode), ("prefill", timings.prefill), ("queue", timings.queued)):
            if seconds is None:
                continue
            start_ns = end_ns - int(seconds * 1e9)
            attributes = {"agentgate.engine.request_id": request_id}
            self.tracer.start_span(name, context=parent, start_time=start_ns, attributes=attributes).end(
                end_time=end_ns
            )
            end_ns = start_ns
