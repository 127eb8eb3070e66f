"""Traces exported for real: ``agentgate serve`` (null runner, ``--access-log``) traced through
the standard ``OTEL_EXPORTER_OTLP_ENDPOINT``, its OTLP/HTTP exporter posting to a receiver
this test runs on loopback, which decodes the protobuf with ``opentelemetry-proto``. And the
start-up error when tracing is asked for without the ``otel`` extra."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the otel extra")

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span  # noqa: E402

from tests.support.http import chat_body  # noqa: E402
from tests.support.servers import NULL_ENGINE, REPO, clean_environment, start_server  # noqa: E402

CALLER_TRACE, CALLER_SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


class Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP traces receiver: POST /v1/traces, protobuf in, the spans and their service names kept."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.spans: list[tuple[str, Span]] = []  # (service.name, span)
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def received(self) -> list[tuple[str, Span]]:
        with self.lock:
            return list(self.spans)


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path != "/v1/traces" or self.headers["Content-Type"] != "application/x-protobuf":
            self.send_error(404)
            return
        request = ExportTraceServiceRequest.FromString(body)
        with self.server.lock:
            for resource_spans in request.resource_spans:
                attributes = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    self.server.spans += [(attributes.get("service.name", ""), s) for s in scope_spans.spans]
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_spans_reach_an_otlp_receiver_and_the_access_log_names_the_trace(receiver, tmp_path):
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,  # the exporter adds /v1/traces
        "OTEL_BSP_SCHEDULE_DELAY": "50",  # export within 50 ms, not the default 5 s
        "OTEL_SERVICE_NAME": "agentgate-under-test",
    }
    server = start_server(tmp_path, *NULL_ENGINE, "--access-log", env=env)
    try:
        headers = {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}
        r = httpx.post(f"{server.url}/v1/chat/completions", json=chat_body(8, stream=True), headers=headers)
        assert r.status_code == 200 and r.headers["x-trace-id"] == CALLER_TRACE
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            ours = [(service, s) for service, s in receiver.received() if s.trace_id.hex() == CALLER_TRACE]
            # The request's own (server) span ends after its children and may come in a later batch.
            if {"queue", "prefill", "decode"} <= {s.name for _, s in ours} and any(
                s.kind == Span.SPAN_KIND_SERVER for _, s in ours
            ):
                break
            time.sleep(0.05)
        [(service, request)] = [(service, s) for service, s in ours if s.kind == Span.SPAN_KIND_SERVER]
        assert service == "agentgate-under-test" and request.name.startswith("chat ")
        assert request.parent_span_id.hex() == CALLER_SPAN
        attributes = {a.key: a.value for a in request.attributes}
        assert attributes["gen_ai.usage.output_tokens"].int_value == 8
        assert [v.string_value for v in attributes["gen_ai.response.finish_reasons"].array_value.values] == ["length"]
        children = {s.name for _, s in ours if s.parent_span_id == request.span_id}
        assert {"queue", "prefill", "decode"} <= children
        access = [line for line in server.log().splitlines() if '"POST /v1/chat/completions HTTP/1.1" 200' in line]
        assert len(access) == 1 and access[0].endswith(f"trace_id={CALLER_TRACE}"), access
    finally:
        server.stop()


def test_tracing_without_the_extra_is_one_clear_start_up_error(tmp_path: Path):
    """The extra missing: a stand-in ``opentelemetry.sdk`` that does not import, first on the path.
    ``opentelemetry`` is a namespace package, so its API (which the ``mcp`` SDK, a dependency,
    imports) stays importable, as it is in an install without the extra."""
    (tmp_path / "opentelemetry" / "sdk").mkdir(parents=True)
    (tmp_path / "opentelemetry" / "sdk" / "__init__.py").write_text(
        "raise ImportError(\"No module named 'opentelemetry.sdk'\", name='opentelemetry.sdk')\n"
    )
    env = clean_environment({"PYTHONPATH": str(tmp_path), "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:9/t"})
    result = subprocess.run(
        [sys.executable, "-m", "agentgate.gateway.command.cli", "gateway", "--engine", "ipc:///nowhere"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env=env,
    )
    assert result.returncode == 2, result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("agentgate: error: tracing to http://127.0.0.1:9/t was asked for"), error
    assert "pip install 'agentgate[otel]'" in error and "Traceback" not in result.stderr
