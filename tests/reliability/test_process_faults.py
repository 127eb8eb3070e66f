"""What production does to the processes behind a gateway, on live servers:
the engine killed (streams end with an error at once, the engine is
restarted and serves again, ``/health`` names it meanwhile), the embedded
redis-server killed (restarted within seconds, sessions kept, stateless
traffic unaffected, no zombie), and an external Redis down (sessions fail
fast without internal detail, the kill switch still works on this replica,
``/health`` degraded). The long versions (ten kills under load) are
``loadtests/reliability/``."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import anyio
import httpx
import pytest

from agentgate.gateway.engines.pool import EngineTarget, WatchedPid
from agentgate.gateway.engines.supervisor import EngineSupervisor, RestartPolicy
from tests.support.http import StreamRecorder, chat_body, parse_sse, wait_for
from tests.support.servers import (
    NULL_ENGINE,
    RedisServer,
    alive,
    cmdline,
    launch_engine,
    launch_gateway,
    start_server,
    stop_all,
    wait_healthy,
)

pytestmark = pytest.mark.slow


def _health(url: str) -> httpx.Response:
    return httpx.get(f"{url}/health", timeout=5)


@pytest.mark.anyio
async def test_a_killed_engine_errors_its_streams_at_once_and_is_restarted(served):
    url = f"{served.url}/v1/chat/completions"
    [engine] = served.engine_pids()
    recorders = [StreamRecorder() for _ in range(4)]
    async with httpx.AsyncClient(timeout=30) as client, anyio.create_task_group() as tasks:
        for recorder in recorders:
            tasks.start_soon(recorder.run, client, url, chat_body(900), {})
        with anyio.fail_after(10):
            while any(r.events < 3 for r in recorders):
                await anyio.sleep(0.01)
        killed = time.monotonic()
        os.kill(engine, signal.SIGKILL)
    for recorder in recorders:  # every stream answered with an error, within a second of the kill
        payloads = parse_sse(recorder.raw)
        assert payloads[-1] == "[DONE]" and '"error"' in payloads[-2], payloads[-2:]
        assert recorder.times[-1] - killed < 1.0
    down = _health(served.url)
    assert down.status_code == 503 and "engine 0 at" in down.json()["error"]["message"]
    assert "down since" in down.json()["error"]["message"]
    wait_for(lambda: _health(served.url).status_code == 200, timeout=30, message="the engine back")
    assert not alive(engine)  # reaped by the supervisor: no zombie
    [restarted] = served.engine_pids()
    assert restarted != engine
    r = httpx.post(url, json=chat_body(4, stream=False), timeout=30)
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "length"
    assert "killed by SIGKILL" in served.log() and "serving again after" in served.log()


def test_a_killed_embedded_redis_is_restarted_with_its_sessions(served):
    url = f"{served.url}/v1/chat/completions"
    r = httpx.post(url, json=chat_body(4, stream=False, messages="hi"), headers={"X-Session-Id": "kept"}, timeout=30)
    assert r.status_code == 200
    session = f"{served.url}/v1/sessions/kept"
    wait_for(lambda: httpx.get(session).json().get("turns") == 1, timeout=5, message="the turn recorded")
    time.sleep(1.2)  # appendfsync everysec: what is a second old is on disk
    [redis] = [p for p in served.all_descendants() if "redis-server" in cmdline(p)]
    killed = time.monotonic()
    os.kill(redis, signal.SIGKILL)
    # stateless traffic does not notice
    assert httpx.post(url, json=chat_body(4, stream=False), timeout=30).status_code == 200
    wait_for(lambda: httpx.get(session).status_code == 200, timeout=5, message="sessions served again")
    assert time.monotonic() - killed < 5
    assert httpx.get(session).json()["turns"] == 1  # loaded back from the append-only file
    [restarted] = [p for p in served.all_descendants() if "redis-server" in cmdline(p)]
    assert restarted != redis and not alive(redis)  # the dead one was reaped
    wait_for(lambda: _health(served.url).json()["status"] == "ok", timeout=5, message="/health ok again")
    assert f"redis-server (pid {redis}) died" in served.log()


def test_with_an_external_redis_down_sessions_fail_fast_and_the_kill_switch_still_works(tmp_path):
    redis = RedisServer(tmp_path / "redis").start()
    engine, address = launch_engine(tmp_path, "engine")
    gateway = launch_gateway(tmp_path, "gateway", [address], redis.url, "--admin-key", "admin")
    admin = {"Authorization": "Bearer admin"}
    try:
        wait_healthy(gateway, timeout=120)
        redis.kill()
        started = time.monotonic()
        r = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            json=chat_body(4, stream=False),
            headers={"X-Session-Id": "s1"},
            timeout=10,
        )
        assert r.status_code == 503 and time.monotonic() - started < 2
        error = r.json()["error"]
        assert error["code"] == "redis_unavailable" and "redis" in error["message"].lower()
        assert str(redis.port) not in error["message"] and "Error" not in error["message"]  # no internals
        assert (
            httpx.post(f"{gateway.url}/v1/chat/completions", json=chat_body(4, stream=False), timeout=10).status_code
            == 200
        )
        paused = httpx.post(f"{gateway.url}/pause", params={"mode": "keep"}, headers=admin, timeout=10)
        assert paused.status_code == 200 and "not told" in paused.json()["warning"]
        assert httpx.get(f"{gateway.url}/is_paused", headers=admin).json() == {"is_paused": True, "mode": "keep"}
        aborted = httpx.post(f"{gateway.url}/abort_requests", json={}, headers=admin, timeout=10)
        assert aborted.status_code == 200 and "warning" in aborted.json()
        resumed = httpx.post(f"{gateway.url}/resume", headers=admin, timeout=10)
        assert resumed.status_code == 200 and resumed.json()["is_paused"] is False and "warning" in resumed.json()
        wait_for(lambda: _health(gateway.url).json()["status"] == "degraded", timeout=5, message="degraded")
        health = _health(gateway.url)
        assert health.status_code == 200 and any("redis" in reason for reason in health.json()["reasons"])
        redis.start()  # same port: the client reconnects, no gateway restart
        wait_for(lambda: _health(gateway.url).json()["status"] == "ok", timeout=10, message="ok again")
        assert (
            httpx.post(
                f"{gateway.url}/v1/chat/completions",
                json=chat_body(4, stream=False),
                headers={"X-Session-Id": "s1"},
                timeout=10,
            ).status_code
            == 200
        )
    finally:
        stop_all(gateway, engine)
        redis.stop()


def test_with_gateway_workers_the_supervisor_restarts_a_killed_engine_and_the_workers_reattach(tmp_path):
    server = start_server(tmp_path, *NULL_ENGINE, "--gateway-workers", "2")
    try:
        spawned = server.engine_pids()  # the engine and the two workers, all spawned by multiprocessing
        assert len(spawned) == 3
        engine = min(spawned)  # started before the workers
        # /health answered by one worker says nothing of the other: kill once both have attached
        wait_for(lambda: server.log().count("Application startup complete") == 2, timeout=30, message="both up")
        os.kill(engine, signal.SIGKILL)
        wait_for(lambda: "restarting it in" in server.log(), timeout=5, message="the death noticed")
        # both workers (the kernel spreads connections over them) serve again through the new engine
        wait_for(
            lambda: all(_health(server.url).status_code == 200 for _ in range(6)),
            timeout=30,
            message="every worker re-attached",
        )
        for _ in range(4):
            r = httpx.post(f"{server.url}/v1/chat/completions", json=chat_body(4, stream=False), timeout=30)
            assert r.status_code == 200
        assert not alive(engine)
    finally:
        stop_all(server)


@pytest.mark.anyio
async def test_a_gateway_worker_whose_engine_died_while_it_started_attaches_to_the_restarted_one(tmp_path):
    # Under --gateway-workers a worker watches its sibling engine by pid; the supervisor restarts a
    # dead one at its address. A death during the worker's start-up used to fail the worker (and so
    # the whole server): it waits for the restarted engine instead.
    gone = subprocess.Popen(["true"])
    gone.wait()
    address = f"ipc://{tmp_path}/engine.sock"
    supervisor = EngineSupervisor(
        [EngineTarget(address, WatchedPid(gone.pid))], policy=RestartPolicy(), startup_timeout=60
    )
    engine = None
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(supervisor.run)
            with anyio.fail_after(10):  # the watched pid found dead: waiting for a new engine
                while supervisor.processes[0] is not None:
                    await anyio.sleep(0.05)
            assert supervisor.pool is None
            engine, _ = launch_engine(tmp_path, "engine", *NULL_ENGINE)  # the supervisor's restart
            with anyio.fail_after(60):
                while supervisor.pool is None:
                    await anyio.sleep(0.05)
            [client] = supervisor.pool.engines
            assert not client.is_dead and client.info is not None
            tasks.cancel_scope.cancel()
    finally:
        if engine is not None:
            stop_all(engine)
