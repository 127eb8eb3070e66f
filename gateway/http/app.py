"""create_app: the gateway's Starlette application.

    app = create_app(settings, engines=[EngineTarget(address, process, owned=True)])

The lifespan loads the tokenizer, connects to every engine (waiting for it
to load its model), connects to Redis when ``settings.redis_url`` is set
(sessions, request registry, pause state, rate limits, the control channel:
``gateway.state.redis_state``, ``gateway.state.cluster``), pauses its engines if the
cluster is paused, and yields the :class:`~gateway.app_state.GatewayState` the
routes read as ``request.state.gateway``. On shutdown it flushes what it
still has to write to Redis, disconnects and stops the engine processes it
owns.

Middleware, outermost first: request id (and a last-resort 500 with an
OpenAI body), Anthropic error bodies on the Anthropic routes, CORS (when
origins are configured), API keys (when keys are configured, or the server
listens off loopback: ``gateway.command.exposure``), body size limit, request context
(who asks, for which session: read from the headers; dispatch admits). All pure ASGI.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager

import anyio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware

from agentgate.engine.front.addresses import remove_socket_file
from agentgate.engine.front.socket_keys import GatewayKeys
from agentgate.engine.model_files.model_path import model_display_name, resolve_model_path
from agentgate.engine.text.tokenizer import load_tokenizer
from agentgate.gateway.admission.output_budget import OutputBudget
from agentgate.gateway.admission.rate_limits import RateLimiter, parse_key_limits
from agentgate.gateway.admission.waiting import Admission
from agentgate.gateway.app_state import GatewayState
from agentgate.gateway.command.exposure import auth_summary, exposure_warnings
from agentgate.gateway.config.reasoning_settings import apply_template_settings, template_kwargs
from agentgate.gateway.config.sampling_defaults import FIELDS as SAMPLING_FIELDS
from agentgate.gateway.config.sampling_defaults import sampling_defaults
from agentgate.gateway.config.settings import Settings
from agentgate.gateway.dispatch import Dispatcher
from agentgate.gateway.engines.discovery import EngineDiscovery
from agentgate.gateway.engines.identity import GatewayModel
from agentgate.gateway.engines.pool import EngineTarget
from agentgate.gateway.engines.supervisor import EngineSupervisor, RestartPolicy
from agentgate.gateway.http.anthropic_errors import AnthropicErrorMiddleware
from agentgate.gateway.http.errors import EXCEPTION_HANDLERS
from agentgate.gateway.http.forwarded import ForwardedMiddleware
from agentgate.gateway.http.middleware import (
    AuthMiddleware,
    BodyLimitMiddleware,
    RequestContextMiddleware,
    RequestIdMiddleware,
    WebSocketOriginMiddleware,
)
from agentgate.gateway.http.routes import anthropic, dashboard, lora, openai, ops, playground, tokenize
from agentgate.gateway.http.routes import responses as responses_routes
from agentgate.gateway.http.routes import sessions as sessions_routes
from agentgate.gateway.http.tracing import TracingMiddleware
from agentgate.gateway.mcp import McpHost
from agentgate.gateway.observation.metrics import Metrics
from agentgate.gateway.observation.tracing import Tracer, traces_endpoint
from agentgate.gateway.programs.last_turns import ProgramStore
from agentgate.gateway.programs.turn_tokens import TurnTokens
from agentgate.gateway.responses_api.store import ResponseStore
from agentgate.gateway.served_model import ServedModel
from agentgate.gateway.state.auth import KeyChecker
from agentgate.gateway.state.cluster import Cluster
from agentgate.gateway.state.key_digests import use_digest_secret
from agentgate.gateway.state.redis_state import ReplicaInfo, SharedState, make_replica_id
from agentgate.gateway.state.requests_in_flight import RequestRegistry
from agentgate.gateway.state.sealing import deployment_sealer
from agentgate.gateway.state.sessions import SessionStore

log = logging.getLogger("agentgate.gateway")

__all__ = ["EngineTarget", "create_app"]


def create_app(settings: Settings, *, engines: Sequence[EngineTarget], tracer: Tracer | None = None) -> Starlette:
    """The gateway in front of ``engines`` (connected by the lifespan). ``tracer``: where its
    generation requests' spans go (default: the OTLP endpoint the settings or the environment
    name, if any: ``gateway.observation.tracing``)."""
    if not engines and settings.redis_url is None:
        raise ValueError("create_app needs engines (engines=[EngineTarget(...)]), or a redis_url to find them in")
    settings.check_shared_state()
    use_digest_secret(settings.key_digest_secret)  # before any key is digested (per-key rate limits below)
    metrics = Metrics()
    endpoint = traces_endpoint(settings.otlp_traces_endpoint)
    if tracer is None and endpoint is not None:
        tracer = Tracer.to_endpoint(endpoint)
    keys = KeyChecker.from_settings(settings)  # off loopback, operator routes are guarded even with no key
    admission = Admission(settings.max_waiting)
    replica_id = make_replica_id(settings.port)
    shared = sessions = programs = limiter = responses = None
    if settings.redis_url is not None:  # connected on first use; without it the gateway runs alone
        shared = SharedState(
            settings.redis_url, prefix=settings.redis_prefix, replica_id=replica_id, session_ttl=settings.session_ttl
        )
        limiter = RateLimiter(
            shared,
            rpm=settings.rate_limit_rpm,
            tpm=settings.rate_limit_tpm,
            per_key=parse_key_limits(settings.key_rate_limits),
            redis_down=settings.rate_limit_redis_down,
        )
        limiter = limiter if limiter.enabled else None
        metrics.watch_shared_state(shared, limiter)
    registry = RequestRegistry(shared)
    supervisor: EngineSupervisor | EngineDiscovery
    curve = GatewayKeys.load(settings.engine_curve_dir) if settings.engine_curve_dir else None
    if engines:
        supervisor = EngineSupervisor(
            engines,
            policy=RestartPolicy.from_settings(settings),
            startup_timeout=settings.startup_timeout,
            curve=curve,
        )
    else:  # the engines the Redis registry names, found and dropped while the gateway runs
        supervisor = EngineDiscovery(shared, startup_timeout=settings.startup_timeout, curve=curve)
    if shared is not None:
        sessions = SessionStore(shared, registry)
        programs = ProgramStore(shared)
        responses = ResponseStore(shared, settings.response_ttl)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, GatewayState]]:
        async with AsyncExitStack() as stack:
            if tracer is not None:
                stack.callback(tracer.shutdown)  # exports the spans still queued
            for target in engines:
                if target.owned and target.process is not None:
                    stack.callback(remove_socket_file, target.address)  # runs after the engine stopped
            engine_tasks = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(engine_tasks.cancel_scope.cancel)
            model_path = resolve_model_path(settings.model)
            tokenizer = await anyio.to_thread.run_sync(load_tokenizer, model_path)
            reasoning = apply_template_settings(tokenizer, settings)
            if isinstance(supervisor, EngineDiscovery):  # registered engines must serve this model
                supervisor.model = GatewayModel(model_display_name(settings.model), tokenizer.vocab_digest)
            pool = await engine_tasks.start(supervisor.run)
            info = pool.info
            names = settings.served_model_name or (info.model,)
            metrics.watch(
                names[0],
                lambda: list(zip(pool.addresses, pool.stats, strict=True)),
                lambda: registry.num_requests,
                lambda: admission.waiting,
                lambda: pool.num_live,
                info.max_model_len,
            )
            sealer = await deployment_sealer(settings.sealing_key, shared)
            adapters = dict.fromkeys(info.loras, "")  # the engines' LoRA adapters (docs/lora.md), by name
            state = GatewayState(
                settings=settings,
                model=ServedModel(
                    names=names,
                    root=model_path.name,  # the file's (or directory's) name: a client learns no server path
                    tokenizer=tokenizer,
                    max_model_len=info.max_model_len,
                    vocab_size=info.vocab_size,
                    tool_call_parser=settings.tool_call_parser,
                    max_forced_tool_calls=settings.max_forced_tool_calls,
                    budget=OutputBudget.from_flags(
                        settings.max_tokens_default, settings.max_tokens_cap, settings.max_tokens_overflow
                    ),
                    sampling=sampling_defaults(
                        model_path, {name: getattr(settings, f"default_{name}") for name in SAMPLING_FIELDS}
                    ),
                    reasoning=reasoning,
                    reasoning_budget=settings.reasoning_budget,
                    template_kwargs=template_kwargs(settings.default_chat_template_kwargs),
                    adapters=adapters,
                ),
                dispatcher=Dispatcher(
                    pool=pool,
                    registry=registry,
                    admission=admission,
                    metrics=metrics,
                    tokenizer=tokenizer,
                    max_engine_requests=settings.max_engine_requests_per_request,
                    sessions=sessions,
                    programs=programs,
                    limiter=limiter,
                    salt_by_key=settings.prefix_cache_isolation == "key",
                    loras=adapters,
                ),
                supervisor=supervisor,
                cluster=Cluster(pool, registry, shared),
                keys=keys,
                replica_id=replica_id,
                shared=shared,
                turn_tokens=TurnTokens(tokenizer),
                responses=responses,
                mcp=McpHost.from_settings(settings),
                sealer=sealer,
            )
            await _start_shared_state(stack, state)
            if isinstance(supervisor, EngineDiscovery):
                supervisor.on_added = state.cluster.sync_pause  # an engine found while paused is paused
            app.state.gateway = state  # for the server's graceful drain (gateway.http.server)
            log.info(startup_line(settings, state))
            if endpoint is not None:
                log.info("tracing generation requests: OpenTelemetry spans to %s (OTLP/HTTP)", endpoint)
            for warning in exposure_warnings(settings):
                log.warning(warning)
            log.info(state.model.sampling.describe())
            yield {"gateway": state}
            log.info("agentgate shutting down")

    middleware = [
        Middleware(ForwardedMiddleware, trusted=settings.trusted_proxies),
        Middleware(WebSocketOriginMiddleware, allowed=settings.allowed_origins),
        Middleware(RequestIdMiddleware),
        *([Middleware(TracingMiddleware, tracer=tracer)] if tracer is not None else []),
        Middleware(AnthropicErrorMiddleware),
    ]
    if settings.allowed_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(settings.allowed_origins),
                allow_methods=list(settings.allowed_methods),
                allow_headers=list(settings.allowed_headers),
                allow_credentials=settings.allow_credentials,
                expose_headers=["X-Request-Id", "Retry-After", "X-Trace-Id"],
            )
        )
    if keys.for_caller(remote=True).enabled:  # a caller behind a proxy may be guarded on an open server
        middleware.append(Middleware(AuthMiddleware, keys=keys))
    middleware.append(Middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes, timeout=settings.body_timeout))
    middleware.append(Middleware(RequestContextMiddleware, keys=keys))

    return Starlette(
        routes=[
            *openai.routes,
            *responses_routes.routes,
            *anthropic.routes,
            *tokenize.routes,
            *ops.routes,
            *lora.routes,
            *sessions_routes.routes,
            *dashboard.routes,
            *playground.routes,
        ],
        middleware=middleware,
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=lifespan,
    )


async def _start_shared_state(stack: AsyncExitStack, state: GatewayState) -> None:
    """Redis's background tasks and the cluster's control plane (a gateway
    without ``redis_url`` runs alone: no sessions, local operator calls)."""
    shared, settings = state.shared, state.settings
    if shared is not None:
        shared.replica_info = ReplicaInfo(host=settings.host, port=settings.port, engines=state.pool.addresses)
        stack.push_async_callback(shared.close)
        if not await shared.ping():
            log.warning(
                "redis at %s is unreachable: serving stateless requests; sessions and operator routes "
                "answer 503 until it is back",
                shared.display_url,
            )
    tasks = await stack.enter_async_context(anyio.create_task_group())

    async def stop_tasks() -> None:
        if shared is not None:
            await shared.flush()
        tasks.cancel_scope.cancel()

    stack.push_async_callback(stop_tasks)
    await tasks.start(state.cluster.run)
    await state.cluster.sync_pause()  # a gateway started while the cluster is paused starts paused
    if state.responses is not None:  # stored responses left running by replicas that died: failed, at start
        tasks.start_soon(state.responses.sweep_orphans)


def startup_line(settings: Settings, state: GatewayState) -> str:
    info = state.pool.info
    auth = auth_summary(settings)
    cors = ", ".join(settings.allowed_origins) or "off"
    engines = len(state.pool.engines)
    redis = state.shared.display_url if state.shared is not None else "none"
    return (
        f"agentgate ready at http://{settings.host}:{settings.port} serving {state.model.name} "
        f"| runner {info.runner} on {info.device} ({info.dtype}) "
        f"| KV cache {info.kv_capacity_tokens:,} tokens ({info.num_kv_blocks} blocks x {info.block_size}) "
        f"| max_model_len {info.max_model_len:,} | {state.model.budget.describe()} "
        f"| {engines} engine{'s' if engines > 1 else ''} "
        f"| auth: {auth} | CORS: {cors} | redis: {redis} | sealing: {state.sealer.origin} | replica {state.replica_id}"
    )
