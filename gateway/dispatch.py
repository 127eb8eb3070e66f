"""From a validated request to a running :class:`~gateway.generation.Generation`.

    gen = await dispatch(dispatcher, Job(request_id, arrival, prompts, params, n), context, conversation=...)

One call, one way down, nothing called back up; the engine has the request when it returns:

1. **admit**, here and nowhere else, counting engine requests (``n x prompts``): at
   most ``--max-engine-requests-per-request`` of them (else 400); the key's rate limit
   charged for all of them at once (``gateway.admission.rate_limits``: 429 with
   Retry-After); the ``X-Session-Id`` session opened (``gateway.state.sessions``: one
   script call, created on first use, its engine read; 404 for another key's session;
   503 without Redis). A request's later rounds (a server-run tool loop's next reply)
   come back in the context its first round was admitted in (``context.admitted``) and
   are neither charged nor opened again. Then an admission ticket for each engine
   request (``gateway.admission.waiting``: 429 with Retry-After when too many wait for
   their first token);
2. **route**: an engine (``gateway.engines.pool``), the session's when it has one
   (its affinity), else the one the request names (``context.engine``: a Responses
   chain's), else, for a turn of an agent program,
   the engine its last turn ran on (``gateway.programs.last_turns``: one Redis read,
   which also gives the tag the previous turn's end; nothing when Redis is
   away), else the least loaded; a bound request yields to the least loaded
   when its engine has a queue and that one has room (the rule is
   ``gateway.engines.pool``');
3. a :class:`Generation` of the job over that engine. It holds a
   :class:`~gateway.lease.Lease` that gives all of it back when the request
   ends: the registry entry, the session's turn (the decoded ``conversation``
   and the reply), the program's turn (its engine and end, and its tokens for
   the next turn: ``Job.turn``), the key's tokens for its rate limit;
4. **register**: the request id and its engine request ids
   (``gateway.state.requests_in_flight``: 409 for an id in flight; the entry shows the
   generation's progress to operators);
5. **submit**: every choice's ``AddRequest`` goes to the engine now, before the
   route returns (as vLLM's ``AsyncLLM.add_request`` and mini-sglang's API
   server do), and, for a session, the request is filed among its requests
   and the session bound to the engine (``gateway.state.sessions``).

The services it uses are a :class:`Dispatcher`, built once by the lifespan.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from agentgate.engine.text.tokenizer import Tokenizer
from agentgate.gateway.admission.bounds import check_engine_requests
from agentgate.gateway.admission.rate_limits import RateLimiter
from agentgate.gateway.admission.waiting import Admission
from agentgate.gateway.context import RequestContext, adapter_session, filed_id
from agentgate.gateway.engines.pool import EnginePool
from agentgate.gateway.errors import ServiceUnavailableError
from agentgate.gateway.generation import Generation
from agentgate.gateway.job import Job
from agentgate.gateway.lease import Lease
from agentgate.gateway.observation.log_context import note_adapter
from agentgate.gateway.observation.metrics import Metrics
from agentgate.gateway.programs.last_turns import ProgramStore
from agentgate.gateway.state.requests_in_flight import RequestRegistry
from agentgate.gateway.state.sessions import SessionStore

__all__ = ["Dispatcher", "Job", "dispatch"]


@dataclass(frozen=True)
class Dispatcher:
    """The services dispatch uses, and nothing else."""

    pool: EnginePool
    registry: RequestRegistry
    admission: Admission
    metrics: Metrics
    tokenizer: Tokenizer
    max_engine_requests: int  # --max-engine-requests-per-request
    sessions: SessionStore | None = None  # None: no Redis
    programs: ProgramStore | None = None  # agent programs' last turns (None: no Redis)
    limiter: RateLimiter | None = None  # None: no rate limit configured
    salt_by_key: bool = False  # --prefix-cache-isolation key: every request's cache salted with its key
    loras: Mapping[str, str] = dataclasses.field(default_factory=dict)  # the LoRA adapters, by name (ServedModel's)


def tenant_job(job: Job, key: str, salt_by_key: bool) -> Job:
    """``job`` as its key's: the engine's tenant is the key's digest, and under
    ``--prefix-cache-isolation key`` the key's digest salts its prefix cache (before any salt of its own,
    so two keys never share KV whatever salts they send)."""
    salt = f"{key}\x1f{job.cache_salt}" if salt_by_key else job.cache_salt
    return dataclasses.replace(job, tenant=key, cache_salt=salt)


async def dispatch(
    dispatcher: Dispatcher, job: Job, context: RequestContext, *, conversation: Sequence[Any] = ()
) -> Generation:
    """Admit, route, register and submit ``job`` (see the module docstring); ``conversation``:
    the messages a session records with the reply."""
    d = dispatcher
    if job.model in d.loras:  # the request names a LoRA adapter: the engine runs it through that adapter
        job = dataclasses.replace(job, lora=job.model)
        note_adapter(job.lora)  # on its access line
    count = check_engine_requests(len(job.prompts), job.n, d.max_engine_requests)
    context = await _admit(d, context, count, job.lora)
    program, affinity = job.program, context.engine
    if program is not None and d.programs is not None:
        last = await d.programs.last_turn(program.program_id)
        program = msgspec.structs.replace(program, previous_turn_end=last.ended)
        affinity = affinity or last.engine
    ticket = d.admission.enter(count)
    try:
        engine = d.pool.pick(affinity=affinity)
        filed = filed_id(context.key, job.request_id)  # the key's request: no other key reaches it
        lease = Lease(
            filed,
            context,
            registry=d.registry,
            sessions=d.sessions,
            limiter=d.limiter,
            conversation=conversation,
            engine=engine.address,
            programs=d.programs,
            program_id=program.program_id if program is not None else None,
            turn=job.turn,
        )
        job = tenant_job(dataclasses.replace(job, program=program), context.key, d.salt_by_key)
        generation = Generation(job, engine, d.tokenizer, d.metrics, ticket, lease)
        engine_ids = [c.request_id for c in generation.choices]
        d.registry.register(filed, engine, engine_ids, context, progress=generation)
    except BaseException:
        ticket.close()
        raise
    try:
        generation.submit()
    except BaseException:  # the engine died since it was picked: nothing runs, everything is given back
        await generation.aclose()
        generation.close()
        raise
    if lease.keeps_reply:
        d.sessions.bind(context.session_id, filed, engine.address)
    return generation


async def _admit(d: Dispatcher, context: RequestContext, count: int, lora: str) -> RequestContext:
    """Charge the key's rate limit ``count`` engine requests and open the session (the adapter's own
    under a LoRA adapter ``lora``: `adapter_session`), once per request: the context admitted, its
    engine the session's when it is bound to one."""
    if context.admitted:
        return context
    if context.session_id is not None:
        context = dataclasses.replace(context, session_id=adapter_session(context.session_id, lora))
    if d.limiter is not None:
        await d.limiter.admit(context.key, count)
    engine = context.engine
    if context.session_id is not None:
        if d.sessions is None:
            raise ServiceUnavailableError(
                "X-Session-Id needs Redis, and this gateway runs without it (start it with --redis-url, "
                "or through `agentgate serve`, which embeds one)",
                code="redis_not_configured",
            )
        engine = await d.sessions.open(context.session_id, context.key, context.admin) or engine
    return dataclasses.replace(context, engine=engine, admitted=True)
