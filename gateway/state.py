"""What every route needs, built once the engines are connected: the lifespan
yields it and routes read it as ``request.state.gateway``."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio

from engine.errors import EngineError
from engine.sampling_params import SamplingParams
from engine.tokenizer import Tokenizer
from gateway.admission import Admission
from gateway.engines import EnginePool
from gateway.errors import NotFoundError
from gateway.generation import Generation
from gateway.metrics import Metrics
from gateway.settings import Settings

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
            return Generation(
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
            await pool.abort_all()
        except EngineError:
            return  # a dead engine has ended them already
        with anyio.move_on_after(2.0):
            while pool.num_requests and not give_up():
                await anyio.sleep(0.02)
