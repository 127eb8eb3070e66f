"""Engine supervision: each engine behind the gateway is kept connected, and
brought back when it dies.

    supervisor = EngineSupervisor(targets, policy=RestartPolicy.from_settings(settings), ...)
    pool = await tasks.start(supervisor.run)   # every engine connected (start-up errors raise)

One task per engine holds its :class:`~engine.front.client.EngineClient`. The
client notices a death at once (the process watch, or five seconds without a
heartbeat) and fails the engine's streams; the task then logs it at ERROR
(exit code and signal), marks the engine down in the pool (routing skips it,
``/health`` names it and says since when) and:

- an engine this gateway spawned (its target has ``start``) is started again
  at the same address after a backoff (``RestartPolicy``); more than
  ``max_restarts`` deaths within ``window_s`` (or ``--on-engine-death exit``)
  make the supervisor give up: ``fatal`` is set and the server exits non-zero,
  so an outer supervisor (systemd, Kubernetes) takes over;
- an engine started apart (``agentgate engine``, or a sibling of
  ``--gateway-workers``) is re-attached: the task reconnects to its address
  until it answers again.

The supervisor process of ``--gateway-workers`` (``gateway.command.workers``)
restarts the engines it spawned with the same policy, from its polling loop
(:class:`EngineRestarts`); its workers re-attach to them.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import signal
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import anyio
import anyio.abc

from agentgate.engine.errors import EngineDeadError
from agentgate.engine.front.addresses import remove_socket_file
from agentgate.engine.front.client import EngineClient
from agentgate.engine.front.socket_keys import GatewayKeys
from agentgate.engine.front.spawn import stop_engine_process
from agentgate.gateway.engines.pool import EnginePool, EngineTarget, WatchedPid

log = logging.getLogger("agentgate.gateway")

DEATH_POLL_S = 0.05
REATTACH_TIMEOUT_S = 5.0  # one reconnection attempt to an engine started apart


def exit_description(exitcode: int | None) -> str:
    """``exit code 3``, ``killed by SIGKILL`` or ``exit status unknown`` (a process we did not start)."""
    if exitcode is None:
        return "exit status unknown"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


@dataclass(frozen=True)
class RestartPolicy:
    """When a spawned engine is started again: after ``backoff(k)`` seconds for its k-th death
    within ``window_s``; never when ``restart`` is False or more than ``max_restarts`` died there."""

    restart: bool = True
    max_restarts: int = 5
    window_s: float = 300.0
    first_delay_s: float = 0.5
    max_delay_s: float = 30.0

    @classmethod
    def from_settings(cls, settings) -> RestartPolicy:
        return cls(settings.on_engine_death == "restart", settings.engine_max_restarts, settings.engine_restart_window)

    def backoff(self, deaths_in_window: int) -> float:
        return min(self.first_delay_s * 2 ** max(deaths_in_window - 1, 0), self.max_delay_s)


class RestartBudget:
    """The deaths of one engine within the policy's window."""

    def __init__(self, policy: RestartPolicy) -> None:
        self.policy = policy
        self._deaths: deque[float] = deque()

    def died(self, now: float) -> float | None:
        """Record a death; the delay before the restart, or None to give up."""
        self._deaths.append(now)
        while self._deaths and now - self._deaths[0] > self.policy.window_s:
            self._deaths.popleft()
        if not self.policy.restart or len(self._deaths) > self.policy.max_restarts:
            return None
        return self.policy.backoff(len(self._deaths))


class EngineSupervisor:
    def __init__(
        self,
        targets: Sequence[EngineTarget],
        *,
        policy: RestartPolicy,
        startup_timeout: float,
        curve: GatewayKeys | None = None,
    ) -> None:
        """``curve``: this gateway's keys for engines whose peers authenticate (``engine.front.socket_keys``)."""
        self.targets = list(targets)
        self.policy = policy
        self.startup_timeout = startup_timeout
        self.curve = curve
        self.processes = [t.process for t in self.targets]  # the current process of each engine
        self.pool: EnginePool | None = None
        self.fatal: str | None = None  # set when the supervisor gave up: the server exits non-zero

    async def run(self, task_status: anyio.abc.TaskStatus[EnginePool] = anyio.TASK_STATUS_IGNORED) -> None:
        """Connect every engine, report the pool, then keep each one up until cancelled."""
        async with anyio.create_task_group() as tasks:
            clients = [await tasks.start(self._keep, i) for i in range(len(self.targets))]
            self.pool = EnginePool(clients)
            task_status.started(self.pool)

    async def _keep(self, i: int, task_status: anyio.abc.TaskStatus[EngineClient]) -> None:
        target, budget = self.targets[i], RestartBudget(self.policy)
        try:
            async with contextlib.AsyncExitStack() as stack:  # a start-up failure raises
                client = await self._attach_at_start(i, stack)
                task_status.started(client)
                reason = await self._until_dead(client)
            while True:
                await self._after_death(i, reason, budget)
                reason = await self._serve_again(i, target)
        finally:
            if target.owned and self.processes[i] is not None:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(stop_engine_process, self.processes[i])

    async def _attach_at_start(self, i: int, stack: contextlib.AsyncExitStack) -> EngineClient:
        """The first client of engine ``i``. A sibling engine (a watched pid, under
        ``--gateway-workers``) that dies while this worker starts is restarted by the supervisor
        at its address: the worker waits for the new one, within the start-up timeout, as it
        re-attaches later; any other start-up failure raises."""
        try:
            return await stack.enter_async_context(self._connect(i, self.startup_timeout))
        except EngineDeadError as exc:
            if not isinstance(self.processes[i], WatchedPid):
                raise
            log.warning(
                "engine %d at %s died while this gateway worker started (%s); waiting for its restart",
                i,
                self.targets[i].address,
                exc,
            )
        self.processes[i] = None  # the restarted engine is another process: heartbeats from now on
        deadline = time.monotonic() + self.startup_timeout
        while True:
            try:
                return await stack.enter_async_context(self._connect(i, REATTACH_TIMEOUT_S))
            except EngineDeadError:
                if time.monotonic() >= deadline:
                    raise
                await anyio.sleep(0.5)

    def _connect(self, i: int, timeout: float):
        return EngineClient.connect(
            self.targets[i].address, process=self.processes[i], startup_timeout=timeout, curve=self.curve
        )

    async def _until_dead(self, client: EngineClient) -> str:
        while not client.is_dead:
            await anyio.sleep(DEATH_POLL_S)
        return client.dead_reason or "died"

    async def _after_death(self, i: int, reason: str, budget: RestartBudget) -> None:
        """Log the death, mark the engine down; give up (``fatal``) or wait the backoff."""
        target, process = self.targets[i], self.processes[i]
        how = exit_description(getattr(process, "exitcode", None) if process is not None else None)
        assert self.pool is not None
        self.pool.mark_down(i)
        delay = budget.died(time.monotonic()) if target.start is not None or not self.policy.restart else 0.0
        if delay is None:
            why = (
                "--on-engine-death exit"
                if not self.policy.restart
                else (f"more than {self.policy.max_restarts} deaths within {self.policy.window_s:.0f} s")
            )
            self.fatal = f"engine {i} at {target.address} died ({how}): {reason}; giving up ({why})"
            log.error("%s; the gateway exits", self.fatal)
            await anyio.sleep_forever()  # the server sees ``fatal`` and shuts down
        if target.start is None:
            log.error(
                "engine %d at %s is down (%s): %s; re-attaching when it answers again", i, target.address, how, reason
            )
            return
        log.error("engine %d at %s died (%s): %s; restarting it in %.1f s", i, target.address, how, reason, delay)
        await anyio.sleep(delay)

    async def _serve_again(self, i: int, target: EngineTarget) -> str:
        """Start the engine again (spawned) or wait until it answers (started apart), serve it
        until it dies; the reason it died (or did not come back)."""
        while True:
            if target.start is not None:
                old = self.processes[i]
                if old is not None:
                    await anyio.to_thread.run_sync(stop_engine_process, old)  # reaped: no zombie
                remove_socket_file(target.address)
                # Started on this (the loop's) thread: the engine dies with its parent thread (PDEATHSIG).
                self.processes[i] = target.start()
                timeout = self.startup_timeout
            else:
                self.processes[i] = None  # a watched pid is gone for good: heartbeats from now on
                timeout = REATTACH_TIMEOUT_S
            try:
                async with self._connect(i, timeout) as client:
                    assert self.pool is not None
                    down = self.pool.mark_up(i, client)
                    log.warning("engine %d at %s is serving again after %.1f s down", i, target.address, down)
                    return await self._until_dead(client)
            except EngineDeadError as exc:
                if target.start is not None:
                    return f"it did not come back: {exc}"
                await anyio.sleep(0.5)


class EngineRestarts:
    """The engines of the ``--gateway-workers`` supervisor (``gateway.command.workers``), restarted
    at their address when they die (the workers re-attach to them), with the same restart policy as
    :class:`EngineSupervisor`; polled from the supervisor's loop, no event loop needed."""

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


def spawner(config, address: str) -> Callable[[], multiprocessing.process.BaseProcess]:
    """What starts the engine of ``config`` at ``address`` again (``EngineTarget.start``)."""
    from agentgate.engine.front.spawn import start_engine_process

    return lambda: start_engine_process(config, address)
