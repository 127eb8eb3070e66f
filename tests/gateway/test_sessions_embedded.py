"""`agentgate serve` with its embedded Redis: several engines and gateway
workers on one port acting as one, session TTL, sessions kept over a
restart, and nothing left running after a stop."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.support.http import chat_body, wait_for
from tests.support.servers import alive, launch_serve, stop_all, wait_healthy

NULL = (
    "--runner",
    "null",
    "--null-step-seconds",
    "0.002",
    "--max-model-len",
    "1024",
    "--num-kv-blocks",
    "2048",
)


def _session(url: str, sid: str) -> httpx.Response:
    return httpx.get(f"{url}/v1/sessions/{sid}", timeout=10)


@pytest.mark.slow
def test_serve_with_engines_and_gateway_workers_acts_as_one_and_expires_sessions(
    tmp_path,
):
    server = launch_serve(
        tmp_path,
        "workers",
        *NULL,
        "--engines",
        "2",
        "--gateway-workers",
        "2",
        "--session-ttl",
        "2",
        "--redis-dir",
        str(tmp_path / "redis"),
    )
    try:
        wait_healthy(server)
        replicas: set[str] = set()

        def both_workers_answer() -> bool:
            with httpx.Client(timeout=10) as fresh:  # a new connection each time: the kernel spreads them
                health = fresh.get(f"{server.url}/health").json()
            assert health["engines"] == 2 and health["redis"] == "up"
            replicas.add(health["replica"])
            return len(replicas) == 2

        wait_for(
            both_workers_answer,
            timeout=30,
            interval=0.02,
            message="both gateway workers to answer",
        )
        listed = httpx.get(f"{server.url}/v1/replicas").json()["data"]
        assert {r["id"] for r in listed} == replicas

        # one session, its turns spread over both workers, bound to one engine of the two
        sid = "spread"
        engines = set()
        for turn in range(6):
            with httpx.Client(timeout=10) as fresh:
                r = fresh.post(
                    f"{server.url}/v1/chat/completions",
                    json=chat_body(4, stream=False, messages=f"turn {turn}"),
                    headers={"X-Session-Id": sid},
                )
                assert r.status_code == 200
            wait_for(
                lambda t=turn: _session(server.url, sid).json()["turns"] == t + 1,
                timeout=2,
            )
            engines.add(_session(server.url, sid).json()["engine"])
        assert len(engines) == 1

        # TTL: gone 2 s after its last activity, from the list too
        deadline = time.monotonic() + 6
        while _session(server.url, sid).status_code == 200:
            assert time.monotonic() < deadline, "the session outlived its TTL"
            time.sleep(0.2)
        assert _session(server.url, sid).json()["error"]["code"] == "session_not_found"
        assert sid not in [s["id"] for s in httpx.get(f"{server.url}/v1/sessions").json()["data"]]

        tree = server.all_descendants()
        assert any("redis-server" in _cmdline(p) for p in tree)
    finally:
        stop_all(server)
    wait_for(
        lambda: not any(alive(p) for p in tree),
        timeout=20,
        message="every child (engines, workers, redis)",
    )


def test_the_embedded_redis_keeps_sessions_over_a_restart(tmp_path):
    data = tmp_path / "redis"
    server = launch_serve(tmp_path, "first", *NULL, "--redis-dir", str(data))
    try:
        wait_healthy(server)
        assert (
            httpx.post(
                f"{server.url}/v1/chat/completions",
                json=chat_body(4, stream=False, messages="hi"),
                headers={"X-Session-Id": "kept"},
            ).status_code
            == 200
        )
        wait_for(lambda: _session(server.url, "kept").json()["turns"] == 1, timeout=2)
        before = _session(server.url, "kept").json()
        redis_pids = [p for p in server.all_descendants() if "redis-server" in _cmdline(p)]
        assert len(redis_pids) == 1 and "unixsocket" in _cmdline(redis_pids[0])  # private socket, no TCP port
    finally:
        stop_all(server)
    assert not alive(redis_pids[0])
    server = launch_serve(tmp_path, "second", *NULL, "--redis-dir", str(data), port=server.port)
    try:
        wait_healthy(server)
        after = _session(server.url, "kept").json()
        assert after["turns"] == 1 and after["messages"] == before["messages"] and after["usage"] == before["usage"]
    finally:
        stop_all(server)


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""
