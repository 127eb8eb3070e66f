"""The gateway in this process, for tests that need no real streaming.

:class:`InProcessGateway` builds the app with ``create_app`` in front of a
null-runner engine (``EngineServer`` over a real ``EngineCore``, served from a
thread on a private ipc address: the gateway talks to it over the real ZMQ +
msgpack boundary), runs its lifespan on an event loop of its own (an anyio
blocking portal) and answers requests through ``httpx.ASGITransport``: no
uvicorn, no HTTP socket, no subprocess to start. Its ``client`` is a plain
synchronous ``httpx.Client`` (base URL ``http://gateway``).

``httpx.ASGITransport`` hands the app the whole request and collects the
whole response: streams that must be read while they run (disconnects,
pacing, aborts mid-stream) and process lifecycles stay with the live servers
of :mod:`tests.support.servers`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio.from_thread
import httpx
from starlette.types import ASGIApp, Receive, Scope, Send

from agentgate.engine.config import EngineConfig
from agentgate.engine.core import EngineCore
from agentgate.engine.front.addresses import private_address
from agentgate.engine.front.process import EngineServer
from agentgate.engine.model_files.model_path import model_display_name
from agentgate.gateway.app_state import GatewayState
from agentgate.gateway.config.settings import Settings
from agentgate.gateway.http.app import EngineTarget, create_app
from agentgate.gateway.observation.tracing import Tracer
from agentgate.gateway.state.embedded_redis import EmbeddedRedis

# The live null server's engine: a few ms a step, room for many sequences.
NULL_ENGINE = EngineConfig(
    runner="null", null_step_seconds=0.004, max_num_seqs=256, max_model_len=1024, num_kv_blocks=16384
)


class _WithLifespanState:
    """Gives each request the lifespan's state, as uvicorn does (``request.state.gateway``)."""

    def __init__(self, app: ASGIApp, state: dict[str, Any]) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            scope["state"] = dict(self.state)
        await self.app(scope, receive, send)


class _PortalTransport(httpx.BaseTransport):
    """A synchronous transport that runs ``httpx.ASGITransport`` on the portal's event loop."""

    def __init__(self, portal: anyio.from_thread.BlockingPortal, app: ASGIApp) -> None:
        self.portal = portal
        self.asgi = httpx.ASGITransport(app=app)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self.portal.call(self._handle, request)

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        chunks = list(request.stream)  # a streamed body stays streamed (no Content-Length is added)

        async def body() -> AsyncIterator[bytes]:
            for chunk in chunks:
                yield chunk

        forwarded = httpx.Request(request.method, request.url, headers=request.headers, content=body())
        response = await self.asgi.handle_async_request(forwarded)
        content = await response.aread()
        return httpx.Response(response.status_code, headers=response.headers, content=content, request=request)


class InProcessGateway:
    """``with InProcessGateway(settings) as gw: gw.client.get("/health")``; ``gw.state``: its services."""

    def __init__(
        self,
        settings: Settings,
        engine: EngineConfig = NULL_ENGINE,
        *,
        redis: bool = False,
        tracer: Tracer | None = None,
    ) -> None:
        self.settings = settings
        self.tracer = tracer  # the app's tracer (gateway.tracing; None: as the settings say)
        self.engine = engine
        self.redis = redis  # an embedded redis-server (sessions, cross-replica routes)
        self.headers = {"Authorization": f"Bearer {settings.api_keys[0]}"} if settings.api_keys else {}
        self.admin_headers = {"Authorization": f"Bearer {settings.admin_key}"} if settings.admin_key else {}
        self.client: httpx.Client
        self.state: GatewayState
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> InProcessGateway:
        stack = self._stack
        try:
            target = stack.enter_context(_engine_thread(self.engine))
            settings = self.settings
            if self.redis:
                redis = EmbeddedRedis().start()
                stack.callback(redis.stop)
                settings = dataclasses.replace(settings, redis_url=redis.url)
            portal = stack.enter_context(anyio.from_thread.start_blocking_portal())
            app = create_app(settings, engines=[target], tracer=self.tracer)
            state = stack.enter_context(portal.wrap_async_context_manager(app.router.lifespan_context(app)))
            self.state = state["gateway"]
            self.client = stack.enter_context(
                httpx.Client(
                    transport=_PortalTransport(portal, _WithLifespanState(app, state)),
                    base_url="http://gateway",
                    timeout=30,
                )
            )
        except BaseException:
            stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()


class _WatchedThread:
    """The engine's thread, watched as the engine client watches an engine process it started
    (a thread busy importing for a first grammar sends no heartbeat, and is not dead)."""

    exitcode = None

    def __init__(self, thread: threading.Thread) -> None:
        self.thread = thread

    def is_alive(self) -> bool:
        return self.thread.is_alive()


@contextlib.contextmanager
def _engine_thread(config: EngineConfig) -> Iterator[EngineTarget]:
    """An engine served from a thread of this process; yields it as the gateway's target."""
    address = private_address()
    server = EngineServer(EngineCore(config), address, model_display_name(config.model))
    thread = threading.Thread(target=server.serve_forever, name="in-process-engine", daemon=True)
    thread.start()
    try:
        yield EngineTarget(address, _WatchedThread(thread))  # type: ignore[arg-type]
    finally:
        server.stopping = True
        thread.join(10)
