"""Agent programs' last turns in Redis (``gateway.programs.last_turns``), on a real redis-server:
written when a turn ends, read when the next one is dispatched, which sends it to that
engine (a session keeps its own; an engine gone: the least loaded, and the record moves)
and tells it when the previous turn ended; with Redis away, no affinity, no previous end,
no error, and one warning in the log."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from agentgate.engine.front.protocol import ProgramTag
from agentgate.engine.model_files.model_path import default_model_path
from agentgate.engine.sampling_params import SamplingParams
from agentgate.engine.text.tokenizer import load_tokenizer
from agentgate.gateway.admission.waiting import Admission
from agentgate.gateway.app_state import GatewayState
from agentgate.gateway.context import RequestContext
from agentgate.gateway.dispatch import Job, dispatch
from agentgate.gateway.engines.pool import EnginePool
from agentgate.gateway.programs.last_turns import UNKNOWN, ProgramStore
from agentgate.gateway.state.redis_state import SharedState
from agentgate.gateway.state.sessions import SessionStore
from tests.gateway.test_gateway_generation import StubEngine, _gateway
from tests.support.servers import RedisServer, free_port

pytestmark = pytest.mark.anyio

TAG = ProgramTag("cache:program-1")


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(default_model_path())


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server.url
    server.stop()


@asynccontextmanager
async def running(url: str) -> AsyncIterator[SharedState]:
    """A replica's SharedState (``--session-ttl 60``) with its background writer running."""
    state = SharedState(url, prefix=f"t{time.monotonic_ns()}", replica_id="r1", session_ttl=60)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(state._writer)
        yield state
        tasks.cancel_scope.cancel()
    await state.close()


@pytest.fixture
async def store(redis_url):
    async with running(redis_url) as shared:
        yield ProgramStore(shared)


def two_engines(tokenizer, store: ProgramStore) -> tuple[GatewayState, StubEngine, StubEngine]:
    a, b = StubEngine([]), StubEngine([])
    a.address, b.address = "engine-a", "engine-b"
    gw = dataclasses.replace(_gateway(tokenizer, a, Admission(0)), pool=EnginePool([a, b]), programs=store)
    return gw, a, b


async def turn(gw: GatewayState, request_id: str, context: RequestContext = RequestContext(), tag: ProgramTag = TAG):
    return await dispatch(gw, Job(request_id, 0.0, [[1, 2, 3]], SamplingParams(), program=tag), context)


async def test_a_turn_end_is_recorded_with_its_engine_for_the_session_ttl(store):
    assert await store.last_turn(TAG.program_id) == UNKNOWN
    before = time.time()
    store.turn_ended(TAG.program_id, "engine-a")
    await store.shared.flush()
    last = await store.last_turn(TAG.program_id)
    assert last.engine == "engine-a" and before - 0.01 <= last.ended <= time.time()
    assert 55 <= await store.shared.client.ttl(store.keys.program(TAG.program_id)) <= 60  # --session-ttl 60
    store.turn_ended(TAG.program_id, "engine-b")
    await store.shared.flush()
    assert (await store.last_turn(TAG.program_id)).engine == "engine-b"


async def test_dispatch_sends_a_program_where_its_last_turn_ran(tokenizer, store):
    gw, a, b = two_engines(tokenizer, store)
    first = await turn(gw, "t1")
    assert first.program.previous_turn_end == 0.0  # no turn before it
    ran = first.engine
    other = b if ran is a else a
    first.close()
    ended = time.time()
    await store.shared.flush()
    ran.open.add("busy")  # the least loaded engine is now the other one
    second = await turn(gw, "t2")
    assert second.engine is ran
    assert second.program.previous_turn_end == pytest.approx(ended, abs=1.0)
    second.close()
    # A session keeps the engine it is bound to (dispatch opens it in Redis and reads its engine).
    sessions = SessionStore(store.shared, gw.registry)
    gw = dataclasses.replace(gw, sessions=sessions)
    assert await sessions.open("s", "anonymous", False) is None
    sessions.bind("s", "t0", other.address)
    await store.shared.flush()
    bound = await turn(gw, "t3", RequestContext(session_id="s"), ProgramTag("session:s"))
    assert bound.engine is other and bound.context.engine == other.address and bound.context.admitted
    bound.close()
    # Its engine gone, the program goes to the least loaded, and its record moves with the turn's end.
    gw.pool.leaving.add(ran.address)
    moved = await turn(gw, "t4")
    assert moved.engine is other
    moved.close()
    await store.shared.flush()
    assert (await store.last_turn(TAG.program_id)).engine == other.address
    gw.pool.leaving.clear()
    ran.open.clear()
    assert (await turn(gw, "t5")).engine is other


async def test_with_redis_away_a_program_is_served_without_affinity_or_error(tokenizer, caplog):
    async with running(f"redis://127.0.0.1:{free_port()}/0") as shared:  # nothing listens there
        gw, a, b = two_engines(tokenizer, ProgramStore(shared))
        engines = set()
        with caplog.at_level(logging.WARNING, logger="agentgate.redis"):
            for i in range(4):
                generation = await turn(gw, f"away-{i}")
                assert generation.program.previous_turn_end == 0.0
                engines.add(generation.engine.address)
                generation.close()
        assert engines == {a.address, b.address}, "no affinity: the least loaded, in turn"
        assert not shared.up  # known away after the first read: the next ones do not wait on it
        assert len([r for r in caplog.records if "unreachable" in r.getMessage()]) == 1
