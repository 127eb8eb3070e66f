"""EnginePool as engines come and go (gateway.engines.discovery): added ones take work, leaving ones
(draining, or gone from the registry) take none, not even their own sessions', and an empty pool
says so instead of failing on a division."""

from __future__ import annotations

from dataclasses import dataclass

import anyio
import pytest

from agentgate.engine.errors import EngineDeadError
from agentgate.gateway.engines.pool import EnginePool


@dataclass
class FakeEngine:
    address: str
    num_streams: int = 0
    dead_reason: str | None = None
    info: object = "model facts"

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
    assert pool.info == "model facts"  # the model's facts outlive its engines


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
