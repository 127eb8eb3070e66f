"""Every stream ends with ``[DONE]`` or an error event, whatever the exception its producer meets
(issue 50: the producers caught only engine errors, so any other exception ended a stream with
neither). The fault is injected into the producer: the format's chunk raises on the third token;
the gateway runs in this process in front of a null-runner engine over the real ZMQ boundary."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from agentgate.gateway.config.settings import Settings
from agentgate.gateway.formats.openai import ChatFormat, CompletionFormat
from agentgate.gateway.formats.responses import ResponseEvents
from tests.support.http import parse_sse
from tests.support.inprocess import InProcessGateway


@pytest.fixture(scope="module")
def gw() -> Iterator[InProcessGateway]:
    with InProcessGateway(Settings(), redis=True) as gateway:
        yield gateway


def _failing(monkeypatch: pytest.MonkeyPatch, cls: type) -> None:
    """``cls.chunk`` raises a RuntimeError on its third call."""
    original, calls = cls.chunk, []

    def chunk(self, *args):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("injected fault in the stream's producer")
        return original(self, *args)

    monkeypatch.setattr(cls, "chunk", chunk)


@pytest.mark.parametrize("n", [1, 2])
def test_a_chat_stream_whose_producer_fails_ends_with_an_error_event_and_done(gw, monkeypatch, n):
    _failing(monkeypatch, ChatFormat)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "ignore_eos": True, "stream": True}
    r = gw.client.post("/v1/chat/completions", json={**body, "n": n})
    assert r.status_code == 200
    payloads = parse_sse(r.text)
    assert payloads[-1] == "[DONE]", payloads[-3:]
    error = json.loads(payloads[-2])["error"]
    assert error["type"] == "internal_server_error"
    assert "injected" not in error["message"]  # no internal detail reaches the client


def test_a_completion_stream_whose_producer_fails_ends_with_an_error_event_and_done(gw, monkeypatch):
    _failing(monkeypatch, CompletionFormat)
    r = gw.client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 8, "ignore_eos": True, "stream": True})
    payloads = parse_sse(r.text)
    assert payloads[-1] == "[DONE]" and "error" in json.loads(payloads[-2])


def test_a_responses_stream_whose_producer_fails_ends_with_an_error_event(gw, monkeypatch):
    _failing(monkeypatch, ResponseEvents)
    r = gw.client.post("/v1/responses", json={"input": "hi", "max_output_tokens": 8, "stream": True, "store": False})
    assert r.status_code == 200
    data = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
    assert [e["type"] for e in data[-2:]] == ["error", "response.failed"], data[-2:]
