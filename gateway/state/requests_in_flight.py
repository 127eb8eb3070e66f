"""The request registry: the HTTP requests this gateway has in flight, each with
its engine and engine request ids, mirrored in Redis so that any replica can
find the one that holds a request.

- :meth:`RequestRegistry.register` files a request (409 for an id still in
  flight, here or as one of the engine request ids); with Redis, the entry is
  also written through the shared state's background writer, off the
  request's path: ``P:request:{rid}`` and the key's set of requests.
- :meth:`RequestRegistry.unregister` removes it, here and (in the background)
  in Redis.
- :meth:`RequestRegistry.abort` aborts this gateway's requests by gateway or
  engine request id; :meth:`RequestRegistry.held` and :meth:`requests_of`
  find requests on live replicas (``gateway.state.cluster`` publishes the aborts).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

import anyio

from agentgate.engine.errors import EngineDeadError, EngineError
from agentgate.engine.front.client import EngineClient
from agentgate.gateway.api_types.openai import Usage
from agentgate.gateway.context import RequestContext, client_id
from agentgate.gateway.errors import ConflictError
from agentgate.gateway.state.redis_state import SharedState

log = logging.getLogger("agentgate.gateway")

_GLOB = re.compile(r"[\\*?\[\]]")  # what a Redis glob pattern treats as special
REQUEST_TTL_S = 24 * 3600  # an entry outlives any request; removed when the request ends

# KEYS: request hash, the key's request set. ARGV: replica, engine, session id, key digest, started,
# engine ids (JSON), ttl, request id
_STARTED = """
redis.call('HSET', KEYS[1], 'replica', ARGV[1], 'engine', ARGV[2], 'session', ARGV[3], 'key', ARGV[4],
           'started', ARGV[5], 'engine_ids', ARGV[6])
redis.call('EXPIRE', KEYS[1], ARGV[7])
redis.call('SADD', KEYS[2], ARGV[8])
redis.call('EXPIRE', KEYS[2], ARGV[7])
return 1
"""

# KEYS: request hashes; ARGV[1]: the replica key prefix. Returns, per request, its replica when that
# replica is alive, else '' (unknown, or its replica is gone: a stale entry).
_HELD = """
local out = {}
for i, key in ipairs(KEYS) do
  local replica = redis.call('HGET', key, 'replica')
  if replica and redis.call('EXISTS', ARGV[1] .. replica) == 1 then out[i] = replica else out[i] = '' end
end
return out
"""


class Progress(Protocol):
    """How far a request in flight has got (its Generation), for operators."""

    arrival: float  # time.monotonic() when it came in

    @property
    def usage(self) -> Usage: ...

    @property
    def lora(self) -> str:
        """The LoRA adapter it runs through ("": the base model)."""
        ...


@dataclass(frozen=True, slots=True)
class Entry:
    """One HTTP request's engine requests."""

    engine: EngineClient
    engine_request_ids: list[str]
    context: RequestContext
    progress: Progress | None = None


class RequestRegistry:
    def __init__(self, shared: SharedState | None = None) -> None:
        self.shared = shared  # None: no Redis, the registry is this gateway's alone
        self._requests: dict[str, Entry] = {}
        self._by_engine_id: dict[str, str] = {}  # engine request id -> request id
        if shared is not None:
            self._started = shared.client.register_script(_STARTED)
            self._held = shared.client.register_script(_HELD)

    # -- this gateway's requests ------------------------------------------------------
    def register(
        self,
        request_id: str,
        engine: EngineClient,
        engine_request_ids: list[str],
        context: RequestContext,
        *,
        progress: Progress | None = None,
    ) -> None:
        """File a request; ConflictError (409) when its id, or one of its engine ids, is in flight."""
        if request_id in self._requests or any(i in self._by_engine_id for i in engine_request_ids):
            raise ConflictError(
                "the X-Request-Id belongs to a request still in flight; send another",  # not echoed: not ours to show
                param="X-Request-Id",
                code="duplicate_request_id",
            )
        self._requests[request_id] = Entry(engine, engine_request_ids, context, progress)
        for engine_id in engine_request_ids:
            self._by_engine_id[engine_id] = request_id
        if self.shared is not None:
            self._write_started(request_id, engine.address, engine_request_ids, context)

    def unregister(self, request_id: str) -> None:
        entry = self._requests.pop(request_id, None)
        if entry is None:
            return
        for engine_id in entry.engine_request_ids:
            self._by_engine_id.pop(engine_id, None)
        shared = self.shared
        if shared is not None:
            keys = shared.keys
            request_key, key_set = keys.request(request_id), keys.key_requests(entry.context.key)

            async def write() -> None:
                async with shared.client.pipeline(transaction=True) as pipe:
                    pipe.delete(request_key)
                    pipe.srem(key_set, request_id)
                    await pipe.execute()

            shared.enqueue(write)

    def matching(self, predicate: Callable[[Entry], bool]) -> list[str]:
        """Ids of this gateway's requests in flight that match."""
        return [rid for rid, entry in self._requests.items() if predicate(entry)]

    @property
    def requests(self) -> Mapping[str, Entry]:
        """This gateway's requests in flight by id (a read-only view)."""
        return MappingProxyType(self._requests)

    @property
    def num_requests(self) -> int:
        """HTTP requests in flight."""
        return len(self._requests)

    async def abort(self, request_ids: Iterable[str]) -> list[str]:
        """Abort this gateway's requests by the id they are filed under, an engine id, or (operators)
        an ``X-Request-Id`` as a client sent it (every key's request with it); returns the ids found."""
        found: list[str] = []
        for request_id in request_ids:
            targets = self._find(request_id)
            for entry, engine_ids in targets:
                try:
                    await entry.engine.abort(engine_ids)
                except EngineDeadError:
                    pass  # a dead engine has nothing left to abort
            if targets:
                found.append(request_id)
        return found

    def _find(self, request_id: str) -> list[tuple[Entry, list[str]]]:
        """The entries ``request_id`` names, each with the engine ids to abort: the request filed
        under it, the one with that engine id, else every request (or choice) a client sent it for."""
        entry = self._requests.get(request_id)
        if entry is not None:
            return [(entry, entry.engine_request_ids)]
        owner = self._by_engine_id.get(request_id)
        if owner is not None:
            return [(self._requests[owner], [request_id])]
        whole = [(e, e.engine_request_ids) for rid, e in self._requests.items() if client_id(rid) == request_id]
        choices = [
            (self._requests[owner], [engine_id])
            for engine_id, owner in self._by_engine_id.items()
            if engine_id != owner and client_id(engine_id) == request_id
        ]
        return whole + choices

    async def drain(self, timeout: float, give_up: Callable[[], bool] = lambda: False) -> None:
        """For a graceful shutdown: let requests in flight finish for up to
        ``timeout`` seconds, then abort the rest, so every stream still ends
        with a finish reason and ``[DONE]`` instead of a cut connection."""
        deadline = anyio.current_time() + timeout
        if self.num_requests:
            log.info("waiting up to %.1f s for %d request(s) in flight", timeout, self.num_requests)
        while self.num_requests and anyio.current_time() < deadline and not give_up():
            await anyio.sleep(0.05)
        if not self.num_requests:
            return
        log.info("aborting %d request(s) still in flight", self.num_requests)
        try:
            await self.abort(list(self._requests))  # only this gateway's: engines may be shared
        except EngineError:
            return  # a dead engine has ended them already
        with anyio.move_on_after(2.0):
            while self.num_requests and not give_up():
                await anyio.sleep(0.02)

    # -- every replica's requests (Redis) ------------------------------------------------
    def _write_started(self, request_id: str, engine: str, engine_ids: list[str], context: RequestContext) -> None:
        keys = self.shared.keys
        args = [
            self.shared.replica_id,
            engine,
            context.session_id or "",
            context.key,
            f"{time.time():.3f}",
            json.dumps(engine_ids),
            REQUEST_TTL_S,
            request_id,
        ]
        key_list = [keys.request(request_id), keys.key_requests(context.key)]
        self.shared.enqueue(lambda: self._started(keys=key_list, args=args))

    async def held(self, request_ids: Iterable[str], *, as_sent: bool = False) -> dict[str, str]:
        """request id -> the live replica that holds it, for the ids some live replica holds.
        ``as_sent`` (operators): an id filed under nothing is looked up as a client's ``X-Request-Id``
        of any key (a scan)."""
        ids = list(request_ids)
        if not ids:
            return {}
        keys = self.shared.keys
        replicas = await self.shared.guard(
            "finding requests on other replicas",
            self._held(keys=[keys.request(i) for i in ids], args=[keys.replica("")]),
        )
        found = {i: r for i, r in zip(ids, replicas, strict=True) if r}
        for request_id in [i for i in ids if i not in found] if as_sent else []:
            pattern = keys.request("*." + _GLOB.sub(r"\\\g<0>", request_id))
            filed = await self.shared.guard("finding requests", _scan(self.shared, pattern))
            if filed:
                live = await self.shared.guard(
                    "finding requests on other replicas", self._held(keys=filed, args=[keys.replica("")])
                )
                found.update({request_id: r for r in live if r})
        return found

    async def requests_of(self, set_key: str) -> list[str]:
        """Request ids in a registry set (a session's or a key's), held by live replicas."""
        ids = await self.shared.guard("finding requests", self.shared.client.smembers(set_key))
        return sorted(await self.held(ids))

    async def list(self, limit: int = 1000) -> list[dict[str, str]]:
        """Every registered request of a live replica (scan), for operators."""
        shared, keys = self.shared, self.shared.keys
        found: list[dict[str, str]] = []

        async def scan() -> None:
            async for key in shared.client.scan_iter(match=keys.request("*"), count=500):
                if len(found) >= limit:
                    return
                entry = await shared.client.hgetall(key)
                if entry and await shared.client.exists(keys.replica(entry.get("replica", ""))):
                    entry["id"] = key[len(keys.request("")) :]
                    found.append(entry)

        await shared.guard("listing requests", scan())
        return found


async def _scan(shared: SharedState, pattern: str) -> list[str]:
    """The keys matching ``pattern``."""
    return [key async for key in shared.client.scan_iter(match=pattern, count=500)]
