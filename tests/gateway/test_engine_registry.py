"""The engine registry on a real redis-server: records indexed by a sorted set whose scores are
their expiry, read with one script call per look, whatever else the database holds
(``gateway.engines.registry``)."""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import TypeVar

import pytest
import redis

from agentgate.engine.front.protocol import EngineInfo
from agentgate.gateway.engines.registry import ENGINE_TTL_S, EngineAnnouncer, registered_engines
from agentgate.gateway.state.redis_state import SharedState

pytestmark = pytest.mark.anyio

T = TypeVar("T")
UNRELATED_KEYS = 10_000
INFO = EngineInfo("m", "llama", 49152, 1024, 16, 64, "null", "cpu", "float32", engine_id="e1")


@pytest.fixture
async def shared(redis_server):
    state = SharedState(redis_server.url, prefix=f"t{time.monotonic_ns()}", replica_id="r1", session_ttl=60)
    yield state
    await state.close()


@pytest.fixture
def db(redis_server):
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    yield client
    client.close()


def announced(shared: SharedState, address: str) -> EngineAnnouncer:
    announcer = EngineAnnouncer(shared.url, shared.keys.prefix, address, lambda: "digest")
    announcer.ready(INFO, max_num_seqs=8)
    return announcer


async def commands_of(db: redis.Redis, call: Awaitable[T]) -> tuple[T, list[str]]:
    """What ``call`` returned, and the commands Redis executed while it ran (MONITOR, which lists
    a script's inner commands too)."""
    marker = f"end-of-look-{time.monotonic_ns()}"
    seen: list[str] = []
    with db.monitor() as monitor:
        result = await call
        db.echo(marker)
        while True:
            command = monitor.next_command()["command"]
            if marker in command:
                return result, seen
            name = command.split()[0].upper()
            if name not in ("HELLO", "CLIENT", "SELECT"):  # a connection's handshake (the marker's, here)
                seen.append(name)


async def test_a_look_at_the_registry_is_one_script_whatever_the_keyspace_holds(shared, db):
    engines = [announced(shared, f"tcp://10.0.0.{i}:5555") for i in (1, 2)]
    try:
        with db.pipeline(transaction=False) as pipe:
            for i in range(UNRELATED_KEYS):  # stored responses, sessions: the registry must not read them
                pipe.set(shared.keys.response(f"resp_{i}"), "x", ex=600)
            pipe.execute()
        assert db.dbsize() >= UNRELATED_KEYS

        await shared.client.ping()  # connected before the count: the connection's handshake is not the look's
        found, commands = await commands_of(db, registered_engines(shared))
        assert sorted(found) == ["tcp://10.0.0.1:5555", "tcp://10.0.0.2:5555"]
        assert found["tcp://10.0.0.1:5555"].engine_id == "e1"
        assert found["tcp://10.0.0.1:5555"].vocab_digest == "digest"  # the model's identity travels with it
        print(f"redis commands per registry look with {UNRELATED_KEYS} unrelated keys: {commands}")
        assert "SCAN" not in commands and "KEYS" not in commands
        # The first look loads the script (EVALSHA refused, SCRIPT LOAD, EVALSHA); later ones send EVALSHA only.
        assert [c for c in commands if c not in ("EVALSHA", "SCRIPT")] == [
            "TIME",
            "ZREMRANGEBYSCORE",
            "ZRANGEBYSCORE",
            "MGET",
        ]
        found, commands = await commands_of(db, registered_engines(shared))
        print(f"... the next look: {commands}")
        assert commands == ["EVALSHA", "TIME", "ZREMRANGEBYSCORE", "ZRANGEBYSCORE", "MGET"]
        assert len(found) == 2
    finally:
        for engine in engines:
            engine.stopped()


async def test_expired_members_are_dropped_and_a_clean_stop_withdraws_at_once(shared, db):
    live = announced(shared, "tcp://10.0.0.1:5555")
    try:
        score = db.zscore(shared.keys.engines, "tcp://10.0.0.1:5555")
        assert 0 < score - db.time()[0] <= ENGINE_TTL_S  # scored by Redis's clock: hosts' clocks may differ
        # An engine killed without a word: its record expired, its member is left behind.
        db.zadd(shared.keys.engines, {"tcp://10.0.0.9:5555": db.time()[0] - 1})
        # One withdrawn between the index and the record: no record behind the member.
        db.zadd(shared.keys.engines, {"tcp://10.0.0.8:5555": db.time()[0] + ENGINE_TTL_S})
        assert list(await registered_engines(shared)) == ["tcp://10.0.0.1:5555"]
        assert db.zscore(shared.keys.engines, "tcp://10.0.0.9:5555") is None  # the look dropped it
        db.set(shared.keys.engine("tcp://10.0.0.7:5555"), b"\x00not json")
        db.zadd(shared.keys.engines, {"tcp://10.0.0.7:5555": db.time()[0] + ENGINE_TTL_S})
        assert list(await registered_engines(shared)) == ["tcp://10.0.0.1:5555"]  # the malformed one skipped
    finally:
        live.stopped()
    assert db.zscore(shared.keys.engines, "tcp://10.0.0.1:5555") is None
    assert db.get(shared.keys.engine("tcp://10.0.0.1:5555")) is None
    assert "tcp://10.0.0.1:5555" not in await registered_engines(shared)
