"""Concurrency and disconnects through httpx, against the null-runner server
(the engine process and its scheduler and KV cache are real; the model is not)."""

from __future__ import annotations

import json
import time

import anyio
import httpx
import pytest

from tests.support.http import StreamRecorder, chat_body, check_chat_stream, engine_idle, metrics, wait_for

pytestmark = pytest.mark.anyio

LIMITS = httpx.Limits(max_connections=400, max_keepalive_connections=400)


def _client() -> httpx.AsyncClient:
    return httpx.AsyncClient(limits=LIMITS, timeout=httpx.Timeout(60.0))


async def test_200_concurrent_streams_complete_while_bad_requests_fly(null):
    url = f"{null.url}/v1/chat/completions"
    recorders = [StreamRecorder() for _ in range(200)]
    bad_statuses: list[int] = []

    async def bad(i: int, client: httpx.AsyncClient) -> None:
        body = [b"{not json", b'{"messages": 3}', b'{"messages": [], "max_tokens": 1}'][i % 3]
        r = await client.post(url, content=body, headers=null.headers)
        bad_statuses.append(r.status_code)

    async with _client() as client, anyio.create_task_group() as tasks:
        for i, recorder in enumerate(recorders):
            body = chat_body(16, stream_options={"include_usage": True})
            if i % 2:
                body["n"] = 2
            tasks.start_soon(recorder.run, client, url, body, null.headers)
            if i % 10 == 0:
                tasks.start_soon(bad, i, client)
    assert bad_statuses == [400] * 20
    for i, recorder in enumerate(recorders):
        assert recorder.status == 200
        assert recorder.headers["content-type"].startswith("text/event-stream")
        n = 2 if i % 2 else 1
        shape = check_chat_stream(recorder.payloads(), n=n, usage=True)
        assert shape["finish"] == {k: "length" for k in range(n)}
        assert shape["usage"]["completion_tokens"] == 16 * n


async def test_storm_of_100_disconnects_leaves_no_kv_blocks_and_no_request_state(null):
    url = f"{null.url}/v1/chat/completions"
    recorders = [StreamRecorder() for _ in range(100)]
    all_started = anyio.Event()
    release = anyio.Event()

    async def one(recorder: StreamRecorder, client: httpx.AsyncClient) -> None:
        async with client.stream("POST", url, json=chat_body(900), headers=null.headers) as response:
            assert response.status_code == 200
            chunks = response.aiter_text()  # held: a dropped iterator would close the stream at once
            async for text in chunks:
                recorder.raw += text
                if recorder.raw.count("\r\n\r\n") >= 3:
                    break
            if sum(r.raw.count("\r\n\r\n") >= 3 for r in recorders) == len(recorders):
                all_started.set()
            await release.wait()
        # leaving the stream block mid-stream closes the connection

    async with _client() as client, anyio.create_task_group() as tasks:
        for recorder in recorders:
            tasks.start_soon(one, recorder, client)
        with anyio.fail_after(30):
            await all_started.wait()
        during = await anyio.to_thread.run_sync(metrics, null.url)
        assert during["agentgate_requests_running"] == 100 and during["agentgate_kv_cache_usage_ratio"] > 0
        assert during["agentgate_gateway_requests_in_flight"] == 100
        disconnected_at = time.monotonic()
        release.set()
    # 900 tokens at >= 4 ms a step would take >= 3.6 s: idle well before means they were aborted
    await anyio.to_thread.run_sync(lambda: wait_for(lambda: engine_idle(null.url), timeout=2.0, message="idle"))
    assert time.monotonic() - disconnected_at < 3.0


async def test_non_streaming_disconnect_aborts_the_request(null):
    url = f"{null.url}/v1/chat/completions"
    async with _client() as client:

        async def watch() -> float:
            with anyio.fail_after(5):
                while (await anyio.to_thread.run_sync(metrics, null.url))["agentgate_requests_running"] < 1:
                    await anyio.sleep(0.02)
            return time.monotonic()

        async with anyio.create_task_group() as tasks:
            seen: list[float] = []

            async def record() -> None:
                seen.append(await watch())

            tasks.start_soon(record)
            with pytest.raises(httpx.ReadTimeout):
                await client.post(url, json=chat_body(900, stream=False), headers=null.headers, timeout=1.0)
            gone = time.monotonic()
        assert seen, "the request never ran"
    await anyio.to_thread.run_sync(lambda: wait_for(lambda: engine_idle(null.url), timeout=1.5, message="idle"))
    assert time.monotonic() - gone < 2.0


async def test_streamed_json_is_well_formed_and_lines_end_with_crlf(null):
    async with _client() as client:
        recorder = await StreamRecorder().run(
            client,
            f"{null.url}/v1/completions",
            {"prompt": "Hi", "max_tokens": 5, "stream": True, "ignore_eos": True},
            null.headers,
        )
    assert recorder.raw.startswith("data: {") and recorder.raw.endswith("data: [DONE]\r\n\r\n")
    payloads = recorder.payloads()
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert all(c["object"] == "text_completion" and c["id"].startswith("cmpl-") for c in chunks)
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "length"
