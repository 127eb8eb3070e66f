"""EnginePool as engines come and go (gateway.engines.discovery): added ones take work, leaving ones
(draining, or gone from the registry) take none, not even their own sessions', and an empty pool
says so instead of failing on a division."""

from __future__ import annotations

from dataclasses import dataclass

import anyio
import pytest

from agentgate.engine.errors import EngineDeadError
from agentgate.gateway.engines.pool import EnginePool


@dataclass(frozen=True)
class Facts:
    """What an engine tells at the handshake, as far as routing reads it."""

    max_num_seqs: int = 0  # 0: not said


FACTS = Facts()


@dataclass
class FakeEngine:
    address: str
    num_streams: int = 0
    dead_reason: str | None = None
    info: Facts = FACTS

    @property
    def is_dead(self) -> bool:
        return self.dead_reason is not None


def test_added_engines_take_work_and_leaving_ones_none():
    a, b = FakeEngine("tcp://a:1"), FakeEngine("tcp://b:1")
    pool = EnginePool([a])
    pool.add(b)
    assert len(pool.stats) == len(pool.down_since) == 2
    assert {pool.pick().address for _ in range(4)} == {a.address, b.address}
    pool.leaving.add(a.address)
    assert {pool.pick().address for _ in range(4)} == {b.address}
    assert pool.pick(affinity=a.address) is b  # a session bound to a draining engine moves
    pool.leaving.discard(a.address)
    assert pool.pick(affinity=a.address) is a


def test_removed_engines_leave_no_trace_and_an_empty_pool_refuses():
    a, b = FakeEngine("tcp://a:1"), FakeEngine("tcp://b:1")
    pool = EnginePool([a, b])
    pool.remove(a)
    assert pool.engines == [b] and len(pool.stats) == len(pool.down_since) == 1
    pool.leaving.add(b.address)
    with pytest.raises(EngineDeadError, match="every one is draining"):
        pool.pick()
    pool.remove(b)
    with pytest.raises(EngineDeadError, match="none is registered"):
        pool.pick()
    assert pool.info is FACTS  # the model's facts outlive its engines


@dataclass
class ProbedEngine(FakeEngine):
    """Answers a health probe at once, or hangs on it (an engine killed but not yet noticed)."""

    hangs: bool = False

    async def health(self) -> bool:
        if self.hangs:
            await anyio.sleep_forever()
        return True


def test_health_counts_the_engines_that_answered_though_discovery_drops_one_meanwhile():
    """The CI race: a killed engine's probe waits out its timeout while discovery forgets it. The
    pool then holds one engine and one reason; the live engine still answered, so one serves."""
    live, killed = ProbedEngine("tcp://a:1"), ProbedEngine("tcp://b:1", hangs=True)
    pool = EnginePool([live, killed])

    async def main() -> tuple[int, list[str]]:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(lambda: _remove_soon(pool, killed))
            result = await pool.health(timeout=0.2)
        return result

    serving, problems = anyio.run(main)
    assert serving == 1 and pool.engines == [live]
    assert problems == ["the engine at tcp://b:1 did not answer within 0 s"]


async def _remove_soon(pool: EnginePool, engine: ProbedEngine) -> None:
    await anyio.sleep(0.05)
    pool.remove(engine)


def test_affinity_holds_while_its_engine_has_room_and_yields_to_a_queue_when_another_has_room():
    """Each engine runs 4 at once. A program bound to a (3 open) stays there though b is idle; with
    a 4th open a has a queue and b has room: the turn goes to b; when b has a queue too, to a."""
    a, b = FakeEngine("tcp://a:1", num_streams=3, info=Facts(4)), FakeEngine("tcp://b:1", info=Facts(4))
    pool = EnginePool([a, b])
    assert pool.pick(affinity=a.address) is a
    a.num_streams = 4
    assert pool.pick(affinity=a.address) is b
    b.num_streams = 4
    assert pool.pick(affinity=a.address) is a
    unsaid = FakeEngine("tcp://c:1", num_streams=100)  # an engine that did not say its size keeps its programs
    assert EnginePool([unsaid, FakeEngine("tcp://d:1")]).pick(affinity=unsaid.address) is unsaid
