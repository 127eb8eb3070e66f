"""Sessions in Redis: an agent's conversation, named by ``X-Session-Id``.

A session records its owner (the API key's digest), the messages so far
(the conversation of its latest turn: the messages the client sent, then the
reply), usage (prompt / completion tokens), the number of turns, the engine
it is bound to (affinity: its prefix is cached there), its creation and last
activity. It expires ``--session-ttl`` seconds after its last activity.

- A request naming a session opens it (:meth:`SessionStore.open`, one script
  call on the request's path): created on first use and owned by the key that
  created it; another key's session is a 403 (the admin key may use any). It
  returns the engine the session is bound to.
- When the request ends, the registry's listener records the turn (usage,
  messages, activity) through the background writer (``gateway.redis_state``),
  never on the request's path, and never into a session deleted meanwhile.
- ``GET /v1/sessions/{id}`` (owner or admin), ``DELETE /v1/sessions/{id}``
  (aborts its requests in flight on every replica, then removes it),
  ``GET /v1/sessions`` (admin): ``gateway.routes.sessions``.

With no API key configured the server is open and anyone may use any session.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from agentgate.gateway.errors import NotFoundError, PermissionDeniedError
from agentgate.gateway.redis_state import SharedState
from agentgate.gateway.request_context import ANONYMOUS, RequestContext

if TYPE_CHECKING:
    pass

# KEYS: session hash, sessions index. ARGV: session id, owner digest, now, ttl, '1' when the caller is admin
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


def owner_label(digest: str) -> str:
    return digest if digest == ANONYMOUS else f"sha256:{digest[:16]}"


class SessionStore:
    def __init__(self, shared: SharedState) -> None:
        self.shared = shared
        self.keys = shared.keys
        self.ttl = shared.session_ttl
        client = shared.client
        self._open = client.register_script(_OPEN)
        self._delete = client.register_script(_DELETE)

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
                ],
            ),
        )
        if status == "forbidden":
            raise PermissionDeniedError(
                f"the session {session_id!r} belongs to another API key",
                code="session_forbidden",
            )
        return engine or None

    async def get(self, session_id: str, key: str, admin: bool) -> dict[str, Any]:
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
            raise _not_found(session_id)
        live = await self.shared.lookup_requests(in_flight) if in_flight else {}
        return _view(session_id, fields, ttl, sorted(live), with_messages=True)

    async def list(self, limit: int = 100, offset: int = 0) -> list[dict[str, Any]]:
        """Sessions, most recently active first (admin)."""
        client = self.shared.client

        async def read() -> list[dict[str, Any]]:
            horizon = time.time() - self.ttl - 60
            await client.zremrangebyscore(self.keys.sessions, "-inf", horizon)
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

    async def delete(self, session_id: str, key: str, admin: bool) -> list[str]:
        """Remove the session; returns its request ids that were in flight."""
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
            raise _not_found(session_id)
        return sorted(result)


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


def conversation(ctx: RequestContext, reply: str | None) -> str:
    """The session's messages after a turn, as JSON: what the client sent
    (chat: its messages; completions: the prompt as a user message), then
    ``reply`` (the first choice's text as the client got it; None: the
    engine produced nothing). Runs in the background writer."""
    body = json.loads(b"".join(ctx.body or []) or b"{}")
    if ctx.path.endswith("/chat/completions"):
        messages = list(body.get("messages") or [])
    else:
        prompt = body.get("prompt")
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else []
    if reply is not None:
        messages.append({"role": "assistant", "content": reply})
    return json.dumps(messages, ensure_ascii=False)
