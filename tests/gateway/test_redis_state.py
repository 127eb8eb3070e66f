"""The Redis pieces on a real redis-server, in process: rate-limit buckets,
sessions (owner, delete, no resurrection), faults and recovery, the
embedded server."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

import anyio
import pytest

from agentgate.gateway.admission.rate_limits import RateLimitedError, RateLimiter, parse_key_limits
from agentgate.gateway.api_types.responses import ResponseObject
from agentgate.gateway.context import RequestContext
from agentgate.gateway.errors import NotFoundError
from agentgate.gateway.responses_api.store import ResponseStore, StoredResponse
from agentgate.gateway.state.embedded_redis import EmbeddedRedis, EmbeddedRedisError, ping
from agentgate.gateway.state.key_digests import key_digest, use_digest_secret
from agentgate.gateway.state.redis_state import RedisUnavailableError, SharedState
from agentgate.gateway.state.requests_in_flight import RequestRegistry
from agentgate.gateway.state.sessions import INDEX_SKEW_S, SessionStore

pytestmark = pytest.mark.anyio


@dataclass
class FakeEngine:
    """What the registry reads of an engine client: its address."""

    address: str


@pytest.fixture
async def shared(redis_server, request):
    state = SharedState(
        redis_server.url,
        prefix=f"t{time.monotonic_ns()}",
        replica_id="r1",
        session_ttl=60,
    )
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(state._writer)
        yield state
        await state.flush()
        tasks.cancel_scope.cancel()
    await state.close()


async def test_request_buckets_refuse_with_retry_after(shared):
    limiter = RateLimiter(shared, rpm=3)
    for _ in range(3):
        await limiter.admit("k")
    with pytest.raises(RateLimitedError) as refused:
        await limiter.admit("k")
    assert refused.value.status_code == 429 and refused.value.code == "rate_limit_exceeded"
    assert 19 <= int(refused.value.headers["Retry-After"]) <= 20  # one request refills in 60 / 3 s
    await limiter.admit("other")  # per key
    status = await limiter.status("k")
    assert status["requests"] == {"limit_per_minute": 3, "remaining": 0}
    assert status["tokens"]["limit_per_minute"] is None


async def test_token_buckets_go_negative_and_make_the_key_wait(shared):
    limiter = RateLimiter(shared, tpm=600)  # 10 tokens a second
    await limiter.admit("k")
    limiter.debit("k", 650)  # more than the bucket: the key is in debt
    await shared.flush()
    with pytest.raises(RateLimitedError) as refused:
        await limiter.admit("k")
    assert "tokens per minute" in refused.value.message
    assert 5 <= int(refused.value.headers["Retry-After"]) <= 6  # 51 tokens to refill at 10/s
    assert (await limiter.status("k"))["tokens"]["remaining"] <= -49


def test_key_digests_are_keyed_by_the_digest_secret():
    try:
        use_digest_secret("one")
        first = key_digest("weak-key")
        use_digest_secret("two")
        assert key_digest("weak-key") != first and key_digest("other") != key_digest("weak-key")
        use_digest_secret("one")
        assert key_digest("weak-key") == first != hashlib.sha256(b"weak-key").hexdigest()
        assert key_digest(None) == "anonymous"
    finally:
        use_digest_secret(None)  # this machine's secret, as every gateway of the test run uses


def test_key_limits_parse():
    assert parse_key_limits(["a:b:5:0"]) == {key_digest("a:b"): (5, 0)}
    with pytest.raises(ValueError):
        parse_key_limits(["nolimits"])
    with pytest.raises(ValueError):
        parse_key_limits(["k:-1:0"])


async def test_sessions_are_owned_and_a_deleted_one_stays_deleted(shared):
    registry = RequestRegistry(shared)
    store = SessionStore(shared, registry)
    assert await store.open("s", "owner", admin=False) is None
    with pytest.raises(NotFoundError) as other:  # the answer a missing session gets: no existence oracle
        await store.open("s", "someone-else", admin=False)
    with pytest.raises(NotFoundError) as missing:
        await store.get("never-made", "someone-else", admin=False)
    assert other.value.code == missing.value.code == "session_not_found"
    assert await store.open("s", "admin-digest", admin=True) is None  # admins may use any session
    registry.register("r1", FakeEngine("ipc:///engine-a"), ["r1"], RequestContext("owner", "s"))
    store.bind("s", "r1", "ipc:///engine-a")
    await shared.flush()
    assert await store.open("s", "owner", admin=False) == "ipc:///engine-a"  # affinity
    assert (await store.get("s", "owner", admin=False))["engine"] == "ipc:///engine-a"
    assert await store.delete("s", "owner", admin=False) == ["r1"]
    registry.unregister("r1")  # the aborted request ends afterwards
    store.record_turn("s", "r1", (10, 5), [], None)
    await shared.flush()
    assert not await shared.client.exists(shared.keys.session("s"))
    assert not await shared.client.exists(shared.keys.request("r1"))


async def test_a_turn_is_recorded_and_listed(shared):
    registry = RequestRegistry(shared)
    store = SessionStore(shared, registry)
    await store.open("t", "owner", admin=False)
    registry.register("q1", FakeEngine("e"), ["q1"], RequestContext("owner", "t"))
    store.bind("t", "q1", "e")
    registry.unregister("q1")
    store.record_turn("t", "q1", (7, 3), [{"role": "user", "content": "hi"}], None)
    await shared.flush()
    session = await store.get("t", "owner", admin=False)
    assert session["turns"] == 1 and session["usage"] == {
        "prompt_tokens": 7,
        "completion_tokens": 3,
        "total_tokens": 10,
    }
    assert session["messages"] == [{"role": "user", "content": "hi"}] and session["requests_in_flight"] == []
    assert 0 < session["expires_at"] - time.time() <= 61
    assert [s["id"] for s in await store.list()] == ["t"]


async def test_redis_down_is_a_quick_503_and_recovery_needs_no_restart(redis_server, shared):
    registry = RequestRegistry(shared)
    store = SessionStore(shared, registry)
    await store.open("x", "o", admin=False)
    allow = RateLimiter(shared, rpm=100)
    reject = RateLimiter(shared, rpm=100, redis_down="reject")
    redis_server.kill()
    try:
        began = time.monotonic()
        with pytest.raises(RedisUnavailableError) as down:
            await store.open("x", "o", admin=False)
        assert time.monotonic() - began < 1.5
        assert down.value.status_code == 503 and down.value.code == "redis_unavailable"
        assert "X-Session-Id" in down.value.message and not shared.up
        await allow.admit("k")  # served unlimited
        with pytest.raises(RedisUnavailableError):
            await reject.admit("k")
        registry.register("gone", FakeEngine("e"), ["gone"], RequestContext("o"))
        registry.unregister("gone")  # its Redis writes are dropped, not raised
        await shared.flush()
        assert shared.dropped_writes >= 1
    finally:
        redis_server.start()
    assert await store.open("x", "o", admin=False) is None and shared.up  # the same client, reconnected


async def test_pooled_connections_from_before_a_restart_are_retried_not_surfaced(redis_server, shared):
    """A restart leaves the pool's idle connections dead; each one's first use must reconnect
    and retry, not answer 503 after Redis is back (a session read failed so in CI)."""
    registry = RequestRegistry(shared)
    store = SessionStore(shared, registry)
    await store.open("s", "o", admin=False)

    async def read_session() -> None:
        await store.get("s", "o", admin=False)

    async with anyio.create_task_group() as tasks:  # several connections open in the pool at once
        for _ in range(6):
            tasks.start_soon(read_session)
    assert len(shared.client.connection_pool._available_connections) >= 2
    redis_server.kill()
    redis_server.start()
    for _ in range(8):  # every pooled connection is stale: each is used once, none may fail
        assert (await store.get("s", "o", admin=False))["id"] == "s"
        assert await shared.client.ping()


def _running(response_id: str, status: str = "in_progress") -> StoredResponse:
    response = ResponseObject(id=response_id, created_at=0, status=status, model="m", background=True)
    return StoredResponse(owner="o", response=response)


async def _saved_by(shared: SharedState, replica: str, response_id: str) -> None:
    """Save a running response as replica ``replica`` would (same Redis, same prefix)."""
    other = SharedState(shared.url, prefix=shared.keys.prefix, replica_id=replica, session_ttl=60)
    try:
        assert await ResponseStore(other, ttl=60).save(_running(response_id))
    finally:
        await other.close()


async def test_responses_left_running_by_a_replica_that_is_gone_are_failed(shared):
    """A background response whose gateway died stays ``in_progress`` for ever unless a replica
    resolves it: the sweep fails those of replicas without a heartbeat key (whatever their id
    says of host and pid: a pid of this host that is gone, or this process's), and keeps the
    live ones' and its own."""
    store = ResponseStore(shared, ttl=60)
    host = socket.gethostname()
    exited = subprocess.Popen([sys.executable, "-c", ""])
    exited.wait()
    live_elsewhere = "far-host:8000:12:aaaaaa"
    replicas = {
        "resp_heartbeat_gone": "far-host:8000:13:bbbbbb",  # another host, its heartbeat key expired
        "resp_pid_gone": f"{host}:8000:{exited.pid}:cccccc",  # this host, its process exited
        "resp_restarted_container": f"{host}:8000:{os.getpid()}:dddddd",  # our pid, an earlier life
        "resp_live_elsewhere": live_elsewhere,
    }
    for response_id, replica in replicas.items():
        await _saved_by(shared, replica, response_id)
    await shared.client.set(shared.keys.replica(live_elsewhere), "{}", ex=30)  # its heartbeat
    assert await store.save(_running("resp_ours"))
    assert await store.save(_running("resp_done", "in_progress"))
    assert await store.save(_running("resp_done", "completed"))  # finished: out of the running index

    failed = await store.resolve_orphans()
    assert sorted(failed) == ["resp_heartbeat_gone", "resp_pid_gone", "resp_restarted_container"]
    for response_id in failed:
        response = (await store.load(response_id, "o")).response
        assert response.status == "failed" and response.error.code == "server_error"
        assert replicas[response_id] in response.error.message and "stopped" in response.error.message
    for response_id in ("resp_live_elsewhere", "resp_ours"):
        assert (await store.load(response_id, "o")).response.status == "in_progress"
    assert set(await shared.client.hgetall(shared.keys.running_responses)) == {"resp_live_elsewhere", "resp_ours"}
    assert await store.resolve_orphans() == []  # resolved once

    cancelled = _running("resp_ours")
    cancelled.response.status = "cancelled"
    assert await store.cancel(cancelled)
    assert set(await shared.client.hgetall(shared.keys.running_responses)) == {"resp_live_elsewhere"}


def test_the_embedded_server_runs_on_a_private_socket_and_locks_its_directory(tmp_path):
    with EmbeddedRedis(tmp_path / "data") as redis:
        assert redis.url.startswith("unix://") and ping(redis.socket_path)
        with pytest.raises(EmbeddedRedisError, match="another agentgate"):
            EmbeddedRedis(tmp_path / "data").start()
        process = redis.process
    assert process.poll() is not None
    assert (tmp_path / "data" / "appendonly.aof").exists()


async def test_a_stored_record_that_does_not_decode_is_skipped_and_the_sweep_goes_on(shared, caplog):
    store = ResponseStore(shared, ttl=60)
    await _saved_by(shared, "far-host:8000:13:bbbbbb", "resp_orphan")
    corrupt = shared.keys.response("resp_corrupt")
    await shared.client.hset(corrupt, mapping={"status": "in_progress", "record": "{another version", "owner": "o"})
    await shared.client.hset(shared.keys.running_responses, "resp_corrupt", "far-host:8000:14:cccccc")
    with caplog.at_level("WARNING", logger="agentgate.responses"):
        assert await store.resolve_orphans() == ["resp_orphan"]
        assert await store.resolve_orphans() == []
    [logged] = [r.getMessage() for r in caplog.records if "resp_corrupt" in r.getMessage()]  # once, two sweeps
    assert logged.startswith("left alone: stored response resp_corrupt does not decode (JSON is malformed")
    assert await shared.client.hget(corrupt, "record") == "{another version"


async def test_the_sessions_index_is_trimmed_by_age_on_every_open_not_only_when_listed(shared):
    """Client-chosen session ids never grow P:sessions past the sessions alive (issue 50)."""
    store = SessionStore(shared, RequestRegistry(shared))
    expired = time.time() - shared.session_ttl - INDEX_SKEW_S - 1
    await shared.client.zadd(shared.keys.sessions, {f"old-{i}": expired for i in range(50)})
    await shared.client.zadd(shared.keys.sessions, {"recent": time.time() - shared.session_ttl / 2})
    await store.open("new", "owner", admin=False)
    assert set(await shared.client.zrange(shared.keys.sessions, 0, -1)) == {"recent", "new"}
