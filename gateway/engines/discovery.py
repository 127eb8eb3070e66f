"""A gateway started without ``--engine`` serves the engines the Redis registry names
(``gateway.engines.registry``), found and dropped while it runs, without a restart.

    discovery = EngineDiscovery(shared, startup_timeout=600)
    discovery.model = GatewayModel(name, tokenizer.vocab_digest)
    pool = await tasks.start(discovery.run)   # once the first registered engine answers

Every :data:`POLL_S` the registry is read. An engine that appears (``serving``) is connected
(one task holds its client) and added to the pool, if it serves this gateway's model
(``gateway.engines.identity``): one that does not is never connected, its reason logged once (at
ERROR) and listed on ``/health`` (:attr:`EngineDiscovery.refused`) while its record stays. One
whose record says ``draining``, or whose record is gone, takes no new request
(``EnginePool.leaving``); its client is closed once its streams are done, or at once when it is
dead (its host gone: the client's heartbeat watch fails its streams within five seconds). A
record that comes back makes it routable again; an engine that restarts at the same address is
connected anew. While Redis is unreachable the engines known stay as they are, and for
:data:`RENEW_GRACE_S` after it is back a missing record means nothing: the engines could not
renew their records meanwhile, so those expired (an outage longer than the TTL), and dropping
them would leave every gateway without engines until they announce again.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable

import anyio
import anyio.abc

from agentgate.engine.errors import EngineDeadError
from agentgate.engine.front.client import EngineClient
from agentgate.engine.front.socket_keys import GatewayKeys
from agentgate.gateway.engines.identity import GatewayModel, mismatch
from agentgate.gateway.engines.pool import EnginePool
from agentgate.gateway.engines.registry import ENGINE_TTL_S, EngineRecord, registered_engines
from agentgate.gateway.state.redis_state import RedisUnavailableError, SharedState

log = logging.getLogger("agentgate.gateway")

POLL_S = 1.0
CONNECT_TIMEOUT_S = 5.0  # a registered engine has loaded its model: it answers at once or is gone
RETRY_S = 2.0  # before connecting again to an address that did not answer
RENEW_GRACE_S = float(ENGINE_TTL_S)  # after an outage, a record missing this long is an engine gone


class EngineDiscovery:
    fatal: str | None = None  # never gives up (read by the server like EngineSupervisor.fatal)

    def __init__(self, shared: SharedState, *, startup_timeout: float, curve: GatewayKeys | None = None) -> None:
        """``curve``: this gateway's keys for engines whose peers authenticate (``engine.front.socket_keys``)."""
        self.shared = shared
        self.startup_timeout = startup_timeout
        self.curve = curve
        self.pool: EnginePool | None = None
        self.records: dict[str, EngineRecord] = {}
        self.on_added: Callable[[], Awaitable[None]] | None = None  # e.g. the cluster's pause sync
        self.model: GatewayModel | None = None  # what engines must serve (set by the lifespan before run)
        self.refused: dict[str, str] = {}  # address -> why its engine is not this gateway's
        self._first: EngineRecord | None = None  # the first engine taken: every later one has its shape
        self._held: set[str] = set()
        self._retry_at: dict[str, float] = {}
        self._trust_missing_from = 0.0  # monotonic; inf while Redis is unreachable
        self._first_joined = anyio.Event()

    async def run(self, task_status: anyio.abc.TaskStatus[EnginePool] = anyio.TASK_STATUS_IGNORED) -> None:
        """Watch the registry until cancelled; report the pool once an engine serves in it."""
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._watch, tasks)
            with anyio.fail_after(self.startup_timeout):
                try:
                    await self._first_joined.wait()
                except TimeoutError:
                    raise EngineDeadError(
                        f"no engine registered in redis at {self.shared.display_url} "
                        f"answered within {self.startup_timeout:.0f} s"
                    ) from None
            assert self.pool is not None
            task_status.started(self.pool)

    async def _watch(self, tasks: anyio.abc.TaskGroup) -> None:
        while True:
            await self._poll(tasks)
            await anyio.sleep(POLL_S)

    async def _poll(self, tasks: anyio.abc.TaskGroup) -> None:
        """Read the registry once: mark engines leaving or serving again, connect new ones."""
        try:
            self.records = await registered_engines(self.shared)
        except RedisUnavailableError:
            self._trust_missing_from = math.inf
            return
        now = time.monotonic()
        if self._trust_missing_from == math.inf:  # the first read since an outage
            self._trust_missing_from = now + RENEW_GRACE_S
        self._mark_leaving(trust_missing=now >= self._trust_missing_from)
        self._take_new(tasks, now)

    def _take_new(self, tasks: anyio.abc.TaskGroup, now: float) -> None:
        """Connect the engines that appeared and serve this gateway's model; refuse the others,
        logged once each while their record stays."""
        if self.model is None:
            raise RuntimeError("EngineDiscovery.model must be set before the registry is read")
        refused = {}
        for address, record in self.records.items():
            if address in self._held:
                continue  # taken already; a record that changes model means a restart, seen by its client
            why = mismatch(record, self.model, self._first)
            if why is not None:
                refused[address] = why
                if self.refused.get(address) != why:
                    log.error("engine at %s is not this gateway's and gets no request: %s", address, why)
            elif record.state == "serving" and self._retry_at.get(address, 0) <= now:
                self._first = self._first or record
                self._held.add(address)
                tasks.start_soon(self._hold, address)
        self.refused = refused

    def _mark_leaving(self, *, trust_missing: bool) -> None:
        if self.pool is None:
            return
        for engine in self.pool.engines:
            record = self.records.get(engine.address)
            if record is None and not trust_missing:
                continue  # expired while Redis was away: its engine renews it within a heartbeat
            if record is None or record.state == "draining":
                if engine.address not in self.pool.leaving:
                    log.warning(
                        "engine at %s is %s: no new requests go there",
                        engine.address,
                        "draining" if record is not None else "gone from the registry",
                    )
                self.pool.leaving.add(engine.address)
            elif engine.address in self.pool.leaving:
                log.info("engine at %s is serving again", engine.address)
                self.pool.leaving.discard(engine.address)

    async def _hold(self, address: str) -> None:
        """Connect to the engine at ``address`` and keep it in the pool while it stays."""
        try:
            async with EngineClient.connect(address, startup_timeout=CONNECT_TIMEOUT_S, curve=self.curve) as client:
                self._add(client)
                try:
                    if self.on_added is not None:
                        await self.on_added()
                    while not client.is_dead and not (address in self.pool.leaving and client.num_streams == 0):
                        await anyio.sleep(0.05)
                finally:
                    self.pool.remove(client)
                why = client.dead_reason or ("drained" if address in self.records else "gone from the registry")
                log.warning("engine at %s left the pool: %s", address, why)
        except EngineDeadError as exc:
            log.warning("registered engine at %s does not answer: %s", address, exc)
        finally:
            self._held.discard(address)
            self._retry_at[address] = time.monotonic() + RETRY_S

    def _add(self, client: EngineClient) -> None:
        if self.pool is None:
            self.pool = EnginePool([client])
        else:
            self.pool.add(client)
        log.info("engine at %s joined the pool (%d serving)", client.address, len(self.pool.engines))
        self._first_joined.set()
