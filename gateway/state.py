"""What every route needs, built once the engines are connected: the lifespan
yields it and routes read it as ``request.state.gateway``.

It is also the engine pool's listener: when a request is registered or ends,
it files that in Redis (the request registry, the session's turn, the key's
tokens) through the shared state's background writer, off the request's path.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

from agentgate.engine.errors import EngineError
from agentgate.engine.sampling_params import SamplingParams
from agentgate.engine.tokenizer import Tokenizer
from agentgate.gateway.admission import Admission
from agentgate.gateway.engines import EnginePool, Registered
from agentgate.gateway.errors import NotFoundError
from agentgate.gateway.generation import Generation
from agentgate.gateway.metrics import Metrics
from agentgate.gateway.request_context import ANONYMOUS, CURRENT
from agentgate.gateway.settings import Settings

if TYPE_CHECKING:
    from agentgate.gateway.auth import KeyChecker
    from agentgate.gateway.cluster import Cluster
    from agentgate.gateway.ratelimit import RateLimiter
    from agentgate.gateway.redis_state import SharedState
    from agentgate.gateway.sessions import SessionStore

log = logging.getLogger("agentgate.gateway")


@dataclass
class GatewayState:
    settings: Settings
    pool: EnginePool
    tokenizer: Tokenizer
    metrics: Metrics
    admission: Admission
    model_names: tuple[str, ...]
    model_root: str
    created: int = field(default_factory=lambda: int(time.time()))
    keys: KeyChecker | None = None
    shared: SharedState | None = None  # None: no Redis configured (sessions and cross-replica routes answer 503)
    sessions: SessionStore | None = None
    limiter: RateLimiter | None = None  # None: no rate limit configured
    cluster: Cluster | None = None
    replica_id: str = ""

    @property
    def model_name(self) -> str:
        return self.model_names[0]

    @property
    def max_model_len(self) -> int:
        return self.pool.info.max_model_len

    @property
    def vocab_size(self) -> int:
        return self.pool.info.vocab_size

    def check_model(self, model: str | None) -> None:
        """404 for a model this gateway does not serve (None means the served one)."""
        if model is not None and model not in self.model_names:
            raise NotFoundError(
                f"The model `{model}` does not exist; this server serves {', '.join(self.model_names)}.",
                param="model",
                code="model_not_found",
            )

    def start(
        self, request_id: str, arrival: float, prompts: list[list[int]], params: SamplingParams, n: int
    ) -> Generation:
        """Admit a validated request (429 when too many wait) and route it to an engine."""
        ticket = self.admission.enter()
        try:
            gen = Generation(
                request_id=request_id,
                pool=self.pool,
                tokenizer=self.tokenizer,
                metrics=self.metrics,
                ticket=ticket,
                arrival=arrival,
                prompts=prompts,
                params=params,
                n=n,
            )
        except BaseException:
            ticket.close()
            raise
        ctx = CURRENT.get()
        if ctx is not None and ctx.session_id is not None and gen.choices:
            gen.choices[0].keep_text = True  # the reply, for the session's messages
        self.pool.attach(request_id, gen)
        return gen

    # -- the engine pool's listener ----------------------------------------------------
    def request_started(self, request_id: str, registered: Registered) -> None:
        if self.shared is None:
            return
        ctx = registered.context
        self.shared.request_started(
            request_id,
            registered.engine.address,
            registered.engine_request_ids,
            ctx.key if ctx is not None else ANONYMOUS,
            ctx.session_id if ctx is not None else None,
        )

    def request_finished(self, request_id: str, registered: Registered) -> None:
        if self.shared is None:
            return
        ctx, gen = registered.context, registered.generation
        usage = (gen.usage.prompt_tokens, gen.usage.completion_tokens) if gen is not None else (0, 0)
        key = ctx.key if ctx is not None else ANONYMOUS
        if self.limiter is not None:
            self.limiter.debit(key, usage[0] + usage[1])
        messages = None
        session_id = ctx.session_id if ctx is not None else None
        if session_id is not None and gen is not None and gen.choices:
            from agentgate.gateway.sessions import conversation

            first = gen.choices[0]
            reply = first.text if first.num_tokens or first.finish_reason else None
            messages = lambda: conversation(ctx, reply)
        self.shared.request_finished(request_id, key, session_id, usage, messages)

    async def drain(self, timeout: float, give_up: Callable[[], bool] = lambda: False) -> None:
        """For a graceful shutdown: let requests in flight finish for up to
        ``timeout`` seconds, then abort the rest, so every stream still ends
        with a finish reason and ``[DONE]`` instead of a cut connection."""
        pool = self.pool
        deadline = anyio.current_time() + timeout
        if pool.num_requests:
            log.info("waiting up to %.1f s for %d request(s) in flight", timeout, pool.num_requests)
        while pool.num_requests and anyio.current_time() < deadline and not give_up():
            await anyio.sleep(0.05)
        if not pool.num_requests:
            return
        log.info("aborting %d request(s) still in flight", pool.num_requests)
        try:
            await pool.abort(pool.matching(lambda _: True))  # only this gateway's: engines may be shared
        except EngineError:
            return  # a dead engine has ended them already
        with anyio.move_on_after(2.0):
            while pool.num_requests and not give_up():
                await anyio.sleep(0.02)

