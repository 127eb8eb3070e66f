"""Several gateway processes on one port (``--gateway-workers M``): a supervisor
starts M workers, each binding the port with ``SO_REUSEPORT`` (the kernel
spreads connections over them), each connected to every engine and to the
one Redis, so they act as one (sessions, pause, aborts, rate limits). The
supervisor stops them (SIGTERM: they drain), then the caller stops the
engines and Redis; a worker whose supervisor dies stops itself. An engine
that dies is restarted here at its address (the restart policy of
``gateway.supervision``); the workers re-attach to it.
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
import time

from agentgate.engine.client import stop_engine_process
from agentgate.engine.ipc import remove_socket_file
from agentgate.gateway.engines import EngineTarget, WatchedPid
from agentgate.gateway.flags import configure_logging
from agentgate.gateway.redis_state import redact_url
from agentgate.gateway.settings import Settings
from agentgate.gateway.supervision import RestartBudget, RestartPolicy, exit_description

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
    from agentgate.gateway.server import run_gateway

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
            worker = context.Process(target=gateway_worker, args=(settings, engines, os.getpid(), i),
                                     name=f"agentgate-gateway-{i}")  # fmt: skip
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


class EngineRestarts:
    """The supervisor's engines, restarted at their address when they die (the workers re-attach
    to them), with the gateway's restart policy (``gateway.supervision``)."""

    def __init__(self, targets: list[EngineTarget], policy: RestartPolicy) -> None:
        self.targets = targets
        self.processes = [t.process for t in targets]
        self.budgets = [RestartBudget(policy) for _ in targets]
        self.due: list[float | None] = [None] * len(targets)  # when a dead engine is started again

    def check(self) -> bool:
        """Reap and restart dead engines; False once one died past its budget (the command exits 1)."""
        now = time.monotonic()
        for i, target in enumerate(self.targets):
            process = self.processes[i]
            if target.start is None or process is None:
                continue
            if self.due[i] is None and not process.is_alive():  # is_alive() reaps it
                delay = self.budgets[i].died(now)
                how = exit_description(process.exitcode)
                if delay is None:
                    log.error("engine %d at %s died (%s); giving up: past its restart budget", i, target.address, how)
                    return False
                log.error("engine %d at %s died (%s); restarting it in %.1f s", i, target.address, how, delay)
                self.due[i] = now + delay
            elif self.due[i] is not None and now >= self.due[i]:
                self.due[i] = None
                remove_socket_file(target.address)
                self.processes[i] = target.start()
        return True

    def stop_restarted(self) -> None:
        """Stop the engines started here (the first ones are the caller's to stop)."""
        for target, process in zip(self.targets, self.processes, strict=True):
            if process is not target.process and process is not None:
                stop_engine_process(process)
