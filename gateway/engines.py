"""The engines behind one gateway: routing, the request registry, and fan-out
of operator calls (pause, resume, abort) to every engine.

Today ``agentgate serve`` runs one engine; the pool already holds a list, so
several engines (issue 8) only need more entries. Each request goes to the
least loaded live engine (fewest open requests of this gateway).
"""

from __future__ import annotations

import logging
import multiprocessing
from collections.abc import Sequence
from dataclasses import dataclass

import anyio

from engine.client import EngineClient
from engine.errors import EngineDeadError
from engine.protocol import EngineInfo, SchedulerStats

log = logging.getLogger("agentgate.gateway")

STATS_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class EngineTarget:
    """An engine to connect to. ``owned``: the gateway stops ``process`` when it shuts down."""

    address: str
    process: multiprocessing.process.BaseProcess | None = None
    owned: bool = False


@dataclass
class Registered:
    """One HTTP request's engine requests."""

    engine: EngineClient
    engine_request_ids: list[str]


class EnginePool:
    def __init__(self, engines: Sequence[EngineClient]) -> None:
        if not engines:
            raise ValueError("an engine pool needs at least one engine")
        self.engines = list(engines)
        self.stats: list[SchedulerStats | None] = [None] * len(self.engines)
        self._requests: dict[str, Registered] = {}

    @property
    def info(self) -> EngineInfo:
        """The first engine's model facts (every engine serves the same model)."""
        info = self.engines[0].info
        assert info is not None, "connected engines have their info"
        return info

    # -- routing -----------------------------------------------------------------
    def pick(self) -> EngineClient:
        """The least loaded live engine; EngineDeadError when none is left."""
        best: EngineClient | None = None
        for engine in self.engines:
            if not engine.is_dead and (best is None or engine.num_streams < best.num_streams):
                best = engine
        if best is None:
            raise EngineDeadError(self.engines[0].dead_reason or "no engine is alive")
        return best

    @property
    def dead_reasons(self) -> list[str]:
        return [e.dead_reason for e in self.engines if e.dead_reason is not None]

    # -- the request registry ------------------------------------------------------
    def register(self, request_id: str, engine: EngineClient, engine_request_ids: list[str]) -> bool:
        """Record a request; False when its id, or one of its engine ids, is in use already."""
        if request_id in self._requests:
            return False
        if any(e.owns(i) for e in self.engines for i in engine_request_ids):
            return False
        self._requests[request_id] = Registered(engine, engine_request_ids)
        return True

    def unregister(self, request_id: str) -> None:
        self._requests.pop(request_id, None)

    @property
    def num_requests(self) -> int:
        """HTTP requests in flight."""
        return len(self._requests)

    # -- operator calls ----------------------------------------------------------------
    async def abort(self, request_ids: Sequence[str]) -> list[str]:
        """Abort requests by their gateway id (X-Request-Id) or engine id; returns the ids found."""
        found: list[str] = []
        for request_id in request_ids:
            registered = self._requests.get(request_id)
            if registered is not None:
                await _quietly(registered.engine.abort(registered.engine_request_ids))
                found.append(request_id)
                continue
            for engine in self.engines:
                if engine.owns(request_id):
                    await _quietly(engine.abort([request_id]))
                    found.append(request_id)
                    break
        return found

    async def abort_all(self) -> None:
        await self._each(lambda engine: engine.abort_all())

    async def pause(self, mode: str) -> None:
        await self._each(lambda engine: engine.pause(mode))

    async def resume(self) -> None:
        await self._each(lambda engine: engine.resume())

    async def is_paused(self) -> bool:
        results = await self._gather(lambda engine: engine.is_paused())
        return any(results)

    async def refresh_stats(self) -> list[SchedulerStats | None]:
        """Ask every live engine for its stats (kept from the last answer on a timeout)."""

        async def one(i: int, engine: EngineClient) -> None:
            if engine.is_dead:
                return
            with anyio.move_on_after(STATS_TIMEOUT_S):
                try:
                    self.stats[i] = await engine.stats()
                except EngineDeadError:
                    pass

        async with anyio.create_task_group() as tasks:
            for i, engine in enumerate(self.engines):
                tasks.start_soon(one, i, engine)
        return self.stats

    async def health(self, timeout: float = 5.0) -> list[str]:
        """Reasons the pool is unhealthy (an empty list when every engine answers)."""
        problems = self.dead_reasons
        if problems:
            return problems

        async def one(engine: EngineClient) -> None:
            with anyio.move_on_after(timeout) as scope:
                try:
                    await engine.health()
                except EngineDeadError as exc:
                    problems.append(str(exc))
            if scope.cancelled_caught:
                problems.append(f"the engine at {engine.address} did not answer within {timeout:.0f} s")

        async with anyio.create_task_group() as tasks:
            for engine in self.engines:
                tasks.start_soon(one, engine)
        return problems

    async def _each(self, call) -> None:
        await self._gather(call)

    async def _gather(self, call) -> list:
        """``call(engine)`` on every engine at once; the first error is raised."""
        live = [e for e in self.engines if not e.is_dead]
        if not live:
            raise EngineDeadError(self.engines[0].dead_reason or "no engine is alive")
        results: list = [None] * len(live)
        errors: list[BaseException] = []

        async def one(i: int, engine: EngineClient) -> None:
            try:
                results[i] = await call(engine)
            except Exception as exc:  # noqa: BLE001 - reported below, first one wins
                errors.append(exc)

        async with anyio.create_task_group() as tasks:
            for i, engine in enumerate(live):
                tasks.start_soon(one, i, engine)
        if errors:
            raise errors[0]
        return results


async def _quietly(call) -> None:
    """An abort to an engine that died meanwhile has nothing left to abort."""
    try:
        await call
    except EngineDeadError:
        pass
