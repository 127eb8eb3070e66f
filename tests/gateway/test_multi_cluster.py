"""Two gateways and two engines on one Redis (real ``redis-server``,
``agentgate engine`` x2, ``agentgate gateway`` x2, null runner: these tests
are about the gateways): aborts, pause and rate limits across replicas,
sessions shared, owned, bound to an engine and kept over a gateway restart,
agent programs kept on their engine, and Redis killed and restarted under
load (last: it disturbs the rest)."""

from __future__ import annotations

import json
import time

import anyio
import httpx
import openai
import pytest

from tests.support.cluster import run_cluster
from tests.support.http import (
    StreamRecorder,
    chat_body,
    check_chat_stream,
    engine_idle,
    first_tokens_by_engine,
    wait_for,
)
from tests.support.servers import ADMIN_KEY, USER_KEY, USER_KEY_2, bearer, launch_serve, stop_all, wait_healthy

pytestmark = pytest.mark.anyio

RPM_KEY = "rl-requests-key"  # 6 requests per minute
TPM_KEY = "rl-tokens-key"  # 60 tokens per minute
KEYS = (USER_KEY, USER_KEY_2, RPM_KEY, TPM_KEY)
MODEL = "SmolLM2-135M-Instruct"
USER = bearer(USER_KEY)
USER_2 = bearer(USER_KEY_2)
ADMIN = bearer(ADMIN_KEY)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # Formatted by hand: each flag beside its value, as on a command line.
    flags = [part for key in KEYS for part in ("--api-key", key)] + [
        "--admin-key", ADMIN_KEY, "--key-rate-limit", f"{RPM_KEY}:6:0", "--key-rate-limit", f"{TPM_KEY}:0:60",
        "--session-ttl", "120",
    ]  # fmt: skip
    yield from run_cluster(tmp_path_factory.mktemp("cluster"), flags)


def _client() -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=httpx.Timeout(60.0), limits=httpx.Limits(max_connections=100))


async def _until(predicate, timeout: float = 10.0, what: str = "condition") -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.005)


def _finish(recorder: StreamRecorder) -> str:
    return check_chat_stream(recorder.payloads())["finish"][0]


def _content_chunks(recorder: StreamRecorder) -> int:
    count = 0
    for payload in recorder.raw.replace("\r\n", "\n").split("\n\n"):
        if payload.startswith("data: {"):
            chunk = json.loads(payload[6:])
            if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                count += 1
    return count


async def test_an_abort_sent_to_b_stops_a_stream_on_a_within_an_engine_step(cluster):
    url = f"{cluster.a.url}/v1/chat/completions"
    async with _client() as client, anyio.create_task_group() as tasks:
        # by request id
        by_id = StreamRecorder()
        tasks.start_soon(
            by_id.run,
            client,
            url,
            chat_body(900),
            {**USER, "X-Request-Id": "xb-1"},
        )
        await _until(lambda: by_id.events >= 5)
        r = await client.delete(f"{cluster.b.url}/v1/requests/xb-1", headers=ADMIN)
        answered, at_abort = time.monotonic(), _content_chunks(by_id)
        assert r.status_code == 200 and r.json()["aborted"] == ["xb-1"]
        await _until(lambda: by_id.raw.endswith("data: [DONE]\r\n\r\n"), timeout=2)
        assert time.monotonic() - answered < 0.25
        assert _content_chunks(by_id) - at_abort <= 2, "tokens kept coming after the abort (engine step: 10 ms)"
        assert _finish(by_id) == "abort"

        # by session and by API key, through /abort_requests on B
        by_session, by_key = StreamRecorder(), StreamRecorder()
        tasks.start_soon(by_session.run, client, url, chat_body(900), {**USER, "X-Session-Id": "abort-me"})
        tasks.start_soon(by_key.run, client, url, chat_body(900), USER_2)
        await _until(lambda: by_session.events >= 3 and by_key.events >= 3)
        r = await client.post(
            f"{cluster.b.url}/abort_requests",
            json={"session_id": "abort-me"},
            headers=ADMIN,
        )
        assert r.status_code == 200 and len(r.json()["aborted"]) == 1
        await _until(lambda: by_session.raw.endswith("data: [DONE]\r\n\r\n"), timeout=2)
        assert _finish(by_session) == "abort" and not by_key.raw.endswith("[DONE]\r\n\r\n")
        r = await client.post(
            f"{cluster.b.url}/abort_requests",
            json={"api_key": USER_KEY_2},
            headers=ADMIN,
        )
        assert r.status_code == 200 and len(r.json()["aborted"]) == 1
        await _until(lambda: by_key.raw.endswith("data: [DONE]\r\n\r\n"), timeout=2)
        assert _finish(by_key) == "abort"

        # unknown ids: 404
        r = await client.delete(f"{cluster.b.url}/v1/requests/no-such-request", headers=ADMIN)
        assert r.status_code == 404 and r.json()["error"]["code"] == "request_not_found"


async def test_pause_keep_through_a_freezes_both_engines_and_resume_through_b_continues(
    cluster,
):
    streams = [StreamRecorder() for _ in range(8)]
    async with _client() as client, anyio.create_task_group() as tasks:
        for i, recorder in enumerate(streams):
            gateway = cluster.a if i % 2 else cluster.b
            tasks.start_soon(recorder.run, client, f"{gateway.url}/v1/chat/completions", chat_body(150), USER)
        await _until(lambda: all(r.events >= 3 for r in streams))
        listing = (await client.get(f"{cluster.b.url}/v1/requests", headers=ADMIN)).json()["data"]
        assert {e["engine"] for e in listing} == set(cluster.addresses), "the streams should use both engines"
        assert len({e["replica"] for e in listing}) == 2

        r = await client.post(f"{cluster.a.url}/pause", params={"mode": "keep"}, headers=ADMIN)
        assert r.status_code == 200
        await anyio.sleep(0.15)
        frozen = [r.events for r in streams]
        await anyio.sleep(0.5)
        assert [r.events for r in streams] == frozen, "tokens arrived while paused (keep)"
        for gateway in (cluster.a, cluster.b):
            assert (await client.get(f"{gateway.url}/is_paused", headers=ADMIN)).json()["is_paused"] is True
        r = await client.post(f"{cluster.b.url}/resume", headers=ADMIN)
        assert r.status_code == 200
        assert (await client.get(f"{cluster.a.url}/is_paused", headers=ADMIN)).json()["is_paused"] is False
    for recorder in streams:
        shape = check_chat_stream(recorder.payloads())
        assert shape["finish"] == {0: "length"}


async def test_rate_limits_hold_across_both_gateways(cluster):
    key = bearer(RPM_KEY)
    async with _client() as client:
        codes, retry = [], []
        for i in range(8):
            gateway = (cluster.a, cluster.b)[i % 2]
            r = await client.post(
                f"{gateway.url}/v1/chat/completions",
                json=chat_body(2, stream=False),
                headers=key,
            )
            codes.append(r.status_code)
            if r.status_code == 429:
                retry.append(int(r.headers["retry-after"]))
                error = r.json()["error"]
                assert error["type"] == "rate_limit_error" and error["code"] == "rate_limit_exceeded"
        assert codes == [200] * 6 + [429] * 2
        assert all(1 <= s <= 10 for s in retry)
        status = (await client.get(f"{cluster.a.url}/v1/rate_limits", headers=key)).json()
        assert status["requests"] == {"limit_per_minute": 6, "remaining": 0}
        # another key is not affected
        assert (
            await client.post(f"{cluster.a.url}/v1/chat/completions", json=chat_body(2, stream=False), headers=USER)
        ).status_code == 200

        # tokens: a request of ~50 tokens through A leaves 60 - 50; the next one through B spends the rest;
        # a third one, through A, is refused until the bucket refills
        key = bearer(TPM_KEY)
        for gateway in (cluster.a, cluster.b):
            r = await client.post(
                f"{gateway.url}/v1/chat/completions",
                json=chat_body(20, stream=False),
                headers=key,
            )
            assert r.status_code == 200
            spent = r.json()["usage"]["total_tokens"]
            assert spent > 30

        async def tokens_left() -> int:
            return (await client.get(f"{cluster.b.url}/v1/rate_limits", headers=key)).json()["tokens"]["remaining"]

        with anyio.fail_after(5):
            while await tokens_left() >= 0:
                await anyio.sleep(0.02)
        r = await client.post(f"{cluster.a.url}/v1/chat/completions", json=chat_body(2, stream=False), headers=key)
        assert r.status_code == 429 and "tokens per minute" in r.json()["error"]["message"]
        assert int(r.headers["retry-after"]) >= 1


async def test_sessions_are_shared_owned_and_bound_to_one_engine(cluster):
    sid = "agent-run-1"
    headers = {**USER, "X-Session-Id": sid}
    messages: list[dict] = []
    engines = set()
    async with _client() as client:
        for turn in range(6):
            gateway = (cluster.a, cluster.b)[turn % 2]
            messages.append({"role": "user", "content": f"turn {turn}"})
            if turn % 3 == 2:  # streamed turns record their reply too
                recorder = await StreamRecorder().run(
                    client, f"{gateway.url}/v1/chat/completions", chat_body(3, messages=messages), headers
                )
                reply = "".join(check_chat_stream(recorder.payloads())["texts"].values())
            else:
                r = await client.post(
                    f"{gateway.url}/v1/chat/completions",
                    json=chat_body(3, stream=False, messages=messages),
                    headers=headers,
                )
                assert r.status_code == 200
                reply = r.json()["choices"][0]["message"]["content"]
            messages.append({"role": "assistant", "content": reply})
            await anyio.sleep(0.05)  # the turn is recorded in the background
            session = (await client.get(f"{cluster.b.url}/v1/sessions/{sid}", headers=USER)).json()
            engines.add(session["engine"])
            assert session["turns"] == turn + 1
        assert len(engines) == 1 and engines <= set(cluster.addresses), "the session moved between engines"
        assert session["messages"] == messages
        assert session["usage"]["completion_tokens"] == 18 and session["usage"]["prompt_tokens"] > 0
        assert session["owner"].startswith("key:") and session["requests_in_flight"] == []

        # owner or admin only (the admin by the listed id: the id filed under its key); the list is for admins
        r = await client.get(f"{cluster.a.url}/v1/sessions/{sid}", headers=USER_2)
        assert r.status_code == 404 and r.json()["error"]["code"] == "session_not_found"
        assert (await client.get(f"{cluster.a.url}/v1/sessions", headers=USER)).status_code == 403
        listed = (await client.get(f"{cluster.a.url}/v1/sessions", headers=ADMIN)).json()["data"]
        [filed] = [s["id"] for s in listed if s["id"].endswith(f".{sid}")]
        assert "messages" not in listed[0]
        assert (await client.get(f"{cluster.a.url}/v1/sessions/{filed}", headers=ADMIN)).json()["turns"] == 6
        r = await client.post(
            f"{cluster.a.url}/v1/chat/completions",
            json=chat_body(4, stream=False),
            headers={**USER_2, "X-Session-Id": sid},
        )
        assert r.status_code == 200  # USER_2's own session of that id (issue 50), never USER's
        await anyio.sleep(0.05)
        assert (await client.get(f"{cluster.b.url}/v1/sessions/{sid}", headers=USER)).json()["turns"] == 6
        r = await client.post(
            f"{cluster.a.url}/v1/chat/completions",
            json=chat_body(4, stream=False),
            headers={**USER, "X-Session-Id": "has space"},
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == "X-Session-Id"


def test_a_program_keeps_its_engine_through_either_gateway(cluster):
    """An agent program named by ``prompt_cache_key``, no session: each turn goes to the engine
    its last turn ran on, through either gateway (without the record, each gateway's ties taken
    in turn would send its second turn to the other engine)."""
    engines = []
    for turn in range(4):
        gateway = (cluster.a, cluster.b)[turn % 2]
        before = first_tokens_by_engine(gateway.url)
        r = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            headers=USER,
            json=chat_body(3, stream=False, prompt_cache_key="agent-7"),
        )
        assert r.status_code == 200, r.text
        after = first_tokens_by_engine(gateway.url)
        engines += [engine for engine, count in after.items() if count > before.get(engine, 0)]
    assert len(engines) == 4 and len(set(engines)) == 1, f"the program moved between engines: {engines}"


async def test_deleting_a_session_aborts_its_stream_on_the_other_gateway(cluster):
    sid = "to-delete"
    recorder = StreamRecorder()
    async with _client() as client, anyio.create_task_group() as tasks:
        tasks.start_soon(
            recorder.run, client, f"{cluster.a.url}/v1/chat/completions", chat_body(900), {**USER, "X-Session-Id": sid}
        )
        await _until(lambda: recorder.events >= 3)
        assert (await client.delete(f"{cluster.b.url}/v1/sessions/{sid}", headers=USER_2)).status_code == 404
        r = await client.delete(f"{cluster.b.url}/v1/sessions/{sid}", headers=USER)
        assert r.status_code == 200 and r.json()["deleted"] is True and len(r.json()["aborted"]) == 1
        await _until(lambda: recorder.raw.endswith("data: [DONE]\r\n\r\n"), timeout=2)
        assert _finish(recorder) == "abort"
        await anyio.sleep(0.1)  # the aborted request's end must not bring the session back
        assert (await client.get(f"{cluster.a.url}/v1/sessions/{sid}", headers=USER)).status_code == 404


def test_responses_chain_across_both_gateways_a_restart_and_a_cancel_from_the_other(cluster):
    """``previous_response_id`` continues on any replica and after a restart, on the chain's
    engine (its prefix comes from that engine's cache); another key neither reads nor chains
    it; a background response is cancelled through the other gateway."""

    def client(gateway, key=USER_KEY):
        return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)

    first = client(cluster.a).responses.create(model=MODEL, input="Hello there", max_output_tokens=4)
    second = client(cluster.b).responses.create(
        model=MODEL, input="Again", previous_response_id=first.id, max_output_tokens=4
    )
    assert (
        second.usage.input_tokens > first.usage.total_tokens and second.usage.input_tokens_details.cached_tokens >= 16
    )
    cluster.restart_a()
    third = client(cluster.a).responses.create(
        model=MODEL, input="Once more", previous_response_id=second.id, max_output_tokens=4
    )
    assert third.usage.input_tokens > second.usage.total_tokens
    assert third.usage.input_tokens_details.cached_tokens >= second.usage.input_tokens_details.cached_tokens
    other = client(cluster.b, USER_KEY_2)
    with pytest.raises(openai.NotFoundError):
        other.responses.retrieve(third.id)
    with pytest.raises(openai.BadRequestError) as caught:
        other.responses.create(model=MODEL, input="Hi", previous_response_id=third.id, max_output_tokens=4)
    assert caught.value.code == "previous_response_not_found"
    long = client(cluster.b).responses.create(model=MODEL, input="Go on", max_output_tokens=900, background=True)
    wait_for(lambda: client(cluster.a).responses.retrieve(long.id).status == "in_progress", timeout=10)
    assert client(cluster.a).responses.cancel(long.id).status == "cancelled"
    wait_for(
        lambda: all(engine_idle(g.url) for g in (cluster.a, cluster.b)),
        timeout=5,
        message="the cancelled generation to stop on its engine",
    )
    assert client(cluster.b).responses.retrieve(long.id).status == "cancelled"


def test_a_background_response_whose_gateway_crashed_is_failed_when_it_restarts(cluster):
    """A gateway killed mid-response leaves it ``in_progress`` in Redis; once the dead replica's
    heartbeat key lapses, within the README's 15 s (issue 36: liveness by heartbeat, not by a pid
    that another PID namespace may reuse), a sweep resolves it (failed, saying why), while the
    other gateway's own carries on."""

    def client(gateway):
        return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=USER_KEY, max_retries=0)

    orphan = client(cluster.a).responses.create(model=MODEL, input="Go on", max_output_tokens=900, background=True)
    wait_for(lambda: client(cluster.b).responses.retrieve(orphan.id).status == "in_progress", timeout=10)
    elsewhere = client(cluster.b).responses.create(model=MODEL, input="Go", max_output_tokens=300, background=True)
    cluster.restart_a(kill=True)  # returns once A serves again
    wait_for(
        lambda: client(cluster.a).responses.retrieve(orphan.id).status == "failed",
        timeout=16,  # the README's bound: the heartbeat's 10 s TTL and the 5 s sweep
        message="the crashed gateway's response to be resolved within the stated bound",
    )
    failed = client(cluster.b).responses.retrieve(orphan.id)
    assert failed.error.code == "server_error" and "stopped before it finished" in failed.error.message
    assert client(cluster.a).responses.retrieve(elsewhere.id).status in ("queued", "in_progress", "incomplete")
    wait_for(
        lambda: client(cluster.a).responses.retrieve(elsewhere.id).status == "incomplete",
        timeout=15,
        message="the live gateway's response to run to its max_output_tokens",
    )
    wait_for(
        lambda: all(engine_idle(g.url) for g in (cluster.a, cluster.b)),
        timeout=10,
        message="the crashed gateway's generation to end on its engine",
    )


def test_sessions_survive_a_gateway_restart(cluster):
    sid = "survivor"
    headers = {**USER, "X-Session-Id": sid}
    for _ in range(2):
        assert (
            httpx.post(
                f"{cluster.a.url}/v1/chat/completions", json=chat_body(4, stream=False), headers=headers
            ).status_code
            == 200
        )
    wait_for(
        lambda: httpx.get(f"{cluster.b.url}/v1/sessions/{sid}", headers=USER).json()["turns"] == 2,
        timeout=2,
    )
    before = httpx.get(f"{cluster.b.url}/v1/sessions/{sid}", headers=USER).json()
    cluster.restart_a()
    after = httpx.get(f"{cluster.a.url}/v1/sessions/{sid}", headers=USER).json()
    assert {k: after[k] for k in ("turns", "usage", "engine", "messages", "created")} == {
        k: before[k] for k in ("turns", "usage", "engine", "messages", "created")
    }
    assert (
        httpx.post(f"{cluster.a.url}/v1/chat/completions", json=chat_body(4, stream=False), headers=headers).status_code
        == 200
    )
    wait_for(
        lambda: httpx.get(f"{cluster.a.url}/v1/sessions/{sid}", headers=USER).json()["turns"] == 3,
        timeout=2,
    )
    assert httpx.get(f"{cluster.a.url}/v1/sessions/{sid}", headers=USER).json()["engine"] == before["engine"]


@pytest.mark.slow
async def test_a_gateway_started_while_paused_starts_paused(cluster, tmp_path):
    """A new replica with an engine of its own joins a paused cluster: its engine
    is paused before it serves, and a resume through another gateway reaches it."""
    async with _client() as client:
        assert (await client.post(f"{cluster.a.url}/pause", params={"mode": "keep"}, headers=ADMIN)).status_code == 200
        # Formatted by hand: each flag beside its value, as on a command line.
        joiner = launch_serve(tmp_path, "joiner", "--runner", "null", "--null-step-seconds", "0.01", "--max-model-len",
                              "1024", "--redis-url", cluster.redis.url, "--admin-key", ADMIN_KEY)  # fmt: skip
        try:
            await anyio.to_thread.run_sync(wait_healthy, joiner)
            r = await client.get(f"{joiner.url}/is_paused", headers=ADMIN)
            assert r.json()["is_paused"] is True
            late = StreamRecorder()
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(late.run, client, f"{joiner.url}/v1/chat/completions", chat_body(8), {})
                await anyio.sleep(0.5)
                assert late.events <= 1, "the new replica's engine ran while the cluster was paused"
                assert (await client.post(f"{cluster.b.url}/resume", headers=ADMIN)).status_code == 200
            assert _finish(late) == "length"
        finally:
            await client.post(f"{cluster.b.url}/resume", headers=ADMIN)
            await anyio.to_thread.run_sync(stop_all, joiner)


@pytest.mark.slow
async def test_redis_killed_mid_load_then_restarted(cluster):
    """Last in this module: it kills the cluster's Redis."""
    url_a, url_b = cluster.a.url, cluster.b.url
    streams = [StreamRecorder() for _ in range(16)]
    async with _client() as client:
        # a session written before the outage (Redis syncs its file on every write here)
        saved = {**USER, "X-Session-Id": "outage-survivor"}
        assert (
            await client.post(f"{url_a}/v1/chat/completions", json=chat_body(4, stream=False), headers=saved)
        ).status_code == 200
        with anyio.fail_after(5):
            while (await client.get(f"{url_a}/v1/sessions/outage-survivor", headers=USER)).status_code != 200:
                await anyio.sleep(0.05)
        async with anyio.create_task_group() as tasks:
            for i, recorder in enumerate(streams):
                url = (url_a, url_b)[i % 2]
                tasks.start_soon(recorder.run, client, f"{url}/v1/chat/completions", chat_body(120), USER)
            await _until(lambda: all(r.events >= 3 for r in streams))
            cluster.redis.kill()

            # while it is down: stateless requests work, sessions are 503
            session_headers = {**USER, "X-Session-Id": "during-outage"}
            for url in (url_a, url_b):
                r = await client.post(
                    f"{url}/v1/chat/completions", json=chat_body(4, stream=False), headers=session_headers
                )
                assert r.status_code == 503, r.text
                error = r.json()["error"]
                assert error["code"] == "redis_unavailable" and "Redis" in error["message"]
                assert error["type"] == "service_unavailable"
                assert (await client.get(f"{url}/v1/sessions/outage-survivor", headers=USER)).status_code == 503
                # the kill switch still works, on this replica, and says the others were not told
                r = await client.post(f"{url}/pause", params={"mode": "keep"}, headers=ADMIN)
                assert r.status_code == 200 and "not told" in r.json()["warning"]
                r = await client.post(f"{url}/resume", headers=ADMIN)
                assert r.status_code == 200 and "not told" in r.json()["warning"]
                r = await client.post(f"{url}/v1/chat/completions", json=chat_body(4, stream=False), headers=USER)
                assert r.status_code == 200
                r = await client.post(
                    f"{url}/v1/chat/completions", json=chat_body(4, stream=False), headers=bearer(RPM_KEY)
                )
                assert r.status_code == 200  # --rate-limit-redis-down allow (the default)
                r = await client.post(
                    f"{url}/v1/chat/completions",
                    headers=USER,
                    json=chat_body(4, stream=False, prompt_cache_key="during-outage"),
                )
                assert r.status_code == 200, r.text  # a program without a session: served without its record
                health = (await client.get(f"{url}/health")).json()
                assert health["status"] == "degraded" and health["redis"] == "down"
        for recorder in streams:
            assert check_chat_stream(recorder.payloads())["finish"] == {0: "length"}

        # back: the next session request works at once, on either gateway
        cluster.redis.start()
        for url in (url_a, url_b):
            r = await client.post(
                f"{url}/v1/chat/completions", json=chat_body(4, stream=False), headers=session_headers
            )
            assert r.status_code == 200, r.text
        # and the control channel is back: a cross-gateway abort works again
        with anyio.fail_after(10):
            while [(await client.get(f"{u}/health")).json()["redis"] for u in (url_a, url_b)] != ["up", "up"]:
                await anyio.sleep(0.05)
        recorder = StreamRecorder()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(
                recorder.run,
                client,
                f"{url_a}/v1/chat/completions",
                chat_body(900),
                {**USER, "X-Request-Id": "after-outage"},
            )
            await _until(lambda: recorder.events >= 3)
            assert (await client.delete(f"{url_b}/v1/requests/after-outage", headers=ADMIN)).status_code == 200
            await _until(lambda: recorder.raw.endswith("data: [DONE]\r\n\r\n"), timeout=2)
        assert _finish(recorder) == "abort"
        # the session written before the outage is still there (append-only file)
        r = await client.get(f"{url_a}/v1/sessions/outage-survivor", headers=USER)
        assert r.status_code == 200, r.text
