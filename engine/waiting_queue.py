"""The scheduler's waiting queue, in the order of ``--scheduling-policy``.

fcfs: first come, first served by request; a preempted request goes back first.

program: by the start time of the request's program (its first turn's arrival), so a
program's returning turn goes ahead of every program that started after it; within a
program, a preempted request first, then by arrival. A preempted request does not go
ahead of older programs: under this policy it was preempted because they outrank it
(engine.scheduler), and at the head it would hold their returning turns back while it
waits for memory they hold. Anti-starvation: a request that has waited ``max_wait``
seconds goes ahead of every request that has waited less (among those, by arrival), so
no request waits more than ``max_wait`` behind requests that came after it (plus the
time requests ahead of it take to be admitted).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator

from agentgate.engine.config import SCHEDULING_POLICIES
from agentgate.engine.request import Request

# Seconds after which a waiting request is served by arrival, whatever its program.
DEFAULT_MAX_WAIT_S = 10.0


class FcfsQueue:
    def __init__(self) -> None:
        self._queue: deque[Request] = deque()

    def peek(self) -> Request:
        return self._queue[0]

    def push(self, request: Request) -> None:
        self._queue.append(request)

    def push_preempted(self, request: Request) -> None:
        self._queue.appendleft(request)

    def remove(self, request: Request) -> None:
        self._queue.remove(request)

    def __len__(self) -> int:
        return len(self._queue)

    def __bool__(self) -> bool:
        return bool(self._queue)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._queue)


class ProgramQueue(FcfsQueue):
    """Ordered by program start (see the module docstring); the head is found on each peek
    (waiting queues are short beside a step's work)."""

    def __init__(self, max_wait: float = DEFAULT_MAX_WAIT_S, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.max_wait = max_wait
        self.clock = clock

    def order_key(self, request: Request, now: float) -> tuple[int, float, bool, float]:
        if now - request.arrival_time >= self.max_wait:
            return (0, request.arrival_time, False, 0.0)
        return (1, request.program_start, not request.ever_scheduled, request.arrival_time)

    def peek(self) -> Request:
        now = self.clock()
        return min(self._queue, key=lambda r: self.order_key(r, now))

    def ordered(self) -> list[Request]:
        """The waiting requests in the order they are served."""
        now = self.clock()
        return sorted(self._queue, key=lambda r: self.order_key(r, now))

    def push_preempted(self, request: Request) -> None:
        self._queue.append(request)


def make_queue(policy: str, max_wait: float = DEFAULT_MAX_WAIT_S) -> FcfsQueue:
    if policy == "fcfs":
        return FcfsQueue()
    if policy == "program":
        return ProgramQueue(max_wait)
    raise ValueError(f"scheduling policy must be one of {SCHEDULING_POLICIES}, got {policy!r}")
