"""Engines found through Redis, on live processes: a gateway started without ``--engine`` serves
the engines registered in Redis, adds one that starts later and drops one that leaves, without a
restart; an engine's SIGTERM marks its record draining, refuses new work, lets short streams
finish, aborts the rest at ``--drain-seconds`` and exits 0 (``gateway.engines.registry``,
``gateway.engines.discovery``, ``engine.front.process``)."""

from __future__ import annotations

import json
import signal
import time

import anyio
import httpx
import pytest
import redis

from agentgate.gateway.context import ANONYMOUS, client_id, filed_id
from tests.support.http import StreamRecorder, chat_body, parse_sse, wait_for
from tests.support.servers import RedisServer, free_port, launch_command, stop_all, wait_healthy
from tests.support.tiny_models import tiny_chat_dir

pytestmark = pytest.mark.slow

# 20 ms a step: a 100-token stream takes ~2 s, a 3000-token one a minute.
# Formatted by hand: each flag beside its value, as on a command line.
ENGINE = ("--runner", "null", "--null-step-seconds", "0.02", "--max-num-seqs", "64", "--max-model-len", "4096",
          "--num-kv-blocks", "2048")  # fmt: skip
DRAIN_S = 6.0


def _health(url: str) -> dict:
    r = httpx.get(f"{url}/health", timeout=10)
    return {"code": r.status_code, **r.json()}


def _serves_one(url: str) -> bool:
    health = _health(url)
    return health["code"] == 200 and health["engines"] == 1 and health["engines_serving"] == 1


def _engines_of(url: str) -> dict[str, str]:
    """request id -> engine address of the requests in flight (GET /v1/requests, open on loopback,
    lists them by the ids they are filed under: the client's own id behind its key's prefix)."""
    r = httpx.get(f"{url}/v1/requests", timeout=10)
    assert r.status_code == 200, r.text
    return {client_id(item["id"]): item["engine"] for item in r.json()["data"]}


async def _until_listed(url: str, expected: dict[str, str], timeout: float = 10.0) -> None:
    """Until GET /v1/requests lists ``expected``: the registry's Redis entries are written by a
    background writer, off the request's path, so a request may stream before it is listed."""
    with anyio.fail_after(timeout):
        while _engines_of(url) != expected:
            await anyio.sleep(0.05)


def _finish_reason(recorder: StreamRecorder) -> str | None:
    payloads = parse_sse(recorder.raw)
    assert payloads[-1] == "[DONE]", payloads[-3:]
    for payload in reversed(payloads[:-1]):
        choices = json.loads(payload).get("choices") or []
        if choices and choices[0].get("finish_reason"):
            return choices[0]["finish_reason"]
    return None


@pytest.mark.anyio
async def test_gateway_finds_engines_in_redis_and_an_engine_drains_on_sigterm(tmp_path):
    store = RedisServer(tmp_path / "redis").start()
    db = redis.Redis.from_url(store.url, decode_responses=True)
    a, b = (f"tcp://127.0.0.1:{free_port()}" for _ in range(2))
    engine_a = launch_command(
        tmp_path,
        "engine-a",
        "engine",
        "--address",
        a,
        "--redis-url",
        store.url,
        "--drain-seconds",
        str(DRAIN_S),
        *ENGINE,
    )
    port = free_port()
    gateway = launch_command(tmp_path, "gateway", "gateway", "--port", str(port), "--redis-url", store.url, port=port)
    engine_b = None
    try:
        wait_healthy(gateway, timeout=300)
        assert _health(gateway.url)["engines"] == 1
        record = json.loads(db.get(f"agentgate:engine:{a}"))
        assert record["address"] == a and record["state"] == "serving" and record["device"] == "cpu"
        assert record["kv_capacity_tokens"] > 0 and record["max_num_seqs"] == 64 and record["model"]
        assert 0 < db.ttl(f"agentgate:engine:{a}") <= 10 and time.time() - record["started"] < 300

        url = f"{gateway.url}/v1/chat/completions"
        short, long = StreamRecorder(), StreamRecorder()
        async with httpx.AsyncClient(timeout=120) as client, anyio.create_task_group() as tasks:
            tasks.start_soon(short.run, client, url, chat_body(100), {"X-Request-Id": "short"})
            tasks.start_soon(long.run, client, url, chat_body(3000), {"X-Request-Id": "long"})
            with anyio.fail_after(30):
                while short.events < 2 or long.events < 2:
                    await anyio.sleep(0.02)
            await _until_listed(gateway.url, {"short": a, "long": a})
            engine_a.process.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            # The record says draining at once; the gateway stops routing there within its poll.
            wait_for(
                lambda: json.loads(db.get(f"agentgate:engine:{a}") or "{}").get("state") == "draining",
                timeout=2,
                message="the record to say draining",
            )
            # No new request goes to a draining engine: with no other one, the gateway says so itself.
            await anyio.sleep(1.5)  # the gateway's registry poll (1 s)
            refused = await client.post(url, json=chat_body(4, stream=False))
            assert refused.status_code == 503 and "every one is draining" in refused.text, refused.text
            # A second engine started now is found without a gateway restart.
            engine_b = launch_command(tmp_path, "engine-b", "engine", "--address", b, "--redis-url", store.url, *ENGINE)
        ended = time.monotonic()
        # The short stream finished; the long one was aborted at the drain deadline, not before.
        assert _finish_reason(short) == "length"
        assert _finish_reason(long) == "abort"
        assert DRAIN_S - 0.5 < long.times[-1] - signalled < DRAIN_S + 3, long.times[-1] - signalled
        assert engine_a.process.wait(timeout=10) == 0, engine_a.log()[-2000:]
        assert ended - signalled < DRAIN_S + 5
        assert db.get(f"agentgate:engine:{a}") is None  # withdrawn on exit, not left to expire

        wait_for(lambda: db.get(f"agentgate:engine:{b}") is not None, timeout=120, message="engine B registered")
        wait_for(lambda: _serves_one(gateway.url), timeout=10, message="B in the pool, A out of it")
        fresh = StreamRecorder()
        async with httpx.AsyncClient(timeout=60) as client, anyio.create_task_group() as tasks:
            tasks.start_soon(fresh.run, client, url, chat_body(100), {"X-Request-Id": "fresh"})
            with anyio.fail_after(30):
                while fresh.events < 2:
                    await anyio.sleep(0.02)
            await _until_listed(gateway.url, {"fresh": b})
        assert _finish_reason(fresh) == "length"
        assert gateway.process.poll() is None  # the same gateway process throughout
        assert "joined the pool" in gateway.log() and "left the pool" in gateway.log()
    finally:
        stop_all(*(s for s in (gateway, engine_a, engine_b) if s is not None))
        db.close()
        store.stop()


def test_gateway_without_engines_or_redis_is_refused(tmp_path):
    port = free_port()
    gateway = launch_command(tmp_path, "gateway", "gateway", "--port", str(port), port=port)
    assert gateway.process.wait(timeout=60) == 2
    assert "--redis-url to find the engines" in gateway.log()


def _turn(gateway_url: str, sid: str, turn: int) -> str:
    """One non-streamed turn of session ``sid`` through a gateway; the engine the session is bound to after it."""
    r = httpx.post(
        f"{gateway_url}/v1/chat/completions",
        json=chat_body(3, stream=False, messages=f"turn {turn}"),
        headers={"X-Session-Id": sid},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    engine: list[str] = []
    wait_for(
        lambda: (
            engine.append(httpx.get(f"{gateway_url}/v1/sessions/{sid}", timeout=10).json()["engine"])
            or engine[-1] is not None
        ),
        timeout=5,
        message="the session bound",
    )
    return engine[-1]


def test_session_affinity_is_shared_by_gateways_and_moves_once_when_its_engine_is_gone(tmp_path):
    """Two gateways and two engines found in Redis: a session keeps its engine whichever gateway it
    comes through; when that engine is killed the session moves to the other once, and stays there,
    even after the first is back. The binding lives in the session's hash, with the session's TTL."""
    store = RedisServer(tmp_path / "redis").start()
    db = redis.Redis.from_url(store.url, decode_responses=True)
    addresses = [f"tcp://127.0.0.1:{free_port()}" for _ in range(2)]

    def engine(i: int):
        return launch_command(
            tmp_path, f"engine-{i}", "engine", "--address", addresses[i], "--redis-url", store.url, *ENGINE
        )

    engines = [engine(0), engine(1)]
    ports = [free_port(), free_port()]
    gateways = [
        launch_command(
            tmp_path,
            f"gateway-{i}",
            "gateway",
            "--port",
            str(p),
            "--redis-url",
            store.url,
            "--session-ttl",
            "120",
            port=p,
        )
        for i, p in enumerate(ports)
    ]
    try:
        wait_healthy(*gateways, timeout=300)
        for g in gateways:
            wait_for(lambda g=g: _health(g.url)["engines"] == 2, timeout=30, message="both engines found")
        sid = "agent-1"
        first = _turn(gateways[0].url, sid, 0)
        assert [_turn(gateways[i % 2].url, sid, i) for i in range(1, 5)] == [first] * 4
        filed = filed_id(ANONYMOUS, sid)  # the session, filed under its key (no keys here: the anonymous one)
        assert 110 < db.ttl(f"agentgate:session:{filed}") <= 120  # the binding lives as long as the session

        gone = addresses.index(first)
        engines[gone].kill()  # SIGKILL: no drain, no withdrawal; the gateways notice by heartbeat
        for g in gateways:
            wait_for(lambda g=g: _health(g.url)["engines"] == 1, timeout=20, message="the dead engine dropped")
        moved = _turn(gateways[1].url, sid, 5)
        assert moved == addresses[1 - gone]
        engines[gone] = engine(gone)  # back at the same address: it registers again and is found
        for g in gateways:
            wait_for(lambda g=g: _health(g.url)["engines"] == 2, timeout=120, message="the engine back")
        assert [_turn(gateways[i % 2].url, sid, i) for i in range(6, 10)] == [moved] * 4  # moved once, stays
    finally:
        stop_all(*gateways, *engines)
        db.close()
        store.stop()


def test_a_gateway_refuses_an_engine_of_another_model(tmp_path):
    """Two engines on one Redis, of different models (the default one, and one with a tokenizer of
    its own): the gateway serves the default model, takes that engine only, logs the other's
    refusal once, lists it on /health and never routes there."""
    store = RedisServer(tmp_path / "redis").start()
    db = redis.Redis.from_url(store.url, decode_responses=True)
    ours, theirs = (f"tcp://127.0.0.1:{free_port()}" for _ in range(2))
    other_model = tmp_path / "tiny-chat"
    other_model.mkdir()
    tiny_chat_dir(other_model)
    engines = [
        launch_command(tmp_path, "engine-ours", "engine", "--address", ours, "--redis-url", store.url, *ENGINE),
        launch_command(
            tmp_path,
            "engine-theirs",
            "engine",
            "--address",
            theirs,
            "--model",
            str(other_model),
            "--redis-url",
            store.url,
            *ENGINE,
        ),
    ]
    port = free_port()
    gateway = launch_command(tmp_path, "gateway", "gateway", "--port", str(port), "--redis-url", store.url, port=port)
    try:
        wait_healthy(gateway, timeout=300)
        wait_for(lambda: db.get(f"agentgate:engine:{theirs}") is not None, timeout=120, message="the other registered")
        record = json.loads(db.get(f"agentgate:engine:{theirs}"))
        assert record["model"] == "tiny-chat" and len(record["vocab_digest"]) == 16
        wait_for(
            lambda: any(theirs in reason for reason in _health(gateway.url)["reasons"]),
            timeout=10,
            message="the refusal on /health",
        )
        health = _health(gateway.url)
        assert health["status"] == "degraded" and health["engines"] == 1 and health["engines_serving"] == 1
        [reason] = health["reasons"]
        assert "refused" in reason and "'tiny-chat'" in reason and "'SmolLM2-135M-Instruct'" in reason, reason
        for i in range(6):  # least-loaded routing would alternate between two engines: all go to ours
            r = httpx.post(
                f"{gateway.url}/v1/chat/completions",
                json=chat_body(2, stream=False),
                headers={"X-Request-Id": f"r{i}"},
                timeout=30,
            )
            assert r.status_code == 200, r.text
        time.sleep(2.5)  # more registry reads: the refusal is not logged again
        refusals = [line for line in gateway.log().splitlines() if "is not this gateway's" in line]
        assert len(refusals) == 1 and theirs in refusals[0], refusals
    finally:
        stop_all(gateway, *engines)
        db.close()
        store.stop()
