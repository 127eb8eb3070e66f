"""Slow clients against a live server (``--header-timeout 1 --body-timeout 1
--max-connections 40 --sse-send-timeout 2``): slowloris headers and stalled
bodies get 408, connections past the cap get 503 at once, and a stream whose
reader stopped reading is aborted with its engine request."""

from __future__ import annotations

import json
import socket
import time

import pytest
from websockets.sync.client import connect

from tests.support.http import engine_idle, wait_for

pytestmark = pytest.mark.slow


def _connect(port: int, rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    return sock


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _status_and_error(raw: bytes) -> tuple[int, dict]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)["error"]


def _read_response(sock: socket.socket) -> bytes:
    """One whole response (head, then Content-Length bytes of body) on a kept-alive connection."""
    raw = b""
    while b"\r\n\r\n" not in raw:
        raw += sock.recv(65536)
    head = raw.split(b"\r\n\r\n", 1)[0].lower()
    length = int(head.split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
    while len(raw.split(b"\r\n\r\n", 1)[1]) < length:
        raw += sock.recv(65536)
    return raw


def test_headers_that_never_finish_get_408_and_the_connection_closes(served):
    sock = _connect(served.port)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
    started = time.monotonic()
    raw = _read_all(sock)  # returns once the server closed the connection
    assert time.monotonic() - started < 3
    status, error = _status_and_error(raw)
    assert status == 408 and error["code"] == "request_timeout"


def test_a_websocket_outlives_the_header_timeout(served):
    """Its headers were in at the upgrade: the header timer must not write a 408 into the socket."""
    with connect(f"ws://127.0.0.1:{served.port}/v1/responses") as ws:
        time.sleep(1.5)  # past --header-timeout 1
        ws.send(json.dumps({"type": "response.create", "input": "Hi", "max_output_tokens": 2}))
        events = [json.loads(ws.recv(timeout=10))]
        while events[-1]["type"] not in ("response.completed", "response.incomplete", "error"):
            events.append(json.loads(ws.recv(timeout=10)))
    assert events[-1]["type"] == "response.incomplete"


def test_a_stalled_body_gets_408(served):
    sock = _connect(served.port)
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b'Content-Length: 100\r\n\r\n{"messages": '
    )
    started = time.monotonic()
    raw = _read_response(sock)
    assert time.monotonic() - started < 3
    status, error = _status_and_error(raw)
    assert status == 408 and error["code"] == "request_timeout"
    sock.close()


def test_connections_past_the_cap_are_refused_at_once(served):
    socks = [_connect(served.port) for _ in range(40)]
    try:
        extra = _connect(served.port)
        status, error = _status_and_error(_read_all(extra))
        assert status == 503 and error["code"] == "too_many_connections"
    finally:
        for sock in socks:
            sock.close()
    wait_for(lambda: _connect(served.port).sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n") is None, timeout=5)


def test_a_stream_whose_reader_stops_reading_is_aborted_and_frees_its_engine_requests(served):
    """64 choices x 900 tokens (over 6 MB of SSE) to a client with a 4 KiB receive buffer that reads
    nothing: once the buffers are full the write waits 2 s and the stream is aborted, long before
    the 900 steps (>= 9 s at 10 ms a step) the engine would need to finish it."""
    body = json.dumps(
        {
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 900,
            "ignore_eos": True,
            "stream": True,
            "n": 64,
        }
    ).encode()
    sock = _connect(served.port, rcvbuf=4096)
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    assert sock.recv(256).startswith(b"HTTP/1.1 200")
    wait_for(lambda: "stopped reading" in served.log(), timeout=30, message="the stalled stream aborted")
    wait_for(lambda: engine_idle(served.url), timeout=10, message="its engine requests gone")
    sock.close()
