"""Stored responses, in Redis: what ``previous_response_id``, ``GET``, ``DELETE``,
``cancel`` and ``input_items`` read, shared by every gateway replica and kept
across restarts (the embedded Redis writes to disk).

One hash per response, ``P:response:{id}`` (TTL ``--response-ttl``)::

    status   queued | in_progress | completed | incomplete | failed | cancelled
    owner    the API key's digest: another key gets 404, as if it did not exist
    record   JSON of a :class:`StoredResponse`

A :class:`StoredResponse` holds the response object, its input items, the
conversation so far as chat messages (what the next turn in the chain
replays: every earlier input and output, without ``instructions``, which
OpenAI does not carry over), the engine that served it (the next turn goes
there, for its prefix cache) and its gateway request id (what cancel aborts).

A response that was cancelled stays cancelled: the final write of a
background generation does not overwrite it (one script checks and writes).

While a response is queued or in progress, ``P:responses:running`` maps its
id to the replica running it. A replica that dies mid-response (killed, its
host lost) would leave it ``in_progress`` for ever; every replica sweeps that
index at start and every :data:`ORPHAN_SWEEP_S` seconds, and marks the
responses of replicas that are gone ``failed``, with an error that says so
(:meth:`ResponseStore.resolve_orphans`). A replica is gone when its heartbeat key has lapsed
(``gateway.state.redis_state``: ``REPLICA_TTL_S`` after its last beat), so a response is failed within
``REPLICA_TTL_S + ORPHAN_SWEEP_S`` (15 s) of its replica's death, and never while it runs. A
record that does not decode (another version's) is logged once and left alone; the sweep goes on.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import msgspec

from agentgate.gateway.api_types.responses import ResponseError, ResponseObject
from agentgate.gateway.errors import BadRequestError, NotFoundError
from agentgate.gateway.state.redis_state import RedisUnavailableError, SharedState

log = logging.getLogger("agentgate.responses")

RUNNING = frozenset({"queued", "in_progress"})
ORPHAN_SWEEP_S = 5.0

# KEYS: the response hash, the running index. ARGV: status, record, owner, ttl, response id, replica.
# Returns 0 when it was cancelled or deleted meanwhile.
_SAVE = """
local status = redis.call('HGET', KEYS[1], 'status')
if status == 'cancelled' or status == 'deleted' then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'record', ARGV[2], 'owner', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
if ARGV[1] == 'queued' or ARGV[1] == 'in_progress' then
  redis.call('HSET', KEYS[2], ARGV[5], ARGV[6])
else
  redis.call('HDEL', KEYS[2], ARGV[5])
end
return 1
"""

# KEYS: the response hash, the running index. ARGV: the cancelled record, response id.
# Returns 1 when it was still running.
_CANCEL = """
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'queued' and status ~= 'in_progress' then return 0 end
redis.call('HSET', KEYS[1], 'status', 'cancelled', 'record', ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[2])
return 1
"""

# KEYS: the response hash, the running index. ARGV: owner, ttl, response id. What stays of a deleted
# response: its status and owner (no record: it reads as 404), so a run still going never saves it again.
_DELETE = """
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'status', 'deleted', 'owner', ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[2])
redis.call('HDEL', KEYS[2], ARGV[3])
return 1
"""

# KEYS: the response hash, the running index. ARGV: the failed record, response id, the dead replica.
# Returns 1 when the response was still running there and is now failed.
_FAIL_ORPHAN = """
if redis.call('HGET', KEYS[2], ARGV[2]) ~= ARGV[3] then return 0 end
redis.call('HDEL', KEYS[2], ARGV[2])
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'queued' and status ~= 'in_progress' then return 0 end
redis.call('HSET', KEYS[1], 'status', 'failed', 'record', ARGV[1])
return 1
"""


class StoredResponse(msgspec.Struct, kw_only=True):
    owner: str
    response: ResponseObject
    input_items: list[dict[str, Any]] = msgspec.field(default_factory=list)
    messages: list[dict[str, Any]] = msgspec.field(default_factory=list)
    engine: str | None = None
    request_id: str | None = None
    program: str | None = None  # the chain's first response's id: the agent program it is


_decoder = msgspec.json.Decoder(StoredResponse)
_encoder = msgspec.json.Encoder()


class ResponseStore:
    def __init__(self, shared: SharedState, ttl: float) -> None:
        self.shared = shared
        self.ttl = max(1, int(ttl))
        self._save = shared.client.register_script(_SAVE)
        self._cancel = shared.client.register_script(_CANCEL)
        self._delete = shared.client.register_script(_DELETE)
        self._fail_orphan = shared.client.register_script(_FAIL_ORPHAN)
        self._running = shared.keys.running_responses
        self._undecodable: set[str] = set()  # response ids whose record did not decode (logged once)

    def _key(self, response_id: str) -> str:
        return self.shared.keys.response(response_id)

    async def load(self, response_id: str, owner: str, *, param: str | None = None) -> StoredResponse:
        """The stored response, if ``owner`` may read it; else 404 (or, for ``param``
        previous_response_id, OpenAI's 400 ``previous_response_not_found``)."""
        record, stored_owner = await self.shared.guard(
            "a stored response", self.shared.client.hmget(self._key(response_id), ["record", "owner"])
        )
        if record is None or stored_owner != owner:
            if param == "previous_response_id":
                raise BadRequestError(
                    f"Previous response with id '{response_id}' not found.",
                    param=param,
                    code="previous_response_not_found",
                )
            raise NotFoundError(f"No response found with id '{response_id}'.", param=param or "response_id")
        return _decoder.decode(record)

    async def save(self, stored: StoredResponse) -> bool:
        """Write ``stored`` (False: it was cancelled meanwhile, and stays so)."""
        response_id = stored.response.id
        args = [
            stored.response.status,
            _encoder.encode(stored),
            stored.owner,
            self.ttl,
            response_id,
            self.shared.replica_id,
        ]
        save = self._save(keys=[self._key(response_id), self._running], args=args)
        written = await self.shared.guard("storing a response", save)
        return bool(written)

    async def cancel(self, stored: StoredResponse) -> bool:
        """Mark ``stored`` (whose response is already set to cancelled) cancelled, if it was still running."""
        response_id = stored.response.id
        cancel = self._cancel(keys=[self._key(response_id), self._running], args=[_encoder.encode(stored), response_id])
        return bool(await self.shared.guard("cancelling a response", cancel))

    async def delete(self, response_id: str, owner: str) -> StoredResponse:
        """Delete the response (404 unless ``owner`` may read it) and return it as it was: it stays
        deleted, whatever a run still going tries to save."""
        stored = await self.load(response_id, owner)
        delete = self._delete(keys=[self._key(response_id), self._running], args=[owner, self.ttl, response_id])
        await self.shared.guard("deleting a response", delete)
        return stored

    async def resolve_orphans(self) -> list[str]:
        """Mark ``failed`` every running response whose replica is gone; returns their ids."""
        shared = self.shared
        running: dict[str, str] = await shared.guard("the running responses", shared.client.hgetall(self._running))
        alive: dict[str, bool] = {}
        failed = []
        for response_id, replica in running.items():
            if replica not in alive:
                alive[replica] = await shared.replica_alive(replica)
            if alive[replica]:
                continue
            record = await shared.guard("a stored response", shared.client.hget(self._key(response_id), "record"))
            try:
                failed_record = _encoder.encode(_failed(_decoder.decode(record), replica)) if record else b""
            except msgspec.DecodeError as exc:
                if response_id not in self._undecodable:
                    self._undecodable.add(response_id)
                    log.warning("left alone: stored response %s does not decode (%s)", response_id, exc)
                continue
            fail = self._fail_orphan(
                keys=[self._key(response_id), self._running], args=[failed_record, response_id, replica]
            )
            if await shared.guard("failing an orphaned response", fail):
                failed.append(response_id)
        if failed:
            log.warning(
                "%d stored response(s) left running by replicas that are gone are now failed: %s",
                len(failed),
                ", ".join(failed),
            )
        return failed

    async def sweep_orphans(self) -> None:
        """:meth:`resolve_orphans` now and every :data:`ORPHAN_SWEEP_S` seconds; until cancelled."""
        while True:
            try:
                await self.resolve_orphans()
            except RedisUnavailableError:
                pass  # the next sweep tries again
            except Exception:  # whatever it is, the gateway keeps serving; the next sweep tries again
                log.exception("the sweep of orphaned responses failed")
            await anyio.sleep(ORPHAN_SWEEP_S)


def _failed(stored: StoredResponse, replica: str) -> StoredResponse:
    stored.response.status = "failed"
    stored.response.error = ResponseError(
        "server_error",
        f"the gateway replica that ran this response ({replica}) stopped before it finished "
        "(restarted or lost); nothing more will be generated for it: create it again",
    )
    return stored
