"""What an operator asks of one replica, done on every replica: pause,
resume and aborts, over Redis (state + the control channel).

- **Pause / resume**: the replica that is asked writes the pause state
  (``P:pause``) and publishes it, then pauses its own engines. Every other
  replica pauses the engines the first one does not reach (an engine is
  known by its address; pausing applies to the whole engine, whoever sent
  the requests). A replica that starts, or gets Redis back after an outage,
  while the state says paused, pauses its engines that are not paused yet
  (``keep`` as ``keep``; ``abort`` and ``wait`` as ``wait``, which admits
  nothing new and aborts nothing). Nothing is ever resumed by a sync: only a
  resume does that.
- **Aborts** by request id: the replica's own requests are aborted at once
  (no Redis needed); ids it does not hold are looked up in the request
  registry and, when a live replica holds them, the abort is published and
  that replica aborts them (within one engine step: pub/sub is a
  sub-millisecond hop). By session or API key: published to every replica,
  each aborting its own. All: published, and each replica aborts every
  request of the engines the first one does not reach.

Without Redis (unreachable) the kill switch still works on this replica:
pause, resume and aborts act on its own engines and requests, and the call
returns :data:`UNREACHABLE` (the routes answer 200 with a ``warning`` saying
the other replicas were not told).

Control messages are a tagged union of msgspec structs, JSON on the channel
(``{"op": "pause", "origin": ..., "mode": ..., "engines": [...]}``): each
names the replica that sent it (it acted already and skips its own) and,
for pause, resume and abort-all, the engines it reached already. A message
that does not decode as one of them is logged and dropped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
import msgspec

from agentgate.engine.errors import EngineDeadError, EngineError
from agentgate.engine.front.protocol import PauseMode
from agentgate.gateway.context import client_id
from agentgate.gateway.engines.pool import EnginePool
from agentgate.gateway.state.redis_state import RedisUnavailableError, SharedState
from agentgate.gateway.state.requests_in_flight import Entry, RequestRegistry

log = logging.getLogger("agentgate.cluster")


class _Control(msgspec.Struct, tag_field="op", kw_only=True):
    origin: str  # the replica that sent it


class AbortIds(_Control, tag="abort"):
    ids: list[str]


class AbortSession(_Control, tag="abort_session"):
    session: str


class AbortKey(_Control, tag="abort_key"):
    key: str  # an API key's digest


class AbortAll(_Control, tag="abort_all"):
    engines: list[str] = []  # reached by the sender already


class PauseAll(_Control, tag="pause"):
    mode: PauseMode = "abort"
    engines: list[str] = []


class ResumeAll(_Control, tag="resume"):
    engines: list[str] = []


ControlMessage = AbortIds | AbortSession | AbortKey | AbortAll | PauseAll | ResumeAll
_decode_control = msgspec.json.Decoder(ControlMessage).decode


class PausedState(msgspec.Struct):
    """``P:pause`` while the cluster is paused."""

    mode: PauseMode
    at: float  # time.time() when it was paused
    by: str  # the replica that paused it


UNREACHABLE = (
    "redis is unreachable: this replica acted on its own engines and requests; the other replicas were not told"
)


class Cluster:
    """Operator calls across replicas. Each returns None, or :data:`UNREACHABLE` when only this
    replica acted."""

    def __init__(self, pool: EnginePool, registry: RequestRegistry, shared: SharedState | None) -> None:
        self.pool = pool
        self.registry = registry
        self.shared = shared
        self.mode: PauseMode | None = None  # how this replica's engines were last paused; None: running
        self._tasks: anyio.abc.TaskGroup | None = None

    @property
    def _origin(self) -> str:
        return self.shared.replica_id

    # -- pause ------------------------------------------------------------------------
    async def pause(self, mode: PauseMode) -> str | None:
        told = None
        if self.shared is not None:
            state = msgspec.json.encode(PausedState(mode, time.time(), self._origin))
            message = PauseAll(origin=self._origin, mode=mode, engines=self.pool.addresses)
            told = await self._write_and_publish(
                "pausing every replica", lambda p: p.set(self.shared.keys.pause, state), message
            )
        self.mode = mode
        await self.pool.pause(mode)
        return told

    async def resume(self) -> str | None:
        told = None
        if self.shared is not None:
            message = ResumeAll(origin=self._origin, engines=self.pool.addresses)
            told = await self._write_and_publish(
                "resuming every replica", lambda p: p.delete(self.shared.keys.pause), message
            )
        self.mode = None
        await self.pool.resume()
        return told

    async def _write_and_publish(
        self, what: str, write: Callable[[Any], object], message: ControlMessage
    ) -> str | None:
        """``write(pipeline)`` and publish ``message`` in one transaction; UNREACHABLE if Redis is."""
        shared = self.shared

        async def run() -> None:
            async with shared.client.pipeline(transaction=True) as pipe:
                write(pipe)
                pipe.publish(shared.keys.control, msgspec.json.encode(message))
                await pipe.execute()

        try:
            await shared.guard(what, run())
        except RedisUnavailableError:
            log.warning("%s: %s", what, UNREACHABLE)
            return UNREACHABLE
        return None

    async def _publish(self, message: ControlMessage, what: str) -> str | None:
        """Publish ``message``; UNREACHABLE if Redis is."""
        try:
            await self.shared.publish(msgspec.json.encode(message), what)
        except RedisUnavailableError:
            log.warning("%s: %s", what, UNREACHABLE)
            return UNREACHABLE
        return None

    async def paused_state(self) -> PausedState | None:
        """The pause state in Redis (None: not paused, or no Redis)."""
        if self.shared is None:
            return None
        raw = await self.shared.guard("reading the pause state", self.shared.client.get(self.shared.keys.pause))
        return msgspec.json.decode(raw, type=PausedState) if raw else None

    async def sync_pause(self) -> None:
        """Pause this replica's engines that are not paused while the shared state says paused."""
        try:
            state = await self.paused_state()
        except RedisUnavailableError:
            log.warning("cannot read the pause state from redis; this replica starts as its engines are")
            return
        if state is None:
            return
        mode = "keep" if state.mode == "keep" else "wait"
        self.mode = self.mode or state.mode
        for engine in self.pool.engines:
            if engine.is_dead:
                continue
            try:
                if await engine.is_paused():
                    continue
                log.info(
                    "the cluster is paused (mode %s since %s): pausing the engine at %s",
                    state.mode,
                    state.at,
                    engine.address,
                )
                await self._call_soon(engine.pause, mode)
            except EngineError as exc:
                log.warning("could not pause the engine at %s: %s", engine.address, exc)

    async def _call_soon(self, call, *args: Any) -> None:
        """Start an engine call (a pause in wait mode answers only once drained) and
        return once its message is sent: calls to one engine stay in order."""
        if self._tasks is None:
            await call(*args)
            return

        async def run() -> None:
            try:
                await call(*args)
            except EngineError as exc:
                log.warning("engine call failed: %s", exc)

        self._tasks.start_soon(run)
        await anyio.lowlevel.checkpoint()  # the task sends its message before this returns

    # -- aborts ------------------------------------------------------------------------
    async def abort(
        self,
        request_ids: list[str] = (),
        session_id: str | None = None,
        key: str | None = None,
    ) -> tuple[list[str], str | None]:
        """Abort by request ids, a session and/or a key digest, on every replica: the ids found,
        and UNREACHABLE when Redis is (then only this replica's requests are aborted). A session is
        named by its filed id (``GET /v1/sessions`` lists them) or as a client sent it (every key's
        session of that ``X-Session-Id``), as request ids are."""
        registry, shared = self.registry, self.shared
        found = set(await registry.abort(request_ids)) if request_ids else set()
        remaining = [i for i in request_ids if i not in found]
        if session_id is not None:
            found |= set(await self._abort_local(session_id=session_id))
        if key is not None:
            found |= set(await self._abort_local(key=key))
        if shared is None:
            return sorted(found), None
        try:
            if remaining:
                elsewhere = await registry.held(remaining, as_sent=True)
                if elsewhere:
                    await shared.publish(
                        msgspec.json.encode(AbortIds(origin=self._origin, ids=sorted(elsewhere))),
                        "aborting on other replicas",
                    )
                    found |= set(elsewhere)
            if session_id is not None:
                for filed in await self._sessions_named(session_id):
                    found |= set(await registry.requests_of(shared.keys.session_requests(filed)))
                await shared.publish(
                    msgspec.json.encode(AbortSession(origin=self._origin, session=session_id)), "aborting a session"
                )
            if key is not None:
                found |= set(await registry.requests_of(shared.keys.key_requests(key)))
                await shared.publish(
                    msgspec.json.encode(AbortKey(origin=self._origin, key=key)), "aborting a key's requests"
                )
        except RedisUnavailableError:
            log.warning("aborting: %s", UNREACHABLE)
            return sorted(found), UNREACHABLE
        return sorted(found), None

    async def abort_all(self) -> str | None:
        told = None
        if self.shared is not None:
            told = await self._publish(
                AbortAll(origin=self._origin, engines=self.pool.addresses), "aborting on every replica"
            )
        await self.pool.abort_all()
        return told

    async def _sessions_named(self, session_id: str) -> list[str]:
        """The filed ids of the live sessions ``session_id`` names (see :meth:`abort`)."""
        shared = self.shared
        assert shared is not None
        listed = await shared.guard("aborting a session", shared.client.zrange(shared.keys.sessions, 0, -1))
        return [s for s in listed if session_id in (s, client_id(s))] or [session_id]

    async def _abort_local(self, *, session_id: str | None = None, key: str | None = None) -> list[str]:
        def match(entry: Entry) -> bool:
            ctx = entry.context
            named = ctx.session_id is not None and session_id in (ctx.session_id, client_id(ctx.session_id))
            return (session_id is not None and named) or (key is not None and ctx.key == key)

        ids = self.registry.matching(match)
        if ids:
            await self.registry.abort(ids)
        return ids

    # -- the control channel --------------------------------------------------------------
    async def on_message(self, payload: str | bytes) -> None:
        """Act on another replica's control message (this replica's own are skipped)."""
        try:
            message = _decode_control(payload)
        except msgspec.DecodeError as exc:
            log.warning("dropping a malformed control message %r: %s", payload, exc)
            return
        if message.origin == self._origin:
            return
        try:
            match message:
                case AbortIds(ids=ids):
                    await self.registry.abort(ids)
                case AbortSession(session=session_id):
                    await self._abort_local(session_id=session_id)
                case AbortKey(key=key):
                    await self._abort_local(key=key)
                case AbortAll(engines=skip):
                    await self.pool.abort_all(skip)
                case PauseAll(mode="wait", engines=skip):
                    self.mode = "wait"
                    await self._call_soon(self.pool.pause, "wait", skip)
                case PauseAll(mode=mode, engines=skip):
                    self.mode = mode
                    await self.pool.pause(mode, skip)
                case ResumeAll(engines=skip):
                    self.mode = None
                    await self.pool.resume(skip)
        except EngineDeadError as exc:
            log.warning("control message %s: %s", type(message).__name__, exc)

    async def run(self, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The shared state's background tasks, with this replica's handlers; until cancelled."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                if self.shared is not None:
                    await tasks.start(
                        lambda task_status: self.shared.run(
                            task_status, on_message=self.on_message, on_connect=self.sync_pause
                        )
                    )
                task_status.started()
                await anyio.sleep_forever()
            finally:
                self._tasks = None
