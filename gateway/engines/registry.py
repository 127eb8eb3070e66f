"""Engines found through Redis: each ``agentgate engine`` given ``--redis-url`` announces itself
under ``P:engine:{address}`` (``gateway.redis_state``) and gateways started without ``--engine``
read the announcements (``gateway.engines.discovery``).

An announcement is a JSON :class:`EngineRecord`: the address gateways dial (``--advertise-address``,
else ``--address``), the model, its capacity (KV tokens, sequences), device, start time and state
(``serving``, or ``draining`` from the engine's SIGTERM on). The engine rewrites it every
:data:`ENGINE_HEARTBEAT_S` with a TTL of :data:`ENGINE_TTL_S`, so an engine whose host is gone
drops out of the registry within the TTL; a clean stop deletes it at once.

The announcer runs in the engine process on a thread of its own (the engine's loop is synchronous
and must never wait on Redis); a Redis outage costs it nothing but the announcement, rewritten
once Redis is back.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Literal

import msgspec
import redis
from redis.exceptions import RedisError

from agentgate.gateway.redis_state import SOCKET_TIMEOUT_S, Keys, redact_url

if TYPE_CHECKING:
    from agentgate.engine.protocol import EngineInfo
    from agentgate.gateway.redis_state import SharedState

log = logging.getLogger("agentgate.engine")

ENGINE_TTL_S = 10
ENGINE_HEARTBEAT_S = 2.0


class EngineRecord(msgspec.Struct, frozen=True):
    """What the registry says about one engine."""

    address: str
    model: str
    kv_capacity_tokens: int
    max_num_seqs: int
    device: str
    started: float  # time.time() the engine process started serving
    engine_id: str = ""
    state: Literal["serving", "draining"] = "serving"


class EngineAnnouncer:
    """Keeps this engine's record in Redis (a :class:`~engine.process.Lifecycle`)."""

    def __init__(self, redis_url: str, prefix: str, address: str) -> None:
        self.key = Keys(prefix).engine(address)
        self.address = address
        self.url = redis_url
        self.client = redis.Redis.from_url(
            redis_url, socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=SOCKET_TIMEOUT_S
        )
        self.record: EngineRecord | None = None
        self._wake = threading.Event()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def ready(self, info: EngineInfo, max_num_seqs: int) -> None:
        """Announce the engine (it serves from now on) and keep announcing it."""
        self.record = EngineRecord(
            self.address, info.model, info.kv_capacity_tokens, max_num_seqs, info.device, time.time(), info.engine_id
        )
        self._write()
        self._thread = threading.Thread(target=self._beat, name="engine-announcer", daemon=True)
        self._thread.start()
        log.info("announced as %s in redis at %s", self.address, redact_url(self.url))

    def draining(self) -> None:
        """Say the engine drains (called from a signal handler: the thread writes it at once)."""
        if self.record is not None:
            self.record = msgspec.structs.replace(self.record, state="draining")
            self._wake.set()

    def stopped(self) -> None:
        """Withdraw the record: gateways drop the engine at their next look."""
        self._done.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * SOCKET_TIMEOUT_S)
        try:
            self.client.delete(self.key)
        except RedisError as exc:
            log.warning("could not withdraw the engine's record (it expires in %d s): %s", ENGINE_TTL_S, exc)
        self.client.close()

    def _beat(self) -> None:
        while not self._done.is_set():
            self._wake.wait(ENGINE_HEARTBEAT_S)
            self._wake.clear()
            if not self._done.is_set():
                self._write()

    def _write(self) -> None:
        if self.record is None:
            return
        try:
            self.client.set(self.key, msgspec.json.encode(self.record), ex=ENGINE_TTL_S)
        except RedisError as exc:
            log.warning("could not announce the engine in redis: %s", exc)


async def registered_engines(shared: SharedState) -> dict[str, EngineRecord]:
    """Every engine the registry holds, by address (RedisUnavailableError when Redis is down)."""

    async def read() -> dict[str, EngineRecord]:
        found: dict[str, EngineRecord] = {}
        async for key in shared.client.scan_iter(match=shared.keys.engine("*"), count=500):
            raw = await shared.client.get(key)
            if not raw:
                continue  # expired between the scan and the read
            try:
                record = msgspec.json.decode(raw, type=EngineRecord)
            except msgspec.DecodeError:
                log.warning("ignoring a malformed engine record at %s", key)
                continue
            found[record.address] = record
        return found

    return await shared.guard("listing engines", read())
