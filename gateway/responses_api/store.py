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
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentgate.gateway.errors import BadRequestError, NotFoundError
from agentgate.gateway.redis_state import SharedState
from agentgate.gateway.responses_api.types import ResponseObject

RUNNING = frozenset({"queued", "in_progress"})

# KEYS: the response hash. ARGV: status, record, owner, ttl. Returns 0 when it was cancelled meanwhile.
_SAVE = """
if redis.call('HGET', KEYS[1], 'status') == 'cancelled' then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'record', ARGV[2], 'owner', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
"""

# KEYS: the response hash. ARGV: the cancelled record. Returns 1 when it was still running.
_CANCEL = """
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'queued' and status ~= 'in_progress' then return 0 end
redis.call('HSET', KEYS[1], 'status', 'cancelled', 'record', ARGV[1])
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

    def _key(self, response_id: str) -> str:
        return f"{self.shared.keys.prefix}:response:{response_id}"

    async def load(self, response_id: str, owner: str, *, param: str | None = None) -> StoredResponse:
        """The stored response, if ``owner`` may read it; else 404 (or, for ``param``
        previous_response_id, OpenAI's 400 ``previous_response_not_found``)."""
        record, stored_owner = await self.shared.guard(
            "a stored response", self.shared.client.hmget(self._key(response_id), ["record", "owner"])
        )
        if record is None or stored_owner != owner:
            if param == "previous_response_id":
                raise BadRequestError(f"Previous response with id '{response_id}' not found.", param=param,
                                      code="previous_response_not_found")  # fmt: skip
            raise NotFoundError(f"No response found with id '{response_id}'.", param=param or "response_id")
        return _decoder.decode(record)

    async def save(self, stored: StoredResponse) -> bool:
        """Write ``stored`` (False: it was cancelled meanwhile, and stays so)."""
        args = [stored.response.status, _encoder.encode(stored), stored.owner, self.ttl]
        save = self._save(keys=[self._key(stored.response.id)], args=args)
        written = await self.shared.guard("storing a response", save)
        return bool(written)

    async def cancel(self, stored: StoredResponse) -> bool:
        """Mark ``stored`` (whose response is already set to cancelled) cancelled, if it was still running."""
        cancelled = await self.shared.guard(
            "cancelling a response", self._cancel(keys=[self._key(stored.response.id)], args=[_encoder.encode(stored)])
        )
        return bool(cancelled)

    async def delete(self, response_id: str, owner: str) -> None:
        await self.load(response_id, owner)
        await self.shared.guard("deleting a response", self.shared.client.delete(self._key(response_id)))
