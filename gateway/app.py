"""create_app: the gateway's Starlette application.

    app = create_app(settings, engines=[EngineTarget(address, process, owned=True)])

The lifespan loads the tokenizer, connects to every engine (waiting for it
to load its model), and yields the :class:`~gateway.state.GatewayState` the
routes read as ``request.state.gateway``. On shutdown it disconnects and
stops the engine processes it owns.

Middleware, outermost first: request id (and a last-resort 500 with an
OpenAI body), CORS (when origins are configured), API keys (when keys are
configured), body size limit. All pure ASGI.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager

import anyio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware

from engine.client import EngineClient, stop_engine_process
from engine.model_path import resolve_model_path
from engine.tokenizer import load_tokenizer
from gateway.admission import Admission
from gateway.auth import AuthMiddleware, KeyChecker
from gateway.engines import EnginePool, EngineTarget
from gateway.errors import EngineError, GatewayError, HTTPException, handle_exception
from gateway.metrics import Metrics
from gateway.middleware import BodyLimitMiddleware, RequestIdMiddleware
from gateway.routes import openai, ops, tokenize
from gateway.settings import Settings
from gateway.state import GatewayState

log = logging.getLogger("agentgate.gateway")

__all__ = ["EngineTarget", "create_app"]


def create_app(
    settings: Settings,
    *,
    engines: Sequence[EngineTarget] = (),
    clients: Sequence[EngineClient] = (),
) -> Starlette:
    """The gateway in front of ``engines`` (connected by the lifespan) and
    ``clients`` (already connected, owned by the caller)."""
    if not engines and not clients:
        raise ValueError("create_app needs at least one engine (engines=[EngineTarget(...)] or clients=[...])")
    metrics = Metrics()
    keys = KeyChecker(settings.api_keys, settings.admin_key)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, GatewayState]]:
        async with AsyncExitStack() as stack:
            connected = list(clients)
            for target in engines:
                if target.owned and target.process is not None:
                    stack.push_async_callback(anyio.to_thread.run_sync, stop_engine_process, target.process)
                client = await stack.enter_async_context(
                    EngineClient.connect(
                        target.address, process=target.process, startup_timeout=settings.startup_timeout
                    )
                )
                connected.append(client)
            model_path = resolve_model_path(settings.model)
            tokenizer = await anyio.to_thread.run_sync(load_tokenizer, model_path)
            pool = EnginePool(connected)
            admission = Admission(settings.max_waiting)
            metrics.watch(
                lambda: pool.stats,
                lambda: pool.num_requests,
                lambda: admission.waiting,
                lambda: sum(not e.is_dead for e in pool.engines),
            )
            state = GatewayState(
                settings=settings,
                pool=pool,
                tokenizer=tokenizer,
                metrics=metrics,
                admission=admission,
                model_names=settings.served_model_name or (pool.info.model,),
                model_root=str(model_path),
            )
            app.state.gateway = state  # for the server's graceful drain (gateway.cli)
            log.info(startup_line(settings, state, keys))
            yield {"gateway": state}
            log.info("agentgate shutting down")

    middleware = [Middleware(RequestIdMiddleware)]
    if settings.allowed_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(settings.allowed_origins),
                allow_methods=list(settings.allowed_methods),
                allow_headers=list(settings.allowed_headers),
                allow_credentials=settings.allow_credentials,
                expose_headers=["X-Request-Id", "Retry-After"],
            )
        )
    if keys.enabled:
        middleware.append(Middleware(AuthMiddleware, keys=keys))
    middleware.append(Middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes))

    return Starlette(
        routes=[*openai.routes, *tokenize.routes, *ops.routes],
        middleware=middleware,
        exception_handlers={
            GatewayError: handle_exception,
            EngineError: handle_exception,
            HTTPException: handle_exception,
        },
        lifespan=lifespan,
    )


def startup_line(settings: Settings, state: GatewayState, keys: KeyChecker) -> str:
    info = state.pool.info
    auth = "open"
    if keys.enabled:
        parts = [f"{len(settings.api_keys)} API key(s)"] if settings.api_keys else ["open /v1"]
        parts.append("admin key" if settings.admin_key else "no admin key (operator routes closed)")
        auth = ", ".join(parts)
    cors = ", ".join(settings.allowed_origins) or "off"
    engines = len(state.pool.engines)
    return (
        f"agentgate ready at http://{settings.host}:{settings.port} serving {state.model_name} "
        f"| runner {info.runner} on {info.device} ({info.dtype}) "
        f"| KV cache {info.kv_capacity_tokens:,} tokens ({info.num_kv_blocks} blocks x {info.block_size}) "
        f"| max_model_len {info.max_model_len:,} | {engines} engine{'s' if engines > 1 else ''} "
        f"| auth: {auth} | CORS: {cors}"
    )
