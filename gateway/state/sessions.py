"""Sessions in Redis: an agent's conversation, named by ``X-Session-Id``.

A session records its owner (the API key's digest), the messages so far
(the conversation of its latest turn: the messages the client sent, then the
reply), usage (prompt / completion tokens), the number of turns, the engine
it is bound to (affinity: its prefix is cached there), its creation and last
activity. It expires ``--session-ttl`` seconds after its last activity.

- A session's id is the client's ``X-Session-Id`` filed under its key
  (``gateway.context.filed_id``, done by the middleware): the same id from two keys is two
  sessions, and no key reaches, or learns of, another's. Every method here takes the filed id.
- A request naming a session opens it (:meth:`SessionStore.open`, one script
  call on the request's path): created on first use and owned by the key that
  created it; another key's session is a 404, the answer a missing one gets on
  every route (the admin key may read and delete any, by the filed id ``GET /v1/sessions``
  lists). It returns the engine the session is bound to.
- Once the request is routed, :meth:`SessionStore.bind` records its engine
  (affinity) and the request among the session's requests in flight; when it
  ends, :meth:`SessionStore.record_turn` records the turn (usage, messages,
  activity). Both go through the background writer (``gateway.state.redis_state``),
  never on the request's path, and never into a session deleted meanwhile.
  The messages are the ones the route decoded, then the reply.
- ``GET /v1/sessions/{id}`` (owner or admin), ``DELETE /v1/sessions/{id}``
  (aborts its requests in flight on every replica, then removes it),
  ``GET /v1/sessions`` (admin): ``gateway.http.routes.sessions``.

With no API key configured the server is open and anyone may use any session.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import msgspec

from agentgate.gateway.api_types.openai import AssistantMessage
from agentgate.gateway.context import ANONYMOUS, client_id, filed_id
from agentgate.gateway.errors import BadRequestError, NotFoundError
from agentgate.gateway.state.redis_state import SharedState
from agentgate.gateway.state.requests_in_flight import RequestRegistry

# KEYS: session hash, sessions index. ARGV: session id, owner digest, now, ttl, '1' when the caller is admin,
# horizon (entries last active before it are dropped from the index: their sessions have expired)
_OPEN = """
local owner = redis.call('HGET', KEYS[1], 'owner')
if not owner then
  redis.call('HSET', KEYS[1], 'owner', ARGV[2], 'created', ARGV[3], 'turns', 0, 'prompt_tokens', 0,
             'completion_tokens', 0)
elseif owner ~= ARGV[2] and ARGV[5] ~= '1' then
  return {'forbidden', ''}
end
redis.call('HSET', KEYS[1], 'last_activity', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[6])
return {'ok', redis.call('HGET', KEYS[1], 'engine') or ''}
"""

# KEYS: session hash, its request set, sessions index. ARGV: session id, owner digest, '1' admin
# Returns the request ids in flight, or 'missing' (absent, or another key's session).
_DELETE = """
local owner = redis.call('HGET', KEYS[1], 'owner')
if not owner or (owner ~= ARGV[2] and ARGV[3] ~= '1') then return 'missing' end
local ids = redis.call('SMEMBERS', KEYS[2])
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
return ids
"""


# KEYS: session hash, its request set. ARGV: request id, engine, ttl. A session deleted meanwhile stays deleted.
_BIND = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'engine', ARGV[2])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return 1
"""

# KEYS: session hash, its request set, sessions index.
# ARGV: request id, session id, prompt tokens, completion tokens, now, ttl, messages JSON ('' keep)
# A session deleted meanwhile stays deleted: nothing is written back into it.
_TURN = """
redis.call('SREM', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], 'turns', 1)
redis.call('HINCRBY', KEYS[1], 'prompt_tokens', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'completion_tokens', ARGV[4])
redis.call('HSET', KEYS[1], 'last_activity', ARGV[5])
if ARGV[7] ~= '' then redis.call('HSET', KEYS[1], 'messages', ARGV[7]) end
redis.call('EXPIRE', KEYS[1], ARGV[6])
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('EXPIRE', KEYS[2], ARGV[6]) end
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[2])
return 1
"""


INDEX_SKEW_S = 60.0  # the clock skew between gateway replicas the index tolerates


def owner_label(digest: str) -> str:
    return digest if digest == ANONYMOUS else f"key:{digest[:16]}"


class SessionStore:
    def __init__(self, shared: SharedState, registry: RequestRegistry) -> None:
        self.shared = shared
        self.registry = registry
        self.keys = shared.keys
        self.ttl = shared.session_ttl
        client = shared.client
        self._open = client.register_script(_OPEN)
        self._delete = client.register_script(_DELETE)
        self._bind = client.register_script(_BIND)
        self._turn = client.register_script(_TURN)

    def _horizon(self) -> float:
        """Index entries last active before this have expired: the index (``P:sessions``) holds at most
        the sessions active within the TTL and a minute of clock skew between replicas, trimmed on
        every open, so client-chosen ids never grow it past the sessions alive."""
        return time.time() - self.ttl - INDEX_SKEW_S

    async def open(self, session_id: str, key: str, admin: bool) -> str | None:
        """Create or touch the session for a request; returns its engine (None: not bound yet)."""
        status, engine = await self.shared.guard(
            "a request with X-Session-Id",
            self._open(
                keys=[self.keys.session(session_id), self.keys.sessions],
                args=[
                    session_id,
                    key,
                    f"{time.time():.3f}",
                    self.ttl,
                    "1" if admin else "0",
                    f"{self._horizon():.3f}",
                ],
            ),
        )
        if status == "forbidden":  # the same answer as a missing session: no way to learn that it exists
            raise _not_found(client_id(session_id))
        return engine or None

    async def resolve(self, given: str, key: str, admin: bool) -> str:
        """The filed id a route's ``given`` session id names: the caller's own session of that id;
        for the admin, failing that, the session filed under ``given`` (the id the list shows), else
        the one session of any key with that client id (a 400 when several keys have one)."""
        own = filed_id(key, given)
        if not admin:
            return own
        client = self.shared.client

        async def find() -> str | list[str]:
            async with client.pipeline(transaction=False) as pipe:  # both candidates in one round trip
                pipe.exists(self.keys.session(own))
                pipe.exists(self.keys.session(given))
                own_exists, given_exists = await pipe.execute()
            if own_exists or given_exists:
                return own if own_exists else given
            return [s for s in await client.zrange(self.keys.sessions, 0, -1) if client_id(s) == given]

        found = await self.shared.guard("reading a session", find())
        if isinstance(found, str):
            return found
        if len(found) > 1:
            raise BadRequestError(
                f"{len(found)} keys have a session {given!r}: name one by the id GET /v1/sessions lists",
                param="session_id",
                code="ambiguous_session_id",
            )
        return found[0] if found else own

    async def get(self, session_id: str, key: str, admin: bool, *, shown: str | None = None) -> dict[str, Any]:
        """The session (``shown``: the id the caller named it by, its filed id by default)."""
        client = self.shared.client

        async def read() -> tuple[dict[str, str], set[str], int]:
            async with client.pipeline(transaction=True) as pipe:
                pipe.hgetall(self.keys.session(session_id))
                pipe.smembers(self.keys.session_requests(session_id))
                pipe.ttl(self.keys.session(session_id))
                fields, in_flight, ttl = await pipe.execute()
            return fields, in_flight, ttl

        fields, in_flight, ttl = await self.shared.guard("reading a session", read())
        if not fields or "owner" not in fields or (fields["owner"] != key and not admin):
            raise _not_found(shown or session_id)
        live = await self.registry.held(in_flight) if in_flight else {}
        return _view(shown or session_id, fields, ttl, sorted(live), with_messages=True)

    async def list(self, limit: int = 100, offset: int = 0) -> list[dict[str, Any]]:
        """Sessions, most recently active first (admin)."""
        client = self.shared.client

        async def read() -> list[dict[str, Any]]:
            await client.zremrangebyscore(self.keys.sessions, "-inf", self._horizon())
            ids = await client.zrevrange(self.keys.sessions, offset, offset + limit - 1)
            if not ids:
                return []
            async with client.pipeline(transaction=False) as pipe:
                for session_id in ids:
                    pipe.hgetall(self.keys.session(session_id))
                    pipe.ttl(self.keys.session(session_id))
                results = await pipe.execute()
            out, gone = [], []
            for i, session_id in enumerate(ids):
                fields, ttl = results[2 * i], results[2 * i + 1]
                if fields and "owner" in fields:
                    out.append(_view(session_id, fields, ttl, None, with_messages=False))
                else:
                    gone.append(session_id)
            if gone:
                await client.zrem(self.keys.sessions, *gone)
            return out

        return await self.shared.guard("listing sessions", read())

    async def delete(self, session_id: str, key: str, admin: bool, *, shown: str | None = None) -> list[str]:
        """Remove the session; returns its request ids that were in flight (``shown``: as :meth:`get`)."""
        result = await self.shared.guard(
            "deleting a session",
            self._delete(
                keys=[
                    self.keys.session(session_id),
                    self.keys.session_requests(session_id),
                    self.keys.sessions,
                ],
                args=[session_id, key, "1" if admin else "0"],
            ),
        )
        if result == "missing":
            raise _not_found(shown or session_id)
        return sorted(result)

    def bind(self, session_id: str, request_id: str, engine: str) -> None:
        """A request of the session was routed to ``engine``: the session is bound there (in the background)."""
        keys = [self.keys.session(session_id), self.keys.session_requests(session_id)]
        args = [request_id, engine, self.ttl]
        self.shared.enqueue(lambda: self._bind(keys=keys, args=args))

    def record_turn(
        self,
        session_id: str,
        request_id: str,
        usage: tuple[int, int],
        messages: Sequence[Any],
        reply: AssistantMessage | None,
    ) -> None:
        """A request of the session ended: count its turn and tokens, and keep ``messages``
        (what the client sent) then ``reply`` (the first choice as an assistant message, its
        tool calls parsed; None: the engine produced nothing) as the session's messages. In
        the background."""
        keys = [self.keys.session(session_id), self.keys.session_requests(session_id), self.keys.sessions]

        async def write() -> Any:
            conversation = msgspec.to_builtins([*messages, reply] if reply is not None else list(messages))
            text = json.dumps(conversation, ensure_ascii=False)
            args = [request_id, session_id, usage[0], usage[1], f"{time.time():.3f}", self.ttl, text]
            return await self._turn(keys=keys, args=args)

        self.shared.enqueue(write)


def _not_found(session_id: str) -> NotFoundError:
    return NotFoundError(f"no session {session_id!r}", param="session_id", code="session_not_found")


def _view(
    session_id: str,
    fields: dict[str, str],
    ttl: int,
    in_flight: list[str] | None,
    *,
    with_messages: bool,
) -> dict[str, Any]:
    prompt = int(fields.get("prompt_tokens", 0))
    completion = int(fields.get("completion_tokens", 0))
    last = float(fields.get("last_activity") or fields.get("created") or 0)
    view: dict[str, Any] = {
        "id": session_id,
        "object": "session",
        "owner": owner_label(fields["owner"]),
        "created": float(fields.get("created", 0)),
        "last_activity": last,
        "expires_at": round(time.time() + ttl, 3) if ttl and ttl > 0 else None,
        "turns": int(fields.get("turns", 0)),
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
        "engine": fields.get("engine") or None,
    }
    if in_flight is not None:
        view["requests_in_flight"] = in_flight
    if with_messages:
        view["messages"] = json.loads(fields["messages"]) if fields.get("messages") else []
    return view
