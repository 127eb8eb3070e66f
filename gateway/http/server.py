"""One gateway process under uvicorn, with a graceful drain.

On SIGINT/SIGTERM the server stops accepting, gives requests in flight
``--drain-seconds`` to finish, aborts the rest (their streams end with
finish reason "abort" and ``[DONE]``), then runs uvicorn's own shutdown and
the lifespan (which stops the engines it owns).
"""

from __future__ import annotations

import copy
import gc
import signal
import socket

import uvicorn
from sse_starlette.sse import AppStatus

from agentgate.gateway.config.settings import Settings
from agentgate.gateway.engines.pool import EngineTarget
from agentgate.gateway.http.app import create_app
from agentgate.gateway.http.slow_clients import guarded_protocol
from agentgate.gateway.http.tracing import AccessLogFilter


def run_gateway(settings: Settings, targets: list[EngineTarget], sockets: list[socket.socket] | None = None) -> int:
    """The gateway in this process, under uvicorn, until a signal."""
    app = create_app(settings, engines=targets)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        lifespan="on",
        access_log=settings.access_log,
        log_config=_log_config(),
        timeout_graceful_shutdown=5,
        http=guarded_protocol(settings.header_timeout, settings.max_connections),
        proxy_headers=False,  # forwarded headers are read by gateway.http.forwarded, from --trusted-proxies only
    )
    server = GatewayServer(config, app, settings.drain_seconds)
    # uvicorn re-raises the signal that stopped it once it is done; with the default SIGTERM action that
    # would end this process before the caller stops what it started (engines, Redis): make it a no-op.
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        server.run(sockets=sockets)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0 if server.started and server.fatal is None else 1


def _log_config() -> dict:
    """uvicorn's logging, but for its access line, which ends with the request's trace id when it
    is traced and its LoRA adapter when it names one (``gateway.http.tracing``)."""
    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config["formatters"]["access"]["fmt"] += "%(trace_id)s%(lora)s"
    config["filters"] = {"access": {"()": AccessLogFilter}}
    config["handlers"]["access"]["filters"] = ["access"]
    return config


# sse-starlette would cancel every stream mid-flight at the first signal; the drain ends them instead.
AppStatus.disable_automatic_graceful_drain()


class GatewayServer(uvicorn.Server):
    """uvicorn.Server that drains the gateway before it shuts down (see the module docstring)."""

    def __init__(self, config, app, drain_seconds: float) -> None:
        super().__init__(config)
        self._app = app
        self._drain_seconds = drain_seconds

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        # Start-up objects (modules, tokenizer tables) never die: keep the collector off them, and
        # collect young objects less often, so no full collection stalls the loop mid-stream.
        gc.collect()
        gc.freeze()
        gc.set_threshold(20_000, 20, 20)

    @property
    def fatal(self) -> str | None:
        """Why the gateway gave up (an engine that keeps dying), else None."""
        state = getattr(self._app.state, "gateway", None)
        return state.supervisor.fatal if state is not None and state.supervisor is not None else None

    async def on_tick(self, counter: int) -> bool:
        return self.fatal is not None or await super().on_tick(counter)

    async def shutdown(self, sockets=None) -> None:
        for listener in self.servers:
            listener.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()  # no new requests on kept-alive connections
        state = getattr(self._app.state, "gateway", None)
        if state is not None:
            await state.registry.drain(self._drain_seconds, give_up=lambda: self.force_exit)
        AppStatus.should_exit = True
        await super().shutdown(sockets)
