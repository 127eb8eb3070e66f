"""Engines found through Redis: each ``agentgate engine`` given ``--redis-url`` announces itself
under ``P:engine:{address}`` and in the sorted set ``P:engines`` (``gateway.state.redis_state``), and
gateways started without ``--engine`` read the announcements (``gateway.engines.discovery``).

An announcement is a JSON :class:`EngineRecord`: the address gateways dial (``--advertise-address``,
else ``--address``), the model's identity (name, tokenizer's vocabulary digest, context length,
dtype, quantization: a gateway takes only engines that match it, ``gateway.engines.identity``), its
capacity (KV tokens, sequences), device, start time and state (``serving``, or ``draining`` from
the engine's SIGTERM on). The engine rewrites it every
:data:`ENGINE_HEARTBEAT_S` with a TTL of :data:`ENGINE_TTL_S`, so an engine whose host is gone
drops out of the registry within the TTL; a clean stop deletes it at once.

The sorted set indexes the records: member the address, score the moment (Redis's clock, so hosts'
clocks may differ) the record expires. A gateway's look at the registry is one script
(:data:`_READ`): one ``ZREMRANGEBYSCORE`` that drops the expired members, one ``ZRANGEBYSCORE``
for the live ones and one ``MGET`` of their records, whatever else the database holds (sessions,
stored responses): no ``SCAN`` of the keyspace.

The announcer runs in the engine process on a thread of its own (the engine's loop is synchronous
and must never wait on Redis); a Redis outage costs it nothing but the announcement, rewritten
once Redis is back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

import msgspec
import redis
from redis.exceptions import RedisError

from agentgate.gateway.state.redis_state import SOCKET_TIMEOUT_S, Keys, redact_url

if TYPE_CHECKING:
    from agentgate.engine.front.protocol import EngineInfo
    from agentgate.gateway.state.redis_state import SharedState

log = logging.getLogger("agentgate.engine")

ENGINE_TTL_S = 10
ENGINE_HEARTBEAT_S = 2.0

# KEYS: the record, the index; ARGV: the record (JSON), its TTL, the address.
_WRITE = """
local now = tonumber(redis.call('TIME')[1])
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[3])
"""
# KEYS: the index; ARGV: the records' key prefix. The live records (nil where one was withdrawn).
_READ = """
local now = tonumber(redis.call('TIME')[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')
if #live == 0 then return {} end
for i, address in ipairs(live) do live[i] = ARGV[1] .. address end
return redis.call('MGET', unpack(live))
"""


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
    vocab_digest: str = ""  # Tokenizer.vocab_digest of the model's tokenizer ("" when it has none)
    max_model_len: int = 0
    dtype: str = ""
    quantization: str = ""


WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", "[::]", "*", ""})


def undialable(address: str) -> str | None:
    """Why gateways could not dial ``address`` as announced (None: they can): a TCP address bound
    to every interface names none of them, so each gateway would dial itself, and two such engines
    would announce (and overwrite) one record."""
    scheme, _, rest = address.partition("://")
    if scheme != "tcp":
        return None
    host = rest.rpartition(":")[0]
    if host in WILDCARD_HOSTS:
        return f"{address} binds every interface and names none that another host can dial"
    return None


class EngineAnnouncer:
    """Keeps this engine's record in Redis (a :class:`~engine.front.process.Lifecycle`)."""

    def __init__(self, redis_url: str, prefix: str, address: str, vocab_digest: Callable[[], str]) -> None:
        """``vocab_digest``: reads the model's tokenizer's digest (called once, when the engine is ready)."""
        keys = Keys(prefix)
        self.key = keys.engine(address)
        self.index = keys.engines
        self.address = address
        self.vocab_digest = vocab_digest
        self.url = redis_url
        self.client = redis.Redis.from_url(
            redis_url, socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=SOCKET_TIMEOUT_S
        )
        self._announce = self.client.register_script(_WRITE)
        self.record: EngineRecord | None = None
        self._wake = threading.Event()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def ready(self, info: EngineInfo, max_num_seqs: int) -> None:
        """Announce the engine (it serves from now on) and keep announcing it."""
        self.record = EngineRecord(
            self.address,
            info.model,
            info.kv_capacity_tokens,
            max_num_seqs,
            info.device,
            time.time(),
            info.engine_id,
            vocab_digest=self.vocab_digest(),
            max_model_len=info.max_model_len,
            dtype=info.dtype,
            quantization=info.quantization,
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
            self.client.pipeline().delete(self.key).zrem(self.index, self.address).execute()
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
            self._announce(
                keys=[self.key, self.index], args=[msgspec.json.encode(self.record), ENGINE_TTL_S, self.address]
            )
        except RedisError as exc:
            log.warning("could not announce the engine in redis: %s", exc)


async def registered_engines(shared: SharedState) -> dict[str, EngineRecord]:
    """Every engine the registry holds, by address (RedisUnavailableError when Redis is down);
    one script call, the expired members of the index dropped on the way (see the module doc)."""
    keys = shared.keys
    read = shared.client.register_script(_READ)(keys=[keys.engines], args=[keys.engine("")])
    found: dict[str, EngineRecord] = {}
    for raw in await shared.guard("listing engines", read):
        if not raw:
            continue  # withdrawn, or expired between the index's score and the record's TTL
        try:
            record = msgspec.json.decode(raw, type=EngineRecord)
        except msgspec.DecodeError:
            log.warning("ignoring a malformed engine record in %s: %.200r", keys.engines, raw)
            continue
        found[record.address] = record
    return found
