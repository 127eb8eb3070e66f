"""The SDK without a server: SSE decoding, tool-call accumulation at every chunking,
retries and Retry-After, errors, headers (scripted responses through httpx.MockTransport)."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from agentgate.agents import AsyncClient, Client, RetryPolicy
from agentgate.agents._accumulators import ChatAccumulator
from agentgate.agents._requests import normalize_url
from agentgate.agents._retries import parse_retry_after
from agentgate.agents._sse import SSEDecoder
from agentgate.agents.errors import (
    APIConnectionError,
    AuthenticationError,
    BadRequestError,
    RateLimitError,
    ServiceUnavailableError,
    StreamError,
)
from agentgate.agents.events import ContentDelta, Finish, ToolCallComplete, ToolCallDelta, Usage, UsageEvent
from tests.support.scripted import ScriptedServer, chunk, reply, sse_body, tool_call_chunks

CALLS = [("call_a", "get_weather", {"city": "Paris", "unit": "C"}), ("call_b", "get_time", {"tz": "Europe/Paris"})]


def _decode_all(body: bytes, cuts: list[int]) -> list[bytes]:
    decoder, out, last = SSEDecoder(), [], 0
    for cut in [*cuts, len(body)]:
        out += decoder.feed(body[last:cut])
        last = cut
    return out + decoder.flush()


def test_sse_decoder_gives_the_same_payloads_at_every_split():
    body = sse_body(tool_call_chunks(CALLS, "Let me check."))
    whole = _decode_all(body, [])
    assert whole[-1] == b"[DONE]" and len(whole) == len(tool_call_chunks(CALLS, "Let me check.")) + 1
    for cut in range(1, len(body)):
        assert _decode_all(body, [cut]) == whole
    assert _decode_all(body, list(range(1, len(body)))) == whole  # one byte at a time


def test_sse_decoder_skips_comments_and_joins_data_lines():
    body = b": ping\r\n\r\nevent: x\ndata: a\ndata: b\n\ndata:c\n\nid: 7\nretry: 10\n\ndata: last"
    assert _decode_all(body, [5, 17]) == [b"a\nb", b"c", b"last"]


def _accumulate(body: bytes, cuts: list[int]) -> tuple[list, object]:
    acc, events = ChatAccumulator(), []
    for payload in _decode_all(body, cuts):
        if payload != b"[DONE]":
            events += acc.push(json.loads(payload))
    events += acc.finish()
    return events, acc.result()


def test_tool_calls_accumulate_into_complete_calls_whatever_the_chunking():
    body = sse_body(tool_call_chunks(CALLS, "Let me check."))
    events, result = _accumulate(body, [])
    completes = [e.call for e in events if isinstance(e, ToolCallComplete)]
    assert [(c.id, c.name, json.loads(c.arguments)) for c in completes] == [(i, n, a) for i, n, a in CALLS]
    assert result.content == "Let me check." and result.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.parsed_arguments()) for c in result.tool_calls] == [(i, n, a) for i, n, a in CALLS]
    assert result.usage.total_tokens == 15
    # the first call completes as soon as the second starts, before the finish
    kinds = [type(e).__name__ for e in events]
    first_complete = kinds.index("ToolCallComplete")
    second_start = [i for i, e in enumerate(events) if isinstance(e, ToolCallDelta) and e.index == 1][0]
    assert first_complete == second_start - 1
    assert isinstance(events[-1], UsageEvent) and isinstance(events[-2], Finish)
    for cut in range(1, len(body), 7):
        assert _accumulate(body, [cut, cut + 3])[1] == result


def test_calls_without_a_finish_chunk_complete_at_the_end():
    chunks = [c for c in tool_call_chunks(CALLS[:1]) if not c["choices"] or c["choices"][0]["finish_reason"] is None]
    events, result = _accumulate(sse_body(chunks), [])
    assert [e.call.name for e in events if isinstance(e, ToolCallComplete)] == ["get_weather"]
    assert result.finish_reason is None and result.content is None


def test_an_error_event_raises_stream_error():
    acc = ChatAccumulator()
    acc.push(chunk({"content": "hi"}))
    with pytest.raises(StreamError, match="engine died") as info:
        acc.push({"error": {"message": "engine died", "type": "internal_server_error", "code": "engine_error"}})
    assert info.value.code == "engine_error"


def test_usage_carries_the_prefix_cache_hits():
    usage = Usage.from_json(
        {
            "prompt_tokens": 500,
            "completion_tokens": 20,
            "total_tokens": 520,
            "prompt_tokens_details": {"cached_tokens": 448},
        }
    )
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens, usage.cached_tokens) == (
        500,
        20,
        520,
        448,
    )
    assert Usage.from_json({"prompt_tokens": 5}).cached_tokens == 0  # servers that do not say
    assert (usage + usage).cached_tokens == 896 and (usage + None).cached_tokens == 448


def test_retry_after_and_backoff():
    assert parse_retry_after("2") == 2.0 and parse_retry_after("0.5") == 0.5
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 < parse_retry_after(date) <= 31
    policy = RetryPolicy(backoff=0.5, max_backoff=2.0, max_retry_after=10)
    assert policy.delay(0, {"retry-after": "3"}) == 3.0
    assert policy.delay(0, {"retry-after": "300"}) == 10
    assert 0.25 <= policy.delay(0) <= 0.5 and 1.0 <= policy.delay(2) <= 2.0 and policy.delay(10) <= 2.0


def test_base_url_normalization(monkeypatch):
    assert normalize_url("http://h:1/v1/") == "http://h:1"
    assert normalize_url("h:1") == "http://h:1"
    monkeypatch.setenv("AGENTGATE_URL", "http://env:9")
    assert normalize_url(None) == "http://env:9"


@pytest.mark.anyio
async def test_429_is_retried_honouring_retry_after_then_succeeds():
    script = ScriptedServer([reply(None, status=429, headers={"Retry-After": "0.3"}), reply("done")])
    async with AsyncClient("http://test", http_client=httpx.AsyncClient(transport=script.transport())) as client:
        start = time.monotonic()
        result = await client.chat([{"role": "user", "content": "x"}])
        assert time.monotonic() - start >= 0.3
    assert result.content == "done" and client.retries == 1 and len(script.requests) == 2


@pytest.mark.anyio
async def test_503_retries_run_out_into_an_error_with_the_attempts():
    script = ScriptedServer([reply(None, status=503, headers={"Retry-After": "0"})] * 3)
    http = httpx.AsyncClient(transport=script.transport())
    async with AsyncClient("http://test", http_client=http, max_retries=2) as client:
        with pytest.raises(ServiceUnavailableError) as info:
            await client.chat([{"role": "user", "content": "x"}])
    assert info.value.attempts == 3 and len(script.requests) == 3


@pytest.mark.anyio
async def test_a_stream_is_retried_until_it_starts():
    script = ScriptedServer([reply(None, status=429, headers={"Retry-After": "0"}), reply("hello", CALLS)])
    http = httpx.AsyncClient(transport=script.transport())
    async with AsyncClient("http://test", http_client=http) as client:
        async with client.chat_stream([{"role": "user", "content": "x"}]) as stream:
            events = [e async for e in stream]
    assert "".join(e.text for e in events if isinstance(e, ContentDelta)) == "hello"
    assert [c.name for c in stream.result().tool_calls] == ["get_weather", "get_time"]
    assert client.retries == 1


@pytest.mark.anyio
async def test_client_errors_are_not_retried_and_carry_openai_fields():
    def bad(body):
        return httpx.Response(
            400,
            json={"error": {"message": "bad n", "type": "invalid_request_error", "param": "n", "code": "invalid_type"}},
        )

    script = ScriptedServer([bad, reply(None, status=401)])
    async with AsyncClient("http://test", http_client=httpx.AsyncClient(transport=script.transport())) as client:
        with pytest.raises(BadRequestError) as info:
            await client.chat([{"role": "user", "content": "x"}], n=-1)
        assert (info.value.param, info.value.code, info.value.status_code) == ("n", "invalid_type", 400)
        with pytest.raises(AuthenticationError):
            await client.chat([{"role": "user", "content": "x"}])
    assert len(script.requests) == 2


@pytest.mark.anyio
async def test_headers_body_and_session_handle():
    script = ScriptedServer([reply("a"), reply("b")])
    http = httpx.AsyncClient(transport=script.transport())
    async with AsyncClient("http://test/v1", api_key="k1", model="m1", http_client=http) as client:
        await client.chat(
            [{"role": "user", "content": "x"}],
            max_tokens=5,
            request_id="rid-1",
            tool_choice="add",
            tools=[{"type": "function", "function": {"name": "add"}}],
            seed=3,
        )
        session = client.session("conv-9")
        async with session.chat_stream([{"role": "user", "content": "y"}]) as stream:
            await stream.final()
    first, second = script.requests
    assert first.url == "http://test/v1/chat/completions"
    assert first.headers["authorization"] == "Bearer k1" and first.headers["x-request-id"] == "rid-1"
    assert "x-session-id" not in first.headers and second.headers["x-session-id"] == "conv-9"
    body = json.loads(first.content)
    assert body["model"] == "m1" and body["max_tokens"] == 5 and body["seed"] == 3
    assert body["tool_choice"] == {"type": "function", "function": {"name": "add"}}
    assert "stream" not in body and "temperature" not in body
    stream_body = json.loads(second.content)
    assert stream_body["stream"] is True and stream_body["stream_options"] == {"include_usage": True}
    assert session.session_id == "conv-9" and client.session_id is None


@pytest.mark.anyio
async def test_a_stream_that_ends_without_done_is_an_error():
    def cut(body):
        return httpx.Response(200, content=sse_body([chunk({"content": "par"})], done=False))

    script = ScriptedServer([cut])
    async with AsyncClient("http://test", http_client=httpx.AsyncClient(transport=script.transport())) as client:
        with pytest.raises(APIConnectionError, match="DONE"):
            async with client.chat_stream([{"role": "user", "content": "x"}]) as stream:
                async for _ in stream:
                    pass


@pytest.mark.anyio
async def test_connection_refused_is_retried_then_raised():
    port = _closed_port()
    async with AsyncClient(f"http://127.0.0.1:{port}", retry=RetryPolicy(max_retries=2, backoff=0.01)) as client:
        with pytest.raises(APIConnectionError):
            await client.chat([{"role": "user", "content": "x"}])
    assert client.retries == 2


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_sync_twin_does_the_same():
    script = ScriptedServer(
        [reply(None, status=429, headers={"Retry-After": "0"}), reply("hi", CALLS[:1]), reply("plain")]
    )
    with Client("http://test", http_client=httpx.Client(transport=script.transport())) as client:
        with client.chat_stream([{"role": "user", "content": "x"}]) as stream:
            events = list(stream)
        assert [e.call.name for e in events if isinstance(e, ToolCallComplete)] == ["get_weather"]
        assert stream.result().content == "hi" and client.retries == 1
        assert client.chat([{"role": "user", "content": "x"}]).content == "plain"
    with pytest.raises(RateLimitError):
        script = ScriptedServer([reply(None, status=429, headers={"Retry-After": "0"})] * 2)
        with Client("http://test", http_client=httpx.Client(transport=script.transport()), max_retries=1) as c:
            c.chat([{"role": "user", "content": "x"}])


@pytest.mark.anyio
async def test_completions_stream_and_result():
    def answer(body):
        chunks = [
            {
                "id": "cmpl-1",
                "object": "text_completion",
                "model": "m",
                "choices": [{"index": 0, "text": t, "finish_reason": None}],
            }
            for t in ("Par", "is")
        ]
        chunks.append(
            {
                "id": "cmpl-1",
                "object": "text_completion",
                "model": "m",
                "choices": [{"index": 0, "text": "", "finish_reason": "length"}],
            }
        )
        chunks.append(
            {"id": "cmpl-1", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}
        )
        return httpx.Response(200, content=sse_body(chunks))

    script = ScriptedServer([answer])
    async with AsyncClient("http://test", http_client=httpx.AsyncClient(transport=script.transport())) as client:
        result = await client.complete_stream("The capital", max_tokens=2).final()
    assert result.text == "Paris" and result.finish_reason == "length" and result.usage.completion_tokens == 2
    assert json.loads(script.requests[0].content)["prompt"] == "The capital"


def test_httpx_failures_map_to_sdk_errors():
    from agentgate.agents._transport import transport_error
    from agentgate.agents.errors import APITimeoutError

    assert isinstance(transport_error(httpx.ReadTimeout("slow"), "u"), APITimeoutError)
    assert isinstance(transport_error(httpx.ConnectTimeout("slow"), "u"), APITimeoutError)
    error = transport_error(httpx.RemoteProtocolError("peer closed"), "u")
    assert isinstance(error, APIConnectionError) and not isinstance(error, APITimeoutError)
