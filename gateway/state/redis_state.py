"""The gateway's shared state in Redis: the connection, its health, the key
layout, a background writer, the replica heartbeat and the control channel
(pub/sub) every replica listens on. What is kept there has one home per
noun: sessions in ``gateway.state.sessions``, agent programs' last turns in
``gateway.programs.last_turns``, the request registry in ``gateway.state.requests_in_flight``,
rate limits in ``gateway.admission.rate_limits``, the pause state and control messages
in ``gateway.state.cluster``.

One code path: ``redis.asyncio`` against whatever ``--redis-url`` names, the
embedded ``redis-server`` included (``unix://`` URL).

Faults. Every Redis call goes through :meth:`SharedState.guard`, which turns
a Redis error into :class:`RedisUnavailableError` (503, OpenAI body, code
``redis_unavailable``) and keeps :attr:`SharedState.up` current. Timeouts are
short and a command is retried once (a pooled connection that went stale
when Redis restarted reconnects), so a dead Redis costs a request
milliseconds, never the 5 s x 10 retries of redis-py's defaults; once Redis
is back the next call simply works. Requests that need no shared state
(no session, no rate limit) make no Redis call on their way but one read
that may fail (an agent program's last turn: a routing hint, skipped while
Redis is known to be away), and what they write afterwards (registry
entries, usage, the program's turn) goes through the background writer,
which drops its work while Redis is away instead of failing anyone.

Keys (``P`` is ``--redis-prefix``, default ``agentgate``)::

    P:session:{id}            hash: owner, created, last_activity, turns, prompt_tokens,
                              completion_tokens, engine, messages (JSON); TTL --session-ttl
    P:session:{id}:requests   set of request ids in flight (same TTL)
    P:sessions                zset: session id -> last activity (listing; trimmed by age on every open)
    P:program:{id}            hash: engine, ended (an agent program's last turn: the engine it ran on, its
                              wall-clock end); TTL --session-ttl (gateway.programs.last_turns)
    P:request:{rid}           hash: replica, engine, session, key, started, engine_ids (gateway.requests_in_flight)
    P:key:{digest}:requests   set of the key's request ids in flight (gateway.requests_in_flight)
    P:replica:{replica}       JSON about a live replica, TTL 10 s, refreshed every 2 s: the replica's liveness
    P:pause                   JSON {mode, at, by} while paused
    P:engine:{address}        JSON about a registered engine (address, model, capacity, device, started,
                              state serving/draining), TTL 10 s, refreshed every 2 s (gateway.engines.registry)
    P:engines                 zset: a registered engine's address -> when its record expires (Redis time);
                              the registry's index, read once a second by each gateway without a SCAN
    P:rl:{digest}:requests / :tokens   rate-limit buckets (gateway.admission.rate_limits)
    channel P:control         control messages, typed JSON (gateway.cluster)
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from typing import Any, TypeVar

import anyio
import msgspec
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from agentgate.gateway.errors import ServiceUnavailableError
from agentgate.gateway.observation.tracing import REQUEST_SPAN

log = logging.getLogger("agentgate.redis")

T = TypeVar("T")
REDIS_SPAN = {"db.system.name": "redis"}  # a traced request's Redis call's span (gateway.tracing)

SOCKET_TIMEOUT_S = 1.0
# A replica is alive while its heartbeat key is: it is rewritten every HEARTBEAT_S and lapses
# REPLICA_TTL_S after the last write, so a replica that died is known dead within REPLICA_TTL_S, and
# a live one is taken for dead only when its event loop or Redis stalls its heartbeat that long.
REPLICA_TTL_S = 10
HEARTBEAT_S = 2.0
WRITER_QUEUE = 100_000
RESUBSCRIBE_BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)


class RedisUnavailableError(ServiceUnavailableError):
    code = "redis_unavailable"


def make_replica_id(port: int) -> str:
    """``host:port:pid:suffix``, unique per gateway process (the random suffix: hosts, ports and
    pids repeat across containers and PID namespaces). For people to read; liveness is the heartbeat's."""
    return f"{socket.gethostname()}:{port}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class ReplicaInfo(msgspec.Struct, kw_only=True):
    """What a live replica says of itself in ``P:replica:{id}`` (its heartbeat rewrites it)."""

    host: str = ""
    port: int = 0
    engines: list[str] = msgspec.field(default_factory=list)  # the engines' addresses it serves
    seen: float = 0.0  # time.time() of its last heartbeat


class Replica(ReplicaInfo, kw_only=True):
    """A live replica as the operator routes list it."""

    id: str


class Keys:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.sessions = f"{prefix}:sessions"
        self.pause = f"{prefix}:pause"
        self.control = f"{prefix}:control"

    def session(self, session_id: str) -> str:
        return f"{self.prefix}:session:{session_id}"

    def session_requests(self, session_id: str) -> str:
        return f"{self.prefix}:session:{session_id}:requests"

    def program(self, program_id: str) -> str:
        return f"{self.prefix}:program:{program_id}"

    def request(self, request_id: str) -> str:
        return f"{self.prefix}:request:{request_id}"

    def key_requests(self, digest: str) -> str:
        return f"{self.prefix}:key:{digest}:requests"

    def replica(self, replica_id: str) -> str:
        return f"{self.prefix}:replica:{replica_id}"

    def rate(self, digest: str, kind: str) -> str:
        return f"{self.prefix}:rl:{digest}:{kind}"

    def engine(self, address: str) -> str:
        return f"{self.prefix}:engine:{address}"

    @property
    def engines(self) -> str:
        """A sorted set: a registered engine's address -> when its record expires (gateway.engines.registry)."""
        return f"{self.prefix}:engines"

    def response(self, response_id: str) -> str:
        return f"{self.prefix}:response:{response_id}"

    @property
    def running_responses(self) -> str:
        """A hash: stored response id -> the replica running it, while it is queued or in progress."""
        return f"{self.prefix}:responses:running"


def redact_url(url: str) -> str:
    """``url`` with its credentials (``user:password@``) masked, for logs."""
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        rest = "***@" + rest.split("@", 1)[1]
    return f"{scheme}{sep}{rest}"


class SharedState:
    """One replica's handle on Redis."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "agentgate",
        replica_id: str,
        session_ttl: float,
    ) -> None:
        self.url = url
        self.keys = Keys(prefix)
        self.replica_id = replica_id
        self.session_ttl = max(1, math.ceil(session_ttl))
        self.client = aioredis.Redis.from_url(
            url,
            decode_responses=True,
            socket_timeout=SOCKET_TIMEOUT_S,
            socket_connect_timeout=SOCKET_TIMEOUT_S,
            # The asyncio Retry: the sync one (redis.retry) wraps the coroutine's creation, not its
            # await, so a pooled connection left dead by a Redis restart failed its first call.
            retry=Retry(NoBackoff(), 1),
            health_check_interval=30,
        )
        self.up = True  # optimistic until a call says otherwise
        self.subscribed = False
        self._resync = False  # a failure since the subscriber last synced
        self.errors = 0
        self.dropped_writes = 0
        self._pending_writes = 0
        self._down_logged = False
        self._writes, self._write_queue = anyio.create_memory_object_stream[Callable[[], Awaitable[Any]]](WRITER_QUEUE)
        self.replica_info = ReplicaInfo()

    @property
    def display_url(self) -> str:
        """The URL without a password."""
        return redact_url(self.url)

    # -- calls and faults ---------------------------------------------------------
    async def guard(self, what: str, call: Awaitable[T]) -> T:
        """Await a Redis call; a Redis failure becomes RedisUnavailableError (503). A traced
        request's call is a child span of its span (``gateway.observation.tracing``), named ``what``."""
        span = REQUEST_SPAN.get()  # read, not called: untraced, this module calls no other
        try:
            with span.child(what, REDIS_SPAN | {"db.query.summary": what}) if span is not None else nullcontext():
                result = await call
        except (RedisError, OSError) as exc:
            self._failed(exc)
            # The client learns what failed, not where or how (that is in the log, once per outage).
            raise RedisUnavailableError(
                f"{what} needs the shared state store (Redis), which cannot be reached right now. Requests "
                "without X-Session-Id are still served; retry later.",
            ) from None
        self._succeeded()
        return result

    def _failed(self, exc: BaseException) -> None:
        self.errors += 1
        self._resync = True
        if isinstance(exc, (RedisConnectionError, RedisTimeoutError, OSError)):
            self.up = False
            if not self._down_logged:
                self._down_logged = True
                log.warning(
                    "redis at %s is unreachable (%s); session, rate-limit and cross-replica routes answer "
                    "503 until it is back",
                    self.display_url,
                    exc,
                )
        else:
            log.warning("redis error: %s", exc)

    def _succeeded(self) -> None:
        if not self.up or self._down_logged:
            log.info("redis at %s is reachable again", self.display_url)
        self.up = True
        self._down_logged = False

    async def ping(self) -> bool:
        try:
            await self.guard("ping", self.client.ping())
        except RedisUnavailableError:
            return False
        return True

    # -- the background writer ------------------------------------------------------
    def enqueue(self, write: Callable[[], Awaitable[Any]]) -> None:
        """Run ``write()`` soon, in order, off the request's path; dropped (and counted) if it cannot be."""
        try:
            self._writes.send_nowait(write)
        except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self.dropped_writes += 1
            return
        self._pending_writes += 1

    async def _writer(self) -> None:
        async for write in self._write_queue:
            try:
                await self.guard("a background write", write())
            except RedisUnavailableError:
                self.dropped_writes += 1
            except Exception:
                log.exception("background redis write failed")
            finally:
                self._pending_writes -= 1

    async def flush(self, timeout: float = 2.0) -> None:
        """Wait (a little) until the writer has written everything queued."""
        with anyio.move_on_after(timeout):
            while self._pending_writes:
                await anyio.sleep(0.01)

    # -- replicas -----------------------------------------------------------------------
    async def _heartbeat(self) -> None:
        key = self.keys.replica(self.replica_id)
        while True:
            info = msgspec.json.encode(msgspec.structs.replace(self.replica_info, seen=time.time()))
            try:
                await self.guard(
                    "the replica heartbeat",
                    self.client.set(key, info, ex=REPLICA_TTL_S),
                )
            except RedisUnavailableError:
                pass
            await anyio.sleep(HEARTBEAT_S if self.up else 0.5)

    async def replica_alive(self, replica_id: str) -> bool:
        """Whether ``replica_id`` still runs: its heartbeat key is there (this replica always is).
        Nothing else is taken as a sign: gateways in separate PID namespaces (containers with host
        networking) share a hostname and pid 1, and a pid seen here says nothing of theirs."""
        if replica_id == self.replica_id:
            return True
        return bool(await self.guard("a replica's heartbeat", self.client.exists(self.keys.replica(replica_id))))

    async def replicas(self) -> list[Replica]:
        async def read() -> list[Replica]:
            out = []
            async for key in self.client.scan_iter(match=self.keys.replica("*"), count=500):
                raw = await self.client.get(key)
                try:
                    info = msgspec.json.decode(raw, type=ReplicaInfo) if raw else None
                except msgspec.DecodeError:
                    log.warning("skipping a replica record that does not decode at %s: %.200r", key, raw)
                    continue
                if info is not None:
                    out.append(Replica(id=key[len(self.keys.replica("")) :], **msgspec.structs.asdict(info)))
            return out

        return await self.guard("listing replicas", read())

    # -- control channel ----------------------------------------------------------------
    async def publish(self, payload: bytes, what: str = "reaching the other replicas") -> int:
        """Send ``payload`` to every replica's subscriber (``gateway.state.cluster`` says what it holds)."""
        return await self.guard(what, self.client.publish(self.keys.control, payload))

    async def _subscriber(
        self,
        on_message: Callable[[str], Awaitable[None]],
        on_connect: Callable[[], Awaitable[None]],
    ) -> None:
        """Listen on the control channel for ever, resubscribing after a Redis outage;
        ``on_connect`` runs on each (re)subscription, since what was published meanwhile is lost."""
        failures = 0
        while True:
            pubsub = self.client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self.keys.control)
                self.subscribed = True
                failures = 0
                self._succeeded()
                self._resync = False
                await on_connect()
                while True:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                    if self._resync:  # Redis failed somewhere meanwhile: what was published then is lost
                        self._resync = False
                        await on_connect()
                    if message is None or message.get("type") != "message":
                        continue
                    try:
                        await on_message(message["data"])
                    except Exception:
                        log.exception("control message %r failed", message["data"])
            except (RedisError, OSError) as exc:
                self._failed(exc)
            finally:
                self.subscribed = False
                with anyio.CancelScope(shield=True):
                    try:
                        await pubsub.aclose()
                    except (RedisError, OSError):
                        pass
            await anyio.sleep(RESUBSCRIBE_BACKOFF_S[min(failures, len(RESUBSCRIBE_BACKOFF_S) - 1)])
            failures += 1

    # -- lifecycle -------------------------------------------------------------------------
    async def run(
        self,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
        *,
        on_message: Callable[[str], Awaitable[None]],
        on_connect: Callable[[], Awaitable[None]],
    ) -> None:
        """The writer, the heartbeat and the subscriber; runs until cancelled."""
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._writer)
            tasks.start_soon(self._heartbeat)
            tasks.start_soon(self._subscriber, on_message, on_connect)
            task_status.started()

    async def close(self) -> None:
        self._writes.close()
        with anyio.CancelScope(shield=True):
            try:
                with anyio.move_on_after(1.0):
                    await self.client.delete(self.keys.replica(self.replica_id))
            except (RedisError, OSError):
                pass
            await self.client.aclose()
