"""What a running request holds in the shared services, given back once when it
ends: its registry entry, its session's turn (the messages the client sent,
then the reply), its program's turn (the engine it ran on, when it ended, and
the tokens it read and wrote) and its key's tokens for the rate limit.

:func:`gateway.dispatch.dispatch` takes them and hands the :class:`Lease` to
the :class:`~gateway.generation.Generation`, whose ``close`` releases it: the
call goes down to the services, never back up to dispatch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentgate.gateway.admission.rate_limits import RateLimiter
from agentgate.gateway.api_types.openai import AssistantMessage
from agentgate.gateway.context import RequestContext
from agentgate.gateway.programs.last_turns import ProgramStore
from agentgate.gateway.programs.turn_tokens import TurnStart
from agentgate.gateway.state.requests_in_flight import RequestRegistry
from agentgate.gateway.state.sessions import SessionStore


class Lease:
    __slots__ = (
        "request_id",
        "context",
        "conversation",
        "engine",
        "program_id",
        "_registry",
        "_sessions",
        "_programs",
        "_limiter",
        "_turn",
    )

    def __init__(
        self,
        request_id: str,
        context: RequestContext,
        *,
        registry: RequestRegistry,
        sessions: SessionStore | None = None,
        limiter: RateLimiter | None = None,
        conversation: Sequence[Any] = (),
        engine: str = "",
        programs: ProgramStore | None = None,
        program_id: str | None = None,
        turn: TurnStart | None = None,
    ) -> None:
        self.request_id = request_id
        self.context = context
        self.conversation = conversation  # what a session records with the reply
        self.engine = engine  # the address of the engine it runs on
        self.program_id = program_id  # the agent program it is a turn of (gateway.programs.tags)
        self._registry = registry
        self._sessions = sessions if context.session_id is not None else None
        self._programs = programs if program_id is not None else None
        self._limiter = limiter
        self._turn = turn

    @property
    def keeps_reply(self) -> bool:
        """Whether the reply is recorded (a session's turn)."""
        return self._sessions is not None

    @property
    def keeps_turn(self) -> bool:
        """Whether the reply and its tokens are kept for the program's next turn (gateway.programs.turn_tokens)."""
        return self._turn is not None

    def release(
        self,
        prompt_tokens: int,
        completion_tokens: int,
        reply: AssistantMessage | None,
        output_ids: Sequence[int] = (),
    ) -> None:
        """The request ended: ``reply`` is its first choice as an assistant message (None:
        not kept, or the engine produced nothing), ``output_ids`` its tokens when kept."""
        if self._turn is not None:
            self._turn.ended(output_ids, reply)
        # The session's turn is queued first: a client that reads its session right after the
        # reply waits for one background write, not two.
        if self._sessions is not None:
            self._sessions.record_turn(
                self.context.session_id, self.request_id, (prompt_tokens, completion_tokens), self.conversation, reply
            )
        if self._programs is not None:
            self._programs.turn_ended(self.program_id, self.engine)
        self._registry.unregister(self.request_id)
        if self._limiter is not None:
            self._limiter.debit(self.context.key, prompt_tokens + completion_tokens)
