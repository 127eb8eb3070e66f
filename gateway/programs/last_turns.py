"""Agent programs in Redis: where a program's last turn ran and when it ended, so that any
gateway replica sends its next turn to the engine that holds its conversation's KV (pinned
there while its tools run, ``engine.scheduling.retention``) and tells that engine when the previous
turn ended (``ProgramTag.previous_turn_end``, a tool gap).

One hash per program (``gateway.programs.tags`` says what a program is), ``P:program:{id}``::

    engine   the address of the engine its last turn ran on
    ended    when that turn ended (wall clock, ``time.time()``)

written when a turn ends (:meth:`ProgramStore.turn_ended`, in the background) and read when
the next one is dispatched (:meth:`ProgramStore.last_turn`, one HMGET on the request's
path). It expires ``--session-ttl`` seconds after the last turn ended.

The record is a hint, never a condition: while Redis is unreachable the read answers
:data:`UNKNOWN` (no affinity, no previous end), at once when Redis is known to be away
(``SharedState.up``; its heartbeat notices the return), and the outage is logged once by
``gateway.state.redis_state``. A session's turns keep their session's engine.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

from agentgate.gateway.state.redis_state import RedisUnavailableError, SharedState


class LastTurn(NamedTuple):
    engine: str | None = None  # the engine's address; None: unknown
    ended: float = 0.0  # wall clock; 0: unknown


UNKNOWN = LastTurn()


class ProgramStore:
    def __init__(self, shared: SharedState) -> None:
        self.shared = shared
        self.keys = shared.keys
        self.ttl = shared.session_ttl

    async def last_turn(self, program_id: str) -> LastTurn:
        """The program's last turn as recorded: :data:`UNKNOWN` when none is, or Redis is away."""
        if not self.shared.up:
            return UNKNOWN
        read = self.shared.client.hmget(self.keys.program(program_id), ["engine", "ended"])
        try:
            engine, ended = await self.shared.guard("reading a program's last turn", read)
        except RedisUnavailableError:
            return UNKNOWN
        return LastTurn(engine or None, float(ended or 0.0))

    def turn_ended(self, program_id: str, engine: str) -> None:
        """A turn of the program ended now, on ``engine`` (recorded in the background)."""
        key = self.keys.program(program_id)
        fields = {"engine": engine, "ended": f"{time.time():.3f}"}

        async def write() -> Any:
            async with self.shared.client.pipeline(transaction=True) as pipe:
                pipe.hset(key, mapping=fields)
                pipe.expire(key, self.ttl)
                return await pipe.execute()

        self.shared.enqueue(write)
