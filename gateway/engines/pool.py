"""The engines behind one gateway: routing, and fan-out of operator calls
(pause, resume, abort all, stats, health) to every engine.

Routing (:meth:`EnginePool.pick`): a request of a session or a program goes to
the engine it is bound to (its ``affinity``: its prefix is cached there) when
this gateway reaches it and it is alive, unless that engine has a queue while
another has room (below); any other request goes to the least loaded live
engine (fewest open requests of this gateway; ties taken in turn, so idle
engines share the work). An engine that is leaving (its registry entry says
draining, or is gone: ``gateway.engines.discovery``) takes no new request, its own
sessions' included, while its streams finish.

**Affinity yields to a queue.** An engine *has a queue* when this gateway has
at least as many requests open on it as it runs at once (its
``--max-num-seqs``, told at the handshake), and *has room* when it has fewer.
A bound request whose engine has a queue goes to the least loaded engine when
that one has room: waiting behind a queue costs more than computing a cached
prefix again, and no program (a constant ``user`` included) can hold one
engine for all its requests whatever that engine's load. Each gateway counts
its own requests only.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio

from agentgate.engine.errors import EngineDeadError, EngineError
from agentgate.engine.front.client import EngineClient
from agentgate.engine.front.protocol import EngineInfo, SchedulerStats

log = logging.getLogger("agentgate.gateway")

STATS_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class EngineTarget:
    """An engine to connect to. ``owned``: the gateway stops ``process`` when it shuts down;
    ``start``: starts it again at ``address`` after it died (``gateway.engines.supervisor``; None: an
    engine started apart, re-attached when it answers again)."""

    address: str
    process: multiprocessing.process.BaseProcess | WatchedPid | None = None
    owned: bool = False
    start: Callable[[], multiprocessing.process.BaseProcess] | None = None


class WatchedPid:
    """An engine process this process did not start (a sibling under ``agentgate
    serve --gateway-workers``), watched by pid: enough for the engine client's
    death watch (``is_alive``, ``exitcode``). Linux (/proc)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.exitcode: int | None = None

    def is_alive(self) -> bool:
        try:
            state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(") ", 1)[1].split()[0]
        except (OSError, IndexError):
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                return True
            return not Path("/proc").is_dir()
        return state not in ("Z", "X")


def _has_queue(engine: EngineClient) -> bool:
    """Whether this gateway has as many requests open on ``engine`` as it runs at once (never,
    when the engine did not say how many)."""
    capacity = engine.info.max_num_seqs if engine.info is not None else 0
    return 0 < capacity <= engine.num_streams


class EnginePool:
    def __init__(self, engines: Sequence[EngineClient]) -> None:
        if not engines:
            raise ValueError("an engine pool needs at least one engine")
        self.engines = list(engines)
        self.stats: list[SchedulerStats | None] = [None] * len(self.engines)
        self.down_since: list[float | None] = [None] * len(self.engines)  # time.time() it died; None: up
        self.leaving: set[str] = set()  # addresses routing skips (draining, or gone from the registry)
        self._turn = 0
        self._info: EngineInfo | None = None  # the model facts last seen, for when no engine is left

    @property
    def info(self) -> EngineInfo:
        """The first engine's model facts (every engine serves the same model; kept when none is left)."""
        if self.engines:
            self._info = self.engines[0].info
        assert self._info is not None, "connected engines have their info"
        return self._info

    def add(self, client: EngineClient) -> None:
        """Serve a newly found engine too (``gateway.engines.discovery``)."""
        self.engines.append(client)
        self.stats.append(None)
        self.down_since.append(None)
        self.leaving.discard(client.address)

    def remove(self, client: EngineClient) -> None:
        """Forget an engine (gone, or its client closed)."""
        for i, engine in enumerate(self.engines):
            if engine is client:
                if len(self.engines) == 1:
                    self._info = engine.info or self._info
                del self.engines[i], self.stats[i], self.down_since[i]
                return

    # -- routing -----------------------------------------------------------------
    @property
    def addresses(self) -> list[str]:
        return [e.address for e in self.engines]

    def pick(self, affinity: str | None = None) -> EngineClient:
        """The engine at ``affinity`` (a session's or a program's engine) while it is alive and
        does not have a queue while the least loaded has room, else the least loaded live
        engine (see the module doc); EngineDeadError when none is left."""
        bound = None
        if affinity is not None and affinity not in self.leaving:
            bound = next((e for e in self.engines if e.address == affinity and not e.is_dead), None)
        if bound is not None and not _has_queue(bound):
            return bound
        engines = [e for e in self.engines if e.address not in self.leaving] if self.leaving else self.engines
        n = len(engines)
        if n == 0:
            raise EngineDeadError("no engine is serving (none is registered, or every one is draining)")
        self._turn = (self._turn + 1) % n
        best: EngineClient | None = None
        for i in range(n):
            engine = engines[(self._turn + i) % n]
            if not engine.is_dead and (best is None or engine.num_streams < best.num_streams):
                best = engine
        if best is None:
            raise EngineDeadError(engines[0].dead_reason or "no engine is alive")
        if bound is not None and _has_queue(best):
            return bound  # no engine has room: the prefix is worth its wait
        return best

    @property
    def dead_reasons(self) -> list[str]:
        """Each engine that is down: which, since when, why."""
        now = time.time()
        reasons = []
        for i, engine in enumerate(self.engines):
            if engine.dead_reason is not None:
                since = self.down_since[i] or now
                at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since))
                reasons.append(
                    f"engine {i} at {engine.address} is down since {at} ({now - since:.1f} s): {engine.dead_reason}"
                )
        return reasons

    @property
    def num_live(self) -> int:
        return sum(not e.is_dead for e in self.engines)

    def mark_down(self, i: int) -> None:
        """Engine ``i`` died (its client is dead: routing skips it already)."""
        if self.down_since[i] is None:
            self.down_since[i] = time.time()

    def mark_up(self, i: int, client: EngineClient) -> float:
        """Engine ``i`` serves again through ``client``; the seconds it was down."""
        since, self.down_since[i] = self.down_since[i], None
        self.engines[i] = client
        self.stats[i] = None
        return time.time() - since if since is not None else 0.0

    # -- operator calls ----------------------------------------------------------------
    async def abort_all(self, skip: Iterable[str] = ()) -> None:
        """Abort every request of every engine (``skip``: addresses already done)."""
        await self._each(lambda engine: engine.abort_all(), skip)

    async def pause(self, mode: str, skip: Iterable[str] = ()) -> None:
        await self._each(lambda engine: engine.pause(mode), skip)

    async def resume(self, skip: Iterable[str] = ()) -> None:
        await self._each(lambda engine: engine.resume(), skip)

    async def load_lora(self, name: str, path: str) -> None:
        """Every live engine loads the LoRA adapter (the first refusal is raised)."""
        await self._gather(lambda engine: engine.load_lora(name, path))

    async def unload_lora(self, name: str) -> None:
        """Every live engine that holds the LoRA adapter stops serving it."""

        async def one(engine: EngineClient) -> None:
            try:
                await engine.unload_lora(name)
            except EngineDeadError:
                raise
            except EngineError:
                pass  # this engine did not hold it

        await self._gather(one)

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
                    stats = await engine.stats()
                except EngineDeadError:
                    return
                if i < len(self.engines) and self.engines[i] is engine:  # not removed meanwhile
                    self.stats[i] = stats

        async with anyio.create_task_group() as tasks:
            for i, engine in enumerate(self.engines):
                tasks.start_soon(one, i, engine)
        return self.stats

    async def health(self, timeout: float = 5.0) -> tuple[int, list[str]]:
        """How many engines answered, and the reasons the pool is unhealthy (none when every engine
        answers): the engines down and the live ones that do not answer. The count is taken from the
        answers, not from ``len(self.engines)`` afterwards: discovery may drop an engine meanwhile."""
        problems = self.dead_reasons
        answered = 0

        async def one(engine: EngineClient) -> None:
            nonlocal answered
            with anyio.move_on_after(timeout) as scope:
                try:
                    if await engine.health():
                        answered += 1
                    else:
                        problems.append(f"the engine at {engine.address} reports it is unhealthy")
                except EngineDeadError as exc:
                    problems.append(str(exc))
            if scope.cancelled_caught:
                problems.append(f"the engine at {engine.address} did not answer within {timeout:.0f} s")

        async with anyio.create_task_group() as tasks:
            for engine in self.engines:
                if not engine.is_dead:
                    tasks.start_soon(one, engine)
        return answered, problems

    async def _each(self, call, skip: Iterable[str] = ()) -> None:
        skip = set(skip)
        if skip and all(e.address in skip for e in self.engines):
            return
        await self._gather(call, skip)

    async def _gather(self, call, skip: Iterable[str] = ()) -> list:
        """``call(engine)`` on every engine at once; the first error is raised."""
        skip = set(skip)
        live = [e for e in self.engines if not e.is_dead and e.address not in skip]
        if not live:
            raise EngineDeadError((self.engines[0].dead_reason if self.engines else None) or "no engine is alive")
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
