"""Operator routes on the null-runner server: pause (keep, wait, abort),
resume, is_paused, abort by id, X-Request-Id."""

from __future__ import annotations

import json
import time

import anyio
import httpx
import pytest

from tests.support.http import StreamRecorder, chat_body, check_chat_stream, metrics

pytestmark = pytest.mark.anyio

LIMITS = httpx.Limits(max_connections=200, max_keepalive_connections=200)


def _client() -> httpx.AsyncClient:
    return httpx.AsyncClient(limits=LIMITS, timeout=httpx.Timeout(60.0))


async def _wait_events(recorders: list[StreamRecorder], at_least: int, timeout: float = 20.0) -> None:
    with anyio.fail_after(timeout):
        while any(r.events < at_least for r in recorders):
            await anyio.sleep(0.01)


async def _is_paused(client: httpx.AsyncClient, null) -> bool:
    r = await client.get(f"{null.url}/is_paused", headers=null.admin_headers)
    assert r.status_code == 200
    return r.json()["is_paused"]


def _content_events(recorder: StreamRecorder) -> int:
    """Chunks with content (the role chunk and [DONE] excluded)."""
    count = 0
    for payload in recorder.payloads() if recorder.raw.endswith("\r\n\r\n") else []:
        if (
            payload != "[DONE]"
            and json.loads(payload)["choices"]
            and json.loads(payload)["choices"][0]["delta"].get("content")
        ):
            count += 1
    return count


async def test_pause_keep_freezes_streams_under_load_and_resume_completes_them(null):
    url = f"{null.url}/v1/chat/completions"
    running = [StreamRecorder() for _ in range(40)]
    late = StreamRecorder()
    async with _client() as client, anyio.create_task_group() as tasks:
        for recorder in running:
            tasks.start_soon(
                recorder.run, client, url, chat_body(200, stream_options={"include_usage": True}), null.headers
            )
        await _wait_events(running, 5)
        r = await client.post(f"{null.url}/pause", params={"mode": "keep"}, headers=null.admin_headers)
        assert r.status_code == 200 and r.json() == {"is_paused": True, "mode": "keep"}
        assert await _is_paused(client, null)
        await anyio.sleep(0.1)  # steps already in flight land
        frozen = [r.events for r in running]
        tasks.start_soon(late.run, client, url, chat_body(8), null.headers)  # a new request waits, not rejected
        await anyio.sleep(0.5)
        assert [r.events for r in running] == frozen, "tokens arrived while paused in keep mode"
        assert late.status == 200 and late.events <= 1, "a request sent during the pause got tokens"
        assert all(not r.raw.endswith("data: [DONE]\r\n\r\n") for r in running)
        r = await client.post(f"{null.url}/resume", headers=null.admin_headers)
        assert r.status_code == 200 and r.json()["is_paused"] is False
    for recorder in running:
        shape = check_chat_stream(recorder.payloads(), usage=True)
        assert shape["finish"] == {0: "length"} and shape["usage"]["completion_tokens"] == 200
    assert check_chat_stream(late.payloads())["finish"] == {0: "length"}


async def test_pause_wait_lets_running_requests_finish_and_holds_new_ones(null):
    url = f"{null.url}/v1/chat/completions"
    running = [StreamRecorder() for _ in range(20)]
    late = StreamRecorder()
    async with _client() as client, anyio.create_task_group() as tasks:
        for recorder in running:
            tasks.start_soon(recorder.run, client, url, chat_body(150), null.headers)
        await _wait_events(running, 3)
        started = time.monotonic()
        r = await client.post(f"{null.url}/pause", params={"mode": "wait"}, headers=null.admin_headers)
        assert r.status_code == 200
        waited = time.monotonic() - started
        assert waited > 0.2, f"pause(wait) answered after {waited:.2f} s, before the requests could have finished"
        with anyio.fail_after(5):
            while any(not r.raw.endswith("data: [DONE]\r\n\r\n") for r in running):
                await anyio.sleep(0.01)
        tasks.start_soon(late.run, client, url, chat_body(8), null.headers)
        await anyio.sleep(0.4)
        assert late.status == 200 and late.events <= 1
        assert await _is_paused(client, null)
        await client.post(f"{null.url}/resume", headers=null.admin_headers)
    for recorder in running:
        assert check_chat_stream(recorder.payloads())["finish"] == {0: "length"}
    assert check_chat_stream(late.payloads())["finish"] == {0: "length"}


async def test_pause_abort_ends_running_requests_and_new_ones_wait(null):
    url = f"{null.url}/v1/chat/completions"
    running = [StreamRecorder() for _ in range(10)]
    late = StreamRecorder()
    async with _client() as client, anyio.create_task_group() as tasks:
        for recorder in running:
            tasks.start_soon(recorder.run, client, url, chat_body(900), null.headers)
        await _wait_events(running, 3)
        r = await client.post(f"{null.url}/pause", params={"mode": "abort"}, headers=null.admin_headers)
        assert r.status_code == 200
        with anyio.fail_after(5):
            while any(not r.raw.endswith("data: [DONE]\r\n\r\n") for r in running):
                await anyio.sleep(0.01)
        tasks.start_soon(late.run, client, url, chat_body(8), null.headers)
        await anyio.sleep(0.3)
        assert late.events <= 1
        await client.post(f"{null.url}/resume", headers=null.admin_headers)
    for recorder in running:
        assert check_chat_stream(recorder.payloads())["finish"] == {0: "abort"}
    assert check_chat_stream(late.payloads())["finish"] == {0: "length"}


async def test_a_compaction_an_operator_aborted_is_incomplete(null):
    """Issue 50: the summary an abort cut short is marked so (the compaction item ``incomplete``),
    never passed off as a whole summary."""
    rid = f"compact-abort-{time.monotonic_ns()}"
    body = {"model": "SmolLM2-135M-Instruct", "input": "Tell me about the sea, at length."}
    async with _client() as client, anyio.create_task_group() as tasks:
        replies: list[httpx.Response] = []

        async def compact() -> None:
            headers = {**null.headers, "X-Request-Id": rid}
            replies.append(await client.post(f"{null.url}/v1/responses/compact", json=body, headers=headers))

        tasks.start_soon(compact)
        with anyio.fail_after(10):
            while not (ids := await _listed_ids(client, null, rid)):
                assert not replies, replies[0].text  # answered before it could be aborted
                await anyio.sleep(0.05)
        await anyio.sleep(0.3)  # some of the summary written
        r = await client.delete(f"{null.url}/v1/requests/{ids[0]}", headers=null.admin_headers)
        assert r.status_code == 200, r.text
    [reply] = replies
    assert reply.status_code == 200, reply.text
    [summary] = [item for item in reply.json()["output"] if item["type"] == "compaction"]
    assert summary["status"] == "incomplete", summary


async def _listed_ids(client: httpx.AsyncClient, server, rid: str) -> list[str]:
    listed = (await client.get(f"{server.url}/v1/requests", headers=server.admin_headers)).json()["data"]
    return [entry["id"] for entry in listed if entry["id"].endswith(rid)]


async def test_bad_pause_mode_is_a_400(null):
    async with _client() as client:
        r = await client.post(f"{null.url}/pause", params={"mode": "nap"}, headers=null.admin_headers)
        assert r.status_code == 400 and r.json()["error"]["param"] == "mode"
        assert not await _is_paused(client, null)


async def test_abort_by_request_id_through_both_routes(null):
    url = f"{null.url}/v1/chat/completions"
    a, b, c, other = StreamRecorder(), StreamRecorder(), StreamRecorder(), StreamRecorder()
    async with _client() as client, anyio.create_task_group() as tasks:
        tasks.start_soon(a.run, client, url, chat_body(900), {**null.headers, "X-Request-Id": "op-abort-a"})
        tasks.start_soon(b.run, client, url, chat_body(900), {**null.headers, "X-Request-Id": "op-abort-b"})
        tasks.start_soon(c.run, client, url, chat_body(900, n=2), {**null.headers, "X-Request-Id": "op-abort-c"})
        tasks.start_soon(other.run, client, url, chat_body(60), null.headers)
        await _wait_events([a, b, c, other], 3)
        r = await client.post(
            f"{null.url}/abort_requests", json={"request_ids": ["op-abort-a", "nope"]}, headers=null.admin_headers
        )
        assert r.status_code == 200 and r.json() == {"aborted": ["op-abort-a"], "all": False}
        r = await client.delete(f"{null.url}/v1/requests/op-abort-b", headers=null.admin_headers)
        assert r.status_code == 200 and r.json()["aborted"] == ["op-abort-b"]
        r = await client.delete(f"{null.url}/v1/requests/op-abort-c-1", headers=null.admin_headers)  # one choice
        assert r.status_code == 200
        r = await client.delete(f"{null.url}/v1/requests/no-such-request", headers=null.admin_headers)
        assert r.status_code == 404 and r.json()["error"]["param"] == "request_id"
        with anyio.fail_after(5):
            while not (a.raw.endswith("[DONE]\r\n\r\n") and b.raw.endswith("[DONE]\r\n\r\n")):
                await anyio.sleep(0.01)
        assert not c.raw.endswith("[DONE]\r\n\r\n"), "aborting choice 1 ended choice 0 too"
        with anyio.fail_after(5):
            while not other.raw.endswith("[DONE]\r\n\r\n"):
                await anyio.sleep(0.01)
        r = await client.post(f"{null.url}/abort_requests", json={"request_ids": []}, headers=null.admin_headers)
        assert r.status_code == 200 and r.json() == {"aborted": [], "all": True}
    assert check_chat_stream(a.payloads())["finish"] == {0: "abort"}
    assert check_chat_stream(b.payloads())["finish"] == {0: "abort"}
    assert check_chat_stream(c.payloads(), n=2)["finish"] == {0: "abort", 1: "abort"}
    assert check_chat_stream(other.payloads())["finish"] == {0: "length"}, "another request was hit"


async def test_request_id_is_echoed_generated_and_unique_in_flight(null):
    url = f"{null.url}/v1/chat/completions"
    async with _client() as client:
        r = await client.post(url, json=chat_body(2, stream=False), headers={**null.headers, "X-Request-Id": "my-id-7"})
        assert r.headers["x-request-id"] == "my-id-7" and r.json()["id"] == "chatcmpl-my-id-7"
        r1 = await client.post(url, json=chat_body(2, stream=False), headers=null.headers)
        r2 = await client.post(url, json=chat_body(2, stream=False), headers=null.headers)
        assert r1.headers["x-request-id"] != r2.headers["x-request-id"]
        assert r1.json()["id"] == f"chatcmpl-{r1.headers['x-request-id']}"
        for path in ("/health", "/metrics", "/v1/models", "/nope"):
            assert (await client.get(f"{null.url}{path}", headers=null.headers)).headers.get("x-request-id")
        first = StreamRecorder()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(first.run, client, url, chat_body(300), {**null.headers, "X-Request-Id": "dup-1"})
            await _wait_events([first], 2)
            r = await client.post(
                url, json=chat_body(2, stream=False), headers={**null.headers, "X-Request-Id": "dup-1"}
            )
            assert r.status_code == 409 and r.json()["error"]["code"] == "duplicate_request_id"
        assert check_chat_stream(first.payloads())["finish"] == {0: "length"}


async def test_engine_ids_of_a_multi_choice_request_are_taken_too(null):
    url = f"{null.url}/v1/chat/completions"
    async with _client() as client:
        first = StreamRecorder()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(first.run, client, url, chat_body(300, n=2), {**null.headers, "X-Request-Id": "multi"})
            await _wait_events([first], 3)
            r = await client.post(
                url, json=chat_body(2, stream=False), headers={**null.headers, "X-Request-Id": "multi-1"}
            )
            assert r.status_code == 409
        assert check_chat_stream(first.payloads(), n=2)["finish"] == {0: "length", 1: "length"}


async def test_requests_that_leave_while_paused_release_everything(null):
    url = f"{null.url}/v1/chat/completions"
    async with _client() as client:
        assert (await client.post(f"{null.url}/pause", params={"mode": "keep"}, headers=null.admin_headers)).is_success
        release = anyio.Event()

        async def leave_after_role(recorder: StreamRecorder) -> None:
            async with client.stream("POST", url, json=chat_body(50), headers=null.headers) as response:
                chunks = response.aiter_text()  # held, so the stream stays open until release
                async for text in chunks:
                    recorder.raw += text
                    break
                await release.wait()

        recorders = [StreamRecorder() for _ in range(20)]
        async with anyio.create_task_group() as tasks:
            for recorder in recorders:
                tasks.start_soon(leave_after_role, recorder)
            with anyio.fail_after(10):
                while not all(r.raw for r in recorders):
                    await anyio.sleep(0.01)
            during = await anyio.to_thread.run_sync(metrics, null.url)
            assert during["agentgate_gateway_requests_waiting"] == 20 and during["agentgate_requests_waiting"] == 20
            release.set()
        with anyio.fail_after(5):
            while True:
                m = await anyio.to_thread.run_sync(metrics, null.url)
                if m["agentgate_requests_waiting"] == 0 and m["agentgate_gateway_requests_waiting"] == 0:
                    break
                await anyio.sleep(0.05)
        assert m["agentgate_gateway_requests_in_flight"] == 0
        assert all('"role":"assistant"' in r.raw for r in recorders)
