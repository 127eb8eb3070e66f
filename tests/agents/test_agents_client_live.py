"""The SDK against a live gateway (null runner): streaming events, cancellation that aborts
server-side, retries on 429, timeouts, auth errors, and the admin calls."""

from __future__ import annotations

import gc
import time

import anyio
import pytest

from agentgate.agents import Admin, AsyncAdmin, AsyncClient, Client, ContentDelta, Finish, UsageEvent
from agentgate.agents.errors import (
    APITimeoutError,
    AuthenticationError,
    PermissionDeniedError,
    RateLimitError,
    UnsupportedError,
)
from tests.support.http import engine_idle, metrics, wait_for
from tests.support.servers import ADMIN_KEY, USER_KEY

pytestmark = pytest.mark.anyio
MESSAGES = [{"role": "user", "content": "Hello there"}]


def _client(server, **kw) -> AsyncClient:
    return AsyncClient(server.url, api_key=USER_KEY, **kw)


def _finished(url: str, reason: str) -> float:
    return metrics(url).get(f'agentgate_requests_total{{finish_reason="{reason}"}}', 0.0)


async def test_streaming_events_usage_and_request_id(null):
    async with _client(null) as client:
        options = dict(max_tokens=12, ignore_eos=True, temperature=0)
        async with client.chat_stream(MESSAGES, request_id="sdk-stream-1", **options) as stream:
            events = [e async for e in stream]
        result = stream.result()
        plain = await client.chat(MESSAGES, **options)
    kinds = [type(e) for e in events]
    assert kinds[-2:] == [Finish, UsageEvent] and set(kinds[:-2]) == {ContentDelta}
    assert stream.request_id == "sdk-stream-1" and result.request_id == "sdk-stream-1"
    assert result.finish_reason == "length" and result.usage.completion_tokens == 12
    assert result.content == "".join(e.text for e in events if isinstance(e, ContentDelta))
    assert plain.content == result.content  # the null runner is deterministic
    assert plain.usage == result.usage and plain.request_id and plain.request_id != result.request_id


async def test_completions_and_models(null):
    async with _client(null) as client:
        assert await client.models()
        done = await client.complete("Once upon", max_tokens=5, ignore_eos=True, temperature=0)
        streamed = await client.complete_stream("Once upon", max_tokens=5, ignore_eos=True, temperature=0).final()
    assert done.usage.completion_tokens == 5 and streamed.text == done.text and streamed.finish_reason == "length"


def test_the_sync_client_streams_too(null):
    with Client(null.url, api_key=USER_KEY) as client:
        with client.chat_stream(MESSAGES, max_tokens=6, ignore_eos=True) as stream:
            events = list(stream)
        assert isinstance(events[-1], UsageEvent) and stream.result().usage.completion_tokens == 6


async def test_leaving_a_stream_early_aborts_it_on_the_server(null):
    disconnects = _finished(null.url, "disconnect") + _finished(null.url, "abort")
    async with _client(null) as client:
        async with client.chat_stream(MESSAGES, max_tokens=900, ignore_eos=True) as stream:
            seen = 0
            async for event in stream:
                seen += isinstance(event, ContentDelta)
                if seen == 3:
                    assert metrics(null.url)["agentgate_kv_cache_usage_ratio"] > 0
                    break  # leaving the async with closes the connection
    wait_for(lambda: engine_idle(null.url), timeout=5, message="KV usage back to 0 after the client left")
    assert _finished(null.url, "disconnect") + _finished(null.url, "abort") == disconnects + 1


async def test_breaking_out_of_an_unmanaged_stream_aborts_it_too(null):
    """Without `async with`: the dropped stream's generator is finalized by the event loop, which closes it.
    Finalization waits for the garbage collector when the generator sits in a reference cycle, so the
    test collects (a long-running program does so on its own)."""
    async with _client(null) as client:
        async for event in client.chat_stream(MESSAGES, max_tokens=900, ignore_eos=True):
            if isinstance(event, ContentDelta):
                break
        assert metrics(null.url)["agentgate_requests_running"] <= 1
        gc.collect()
        with anyio.fail_after(10):
            while not engine_idle(null.url):
                await anyio.sleep(0.05)


async def test_cancelling_the_task_that_reads_a_stream_aborts_it(null):
    async with _client(null) as client:
        started = anyio.Event()

        async def read() -> None:
            async with client.chat_stream(MESSAGES, max_tokens=900, ignore_eos=True) as stream:
                async for _ in stream:
                    started.set()

        async with anyio.create_task_group() as tasks:
            for _ in range(3):
                tasks.start_soon(read)
            await started.wait()
            await anyio.sleep(0.2)
            assert metrics(null.url)["agentgate_requests_running"] == 3
            tasks.cancel_scope.cancel()
        # the client keeps working on the same connection pool afterwards
        assert (await client.chat(MESSAGES, max_tokens=2, ignore_eos=True)).usage.completion_tokens == 2
    wait_for(lambda: engine_idle(null.url), timeout=5, message="every cancelled stream to be aborted")


async def test_429_from_a_full_queue_is_retried_until_the_server_has_room(null):
    """--max-waiting 4: with the server paused (keep), four requests wait for their first token;
    a fifth gets 429 + Retry-After and is retried until resume makes room."""
    async with AsyncAdmin(null.url, admin_key=ADMIN_KEY) as admin, _client(null) as client:
        await admin.pause("keep")
        results = []

        async def one(c: AsyncClient) -> None:
            results.append(await c.chat(MESSAGES, max_tokens=3, ignore_eos=True))

        async with anyio.create_task_group() as tasks:
            for _ in range(4):
                tasks.start_soon(one, client)
            wait_start = time.monotonic()
            while metrics(null.url)["agentgate_gateway_requests_waiting"] < 4:
                assert time.monotonic() - wait_start < 10
                await anyio.sleep(0.05)
            async with _client(null, max_retries=0) as impatient:
                with pytest.raises(RateLimitError) as info:
                    await impatient.chat(MESSAGES, max_tokens=3)
                assert info.value.headers["retry-after"] == "1" and info.value.attempts == 1
            patient = _client(null, max_retries=10)
            tasks.start_soon(one, patient)
            await anyio.sleep(1.5)  # the patient client is refused at least once meanwhile
            await admin.resume()
        await patient.aclose()
    assert len(results) == 5 and all(r.usage.completion_tokens == 3 for r in results)
    assert patient.retries >= 1


async def test_a_read_timeout_raises_and_the_server_drops_the_request(null):
    async with AsyncAdmin(null.url, admin_key=ADMIN_KEY) as admin, _client(null, timeout=0.5) as client:
        await admin.pause("keep")
        try:
            with pytest.raises(APITimeoutError):
                await client.chat(MESSAGES, max_tokens=3)
            with pytest.raises(APITimeoutError):
                async with client.chat_stream(MESSAGES, max_tokens=3) as stream:
                    async for _ in stream:
                        pass
        finally:
            await admin.resume()


async def test_auth_errors(null):
    async with AsyncClient(null.url, api_key="wrong") as client:
        with pytest.raises(AuthenticationError):
            await client.chat(MESSAGES, max_tokens=1)
    async with AsyncAdmin(null.url, admin_key=USER_KEY) as admin:
        with pytest.raises(PermissionDeniedError):
            await admin.pause()


async def test_admin_abort_by_id_and_all_and_status(null):
    admin = AsyncAdmin(null.url, admin_key=ADMIN_KEY)
    async with admin, _client(null) as client:
        finishes: dict[str, str | None] = {}

        async def stream(request_id: str) -> None:
            async with client.chat_stream(MESSAGES, max_tokens=900, ignore_eos=True, request_id=request_id) as s:
                await s.final()
            finishes[request_id] = s.result().finish_reason

        async with anyio.create_task_group() as tasks:
            for i in range(3):
                tasks.start_soon(stream, f"abort-me-{i}")
            while metrics(null.url)["agentgate_requests_running"] < 3:
                await anyio.sleep(0.05)
            status = await admin.status()
            assert status.healthy and status.paused is False and status.running == 3 and status.kv_usage > 0
            assert status.engines == 1 and not status.errors
            assert (await admin.abort(["abort-me-0", "not-there"]))["aborted"] == ["abort-me-0"]
            await anyio.sleep(0.2)
            assert (await admin.abort(all=True))["all"] is True
        assert finishes == {f"abort-me-{i}": "abort" for i in range(3)}
        with pytest.raises(ValueError):
            await admin.abort()  # nothing chosen never means "everything"


async def test_abort_by_session_is_refused_by_a_server_without_sessions(null):
    async with AsyncAdmin(null.url, admin_key=ADMIN_KEY) as admin:
        document = await admin._run(_openapi())
        fields = set(document["components"]["schemas"]["AbortRequestsRequest"]["properties"])
        if "session_id" in fields:
            pytest.skip("this gateway aborts by session (issue 8): covered in test_agents_sessions_live")
        with pytest.raises(UnsupportedError, match="session_id"):
            await admin.abort(session_id="s-1")
        with pytest.raises(UnsupportedError, match="api_key"):
            await admin.abort(api_key="k")


def _openapi():
    from agentgate.agents._requests import Req

    return (yield Req("GET", "/openapi.json")).json()


def test_sync_admin(null):
    with Admin(null.url, admin_key=ADMIN_KEY) as admin:
        assert admin.pause("wait") == {"is_paused": True, "mode": "wait"} and admin.is_paused()
        assert admin.resume()["is_paused"] is False and not admin.is_paused()
        ok, body = admin.health()
        assert ok and body["status"] == "ok"
        assert admin.metrics()["agentgate_engines_alive"] == 1
