"""Several gateway processes on one port (``--gateway-workers M``): a supervisor
starts M workers, each binding the port with ``SO_REUSEPORT`` (the kernel
spreads connections over them), each connected to every engine and to the
one Redis, so they act as one (sessions, pause, aborts, rate limits). The
supervisor stops them (SIGTERM: they drain), then the caller stops the
engines and Redis; a worker whose supervisor dies stops itself. An engine
that dies is restarted here at its address (``EngineRestarts``, with the
restart policy, in ``gateway.engines.supervisor``); the workers re-attach to it.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading

from agentgate.gateway.config.flags import configure_logging
from agentgate.gateway.config.settings import Settings
from agentgate.gateway.engines.pool import EngineTarget, WatchedPid
from agentgate.gateway.engines.supervisor import EngineRestarts, RestartPolicy
from agentgate.gateway.state.redis_state import redact_url

log = logging.getLogger("agentgate.gateway")


def reuseport_socket(host: str, port: int, listen: bool = True) -> socket.socket:
    """A TCP socket bound with SO_REUSEPORT: every gateway worker binds its own
    on the same port and the kernel spreads new connections over them."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    if listen:
        sock.listen(2048)
    return sock


def gateway_worker(
    settings: Settings,
    engines: list[tuple[str, int | None]],
    parent_pid: int,
    index: int,
) -> None:
    """One gateway process of ``--gateway-workers`` (spawned by the supervisor)."""
    from agentgate.gateway.http.server import run_gateway

    configure_logging(settings.log_level)

    def watch_parent() -> None:
        while True:
            if os.getppid() != parent_pid:
                log.warning("gateway worker %d: the supervisor is gone; stopping", index)
                os.kill(os.getpid(), signal.SIGTERM)
                return
            threading.Event().wait(0.5)

    threading.Thread(target=watch_parent, name="watch-supervisor", daemon=True).start()
    sock = reuseport_socket(settings.host, settings.port)
    targets = [EngineTarget(address, WatchedPid(pid) if pid else None) for address, pid in engines]
    try:
        code = run_gateway(settings, targets, sockets=[sock])
    except KeyboardInterrupt:  # Ctrl-C reaches every process of the terminal's group; it has drained already
        code = 0
    sys.exit(code)


def supervise(settings: Settings, targets: list[EngineTarget]) -> int:
    """Start ``gateway_workers`` gateway processes sharing the port; wait for a signal or a worker's death."""
    probe = reuseport_socket(settings.host, settings.port, listen=False)  # fails now if the port is taken
    port = probe.getsockname()[1]
    settings = dataclasses.replace(settings, port=port)
    engines = [(t.address, getattr(t.process, "pid", None)) for t in targets]
    context = multiprocessing.get_context("spawn")
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    workers = []
    restarts = EngineRestarts(targets, RestartPolicy.from_settings(settings))
    code = 0
    try:
        for i in range(settings.gateway_workers):
            worker = context.Process(
                target=gateway_worker, args=(settings, engines, os.getpid(), i), name=f"agentgate-gateway-{i}"
            )
            worker.start()
            workers.append(worker)
        log.info(
            "agentgate serving on http://%s:%d with %d gateway workers (SO_REUSEPORT), %d engine(s), redis %s",
            settings.host,
            port,
            len(workers),
            len(targets),
            redact_url(settings.redis_url) if settings.redis_url else "none",
        )
        while not stop.wait(0.2):
            if not restarts.check():  # reaps (and restarts) a dead engine, so workers see it gone
                code = 1
                break
            dead = [w for w in workers if not w.is_alive()]
            if dead:
                log.error(
                    "gateway worker %s exited (code %s); stopping",
                    dead[0].name,
                    dead[0].exitcode,
                )
                code = 1
                break
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for worker in workers:
            if worker.is_alive():
                worker.terminate()  # SIGTERM: the worker drains its requests, then exits
        for worker in workers:
            worker.join(settings.drain_seconds + 15)
            if worker.is_alive():
                worker.kill()
                worker.join(5)
        probe.close()
        restarts.stop_restarted()
    return code
