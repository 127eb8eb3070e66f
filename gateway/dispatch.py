"""From a validated request to a running :class:`~gateway.generation.Generation`.

    gen = await dispatch(gw, Job(request_id, arrival, prompts, params, n), context, conversation=body.messages)

One call, one way down, nothing called back up:

1. **admit**, counting engine requests (``n x prompts``): at most
   ``--max-engine-requests-per-request`` of them (else 400), the key's rate
   limit charged for all of them (the middleware took one; 429), and an
   admission ticket for each (``gateway.admission``: 429 with Retry-After
   when too many wait for their first token);
2. **route**: an engine (``gateway.engines``), the session's when it has one
   (``context.engine``, its affinity), else, for a turn of an agent program,
   the engine its last turn ran on (``gateway.program_store``: one Redis read,
   which also gives the tag the previous turn's end; nothing when Redis is
   away), else the least loaded; a bound request yields to the least loaded
   when its engine has a queue and that one has room (the rule is
   ``gateway.engines``');
3. a :class:`Generation` over that engine, whose constructor does nothing
   more. It holds a :class:`~gateway.lease.Lease` that gives all of it back
   when the request ends: the registry entry, the session's turn (the decoded
   ``conversation`` and the reply), the program's turn (its engine and end,
   and its tokens for the next turn: ``Job.turn``), the key's tokens for its
   rate limit;
4. **register**: the request id and its engine request ids
   (``gateway.registry``: 409 for an id in flight; the entry shows the
   generation's progress to operators), and, for a session, the request
   among its requests and the engine it is bound to (``gateway.sessions``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from agentgate.engine.protocol import ProgramTag
from agentgate.engine.sampling_params import SamplingParams
from agentgate.gateway.app_state import GatewayState
from agentgate.gateway.context import RequestContext
from agentgate.gateway.generation import Generation
from agentgate.gateway.lease import Lease
from agentgate.gateway.limits import check_engine_requests
from agentgate.gateway.turn_tokens import TurnStart


@dataclass(frozen=True, slots=True)
class Job:
    """What the engine is asked for: ``n`` choices for each prompt, with ``params``."""

    request_id: str
    arrival: float  # time.monotonic() when the request came in
    prompts: list[list[int]]
    params: SamplingParams
    n: int = 1
    program: ProgramTag | None = None  # the agent program it is a turn of (gateway.programs)
    turn: TurnStart | None = None  # what the program keeps of this turn's tokens (gateway.turn_tokens)


async def dispatch(
    gw: GatewayState, job: Job, context: RequestContext, *, conversation: Sequence[Any] = ()
) -> Generation:
    """Admit, route and register ``job`` (see the module docstring); ``conversation``: the
    messages a session records with the reply."""
    count = check_engine_requests(len(job.prompts), job.n, gw.settings.max_engine_requests_per_request)
    if gw.limiter is not None:
        await gw.limiter.admit(context.key, count - 1)  # the middleware took one
    program, affinity = job.program, context.engine
    if program is not None and gw.programs is not None:
        last = await gw.programs.last_turn(program.program_id)
        program = msgspec.structs.replace(program, previous_turn_end=last.ended)
        affinity = affinity or last.engine
    ticket = gw.admission.enter(count)
    try:
        engine = gw.pool.pick(affinity=affinity)
        lease = Lease(job.request_id, context, registry=gw.registry, sessions=gw.sessions, limiter=gw.limiter,
                      conversation=conversation, engine=engine.address, programs=gw.programs,
                      program_id=program.program_id if program is not None else None, turn=job.turn)  # fmt: skip
        generation = Generation(
            request_id=job.request_id,
            engine=engine,
            tokenizer=gw.model.tokenizer,
            metrics=gw.metrics,
            ticket=ticket,
            arrival=job.arrival,
            prompts=job.prompts,
            params=job.params,
            n=job.n,
            lease=lease,
            program=program,
        )
        gw.registry.register(job.request_id, engine, [c.request_id for c in generation.choices], context,
                             progress=generation)  # fmt: skip
    except BaseException:
        ticket.close()
        raise
    if lease.keeps_reply:
        gw.sessions.bind(context.session_id, job.request_id, engine.address)
    return generation
