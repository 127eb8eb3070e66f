"""OpenTelemetry traces (``gateway.observation.tracing``, ``gateway.http.tracing``), seen by the SDK's
in-memory exporter in this process: one SERVER span per generation request with the GenAI
semantic-convention attributes, continuing the caller's ``traceparent``; the engine's queue,
prefill and decode as its children, from the timings of its last output; Redis calls as
children; the trace id in ``x-trace-id``. The engine is the scripted null runner
(``tests.support.scripted_engine``), so replies, tool calls included, are known."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra")

from opentelemetry.sdk.trace import ReadableSpan  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind  # noqa: E402

from agentgate.engine.model_files.model_path import default_model_path  # noqa: E402
from agentgate.engine.text.tokenizer import load_tokenizer  # noqa: E402
from agentgate.gateway.config.settings import Settings  # noqa: E402
from agentgate.gateway.context import client_id  # noqa: E402
from agentgate.gateway.observation.tracing import Tracer, traces_endpoint  # noqa: E402
from tests.support.scripted_engine import ScriptedGateway, scripted_gateway  # noqa: E402

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TEXT = "It is sunny in Paris."
EOS = 2
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
CALLER_TRACE, CALLER_SPAN = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"


@pytest.fixture(scope="module")
def traced() -> Iterator[tuple[ScriptedGateway, InMemorySpanExporter]]:
    tokenizer = load_tokenizer(default_model_path())
    call, text = (tokenizer.encode(t, add_special_tokens=False) + [EOS] for t in (CALL, TEXT))
    exporter = InMemorySpanExporter()
    with scripted_gateway(
        Settings(served_model_name=("SmolLM2",)),
        lambda rid, _params: call if "tool" in rid else text,
        tracer=Tracer.to_exporter(exporter),
    ) as gw:
        yield gw, exporter


def _spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    spans = list(exporter.get_finished_spans())
    exporter.clear()
    return spans


def _request_span(spans: list[ReadableSpan]) -> ReadableSpan:
    [server] = [s for s in spans if s.kind is SpanKind.SERVER]
    return server


def _children(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


def test_a_tool_call_is_one_span_continuing_the_callers_trace(traced):
    gw, exporter = traced
    _spans(exporter)
    body = {"messages": MESSAGES, "tools": TOOLS, "tool_choice": "required", "max_tokens": 120}
    headers = {"traceparent": TRACEPARENT, "X-Request-Id": "tool-1", "X-Session-Id": "traced"}
    r = gw.client.post("/v1/chat/completions", json=body, headers=headers)
    assert r.status_code == 200, r.text
    reply = r.json()
    assert r.headers["x-trace-id"] == CALLER_TRACE
    spans = _spans(exporter)
    server = _request_span(spans)
    assert server.name == "chat SmolLM2"
    assert format(server.context.trace_id, "032x") == CALLER_TRACE
    assert (
        server.parent is not None and server.parent.is_remote and format(server.parent.span_id, "016x") == CALLER_SPAN
    )
    a = server.attributes
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.provider.name"] == "agentgate"
    assert a["gen_ai.request.model"] == "SmolLM2" and a["gen_ai.request.max_tokens"] == 120
    assert a["gen_ai.usage.input_tokens"] == reply["usage"]["prompt_tokens"]
    assert a["gen_ai.usage.output_tokens"] == reply["usage"]["completion_tokens"]
    assert (
        a["gen_ai.response.finish_reasons"] == ("tool_calls",) and reply["choices"][0]["finish_reason"] == "tool_calls"
    )
    assert a["http.response.status_code"] == 200 and a["http.route"] == "/v1/chat/completions"
    [call] = reply["choices"][0]["message"]["tool_calls"]
    [event] = server.events
    assert event.name == "gen_ai.tool.call" and dict(event.attributes) == {"gen_ai.tool.name": call["function"]["name"]}
    children = _children(spans, server)
    [queue], [prefill], [decode] = ([s for s in children if s.name == name] for name in ("queue", "prefill", "decode"))
    # The engine's id of the request: the client's id filed under its key (gateway.context.filed_id).
    [engine_id] = {s.attributes["agentgate.engine.request_id"] for s in (queue, prefill, decode)}
    assert engine_id != "tool-1" and client_id(engine_id) == "tool-1"
    # Back to back, from the engine's durations, the last ending within the request's span.
    assert queue.end_time == prefill.start_time and prefill.end_time == decode.start_time
    assert queue.start_time <= queue.end_time and decode.end_time <= server.end_time
    assert decode.end_time - decode.start_time > 0  # a few tokens took steps
    redis = [s for s in children if s.attributes.get("db.system.name") == "redis"]
    # The session opened (the middleware's script call), then the agent program's last turn read (dispatch).
    assert sorted(s.name for s in redis) == ["a request with X-Session-Id", "reading a program's last turn"]


def test_a_stream_is_traced_to_its_end_and_a_request_without_traceparent_starts_a_trace(traced):
    gw, exporter = traced
    _spans(exporter)
    body = {"messages": MESSAGES, "max_tokens": 60, "stream": True, "stream_options": {"include_usage": True}}
    r = gw.client.post("/v1/chat/completions", json=body, headers={"X-Request-Id": "text-1"})
    assert r.status_code == 200
    server = _request_span(_spans(exporter))
    assert server.parent is None and r.headers["x-trace-id"] == format(server.context.trace_id, "032x")
    tokens = len(load_tokenizer(default_model_path()).encode(TEXT, add_special_tokens=False)) + 1
    assert server.attributes["gen_ai.usage.output_tokens"] == tokens
    assert server.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert not server.events  # no tool call


def test_completions_are_text_completion_and_other_routes_are_not_traced(traced):
    gw, exporter = traced
    _spans(exporter)
    body = {"prompt": "The weather in Paris is", "max_tokens": 5, "n": 2, "seed": 7}
    r = gw.client.post("/v1/completions", json=body, headers={"X-Request-Id": "text-2"})
    assert r.status_code == 200
    spans = _spans(exporter)
    server = _request_span(spans)
    assert server.name == "text_completion SmolLM2"
    assert server.attributes["gen_ai.request.choice.count"] == 2 and server.attributes["gen_ai.request.seed"] == 7
    assert server.attributes["gen_ai.response.finish_reasons"] == ("length", "length")
    decodes = [s for s in _children(spans, server) if s.name == "decode"]  # one per engine request
    assert len({s.attributes["agentgate.engine.request_id"] for s in decodes}) == len(decodes) == 2
    health = gw.client.get("/health")
    assert "x-trace-id" not in health.headers and _spans(exporter) == []


def test_a_refused_request_is_a_span_with_its_error(traced):
    gw, exporter = traced
    _spans(exporter)
    r = gw.client.post("/v1/chat/completions", json={"messages": MESSAGES, "model": "gpt-9"})
    assert r.status_code == 404
    server = _request_span(_spans(exporter))
    assert server.attributes["http.response.status_code"] == 404 and server.attributes["error.type"] == "404"
    assert r.headers["x-trace-id"] == format(server.context.trace_id, "032x")


def test_the_traces_endpoint_comes_from_the_flag_then_the_standard_variables():
    assert traces_endpoint(None, {}) is None
    assert traces_endpoint(None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}) == "http://c:4318/v1/traces"
    both = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t/x"}
    assert traces_endpoint(None, both) == "http://t/x"
    assert traces_endpoint("http://flag/v1/traces", both) == "http://flag/v1/traces"
