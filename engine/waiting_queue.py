"""The scheduler's waiting queue, in the order of ``--scheduling-policy``, and the wait bound
every policy keeps.

fcfs: first come, first served by request; a preempted request goes back first.

program: by the service the request's program has had (tokens served to it, least first, as
Autellix's PLAS orders programs: ``engine.programs``), so a program's turn goes ahead of every
program served more, and nothing a client chooses (an early start, a constant ``user``) buys a
place; within a program, a preempted request first, then by arrival. A preempted request does
not go ahead of programs served less: under this policy it was preempted because they outrank
it (engine.scheduler), and at the head it would hold their turns back while it waits for memory
they hold.

The bound, under both: a request that has waited ``max_wait`` seconds (``--max-wait``) is
*overdue*. Overdue requests go ahead of every other request (among them, by arrival), program
admission does not hold them back, nothing after them is admitted while the first of them waits
(engine.scheduler), and they may release any program's pinned KV for their memory. So no request
waits more than ``max_wait`` behind requests that came after it; then it waits only for the
memory and the sequence slot that requests admitted before that moment hold.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator

from agentgate.engine.config import SCHEDULING_POLICIES
from agentgate.engine.request import Request

# Seconds after which a waiting request is served by arrival, whatever the policy.
DEFAULT_MAX_WAIT_S = 10.0


class FcfsQueue:
    def __init__(self, max_wait: float = DEFAULT_MAX_WAIT_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._queue: deque[Request] = deque()
        self.max_wait = max_wait
        self.clock = clock

    def overdue(self, request: Request) -> bool:
        """Whether ``request`` has waited ``max_wait`` seconds (see the module docstring)."""
        return self.clock() - request.arrival_time >= self.max_wait

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
    """Ordered by program service (see the module docstring); the head is found on each peek
    (waiting queues are short beside a step's work)."""

    def order_key(self, request: Request, now: float) -> tuple[int, float, bool, float]:
        if now - request.arrival_time >= self.max_wait:
            return (0, request.arrival_time, False, 0.0)
        return (1, request.served.service, not request.ever_scheduled, request.arrival_time)

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
        return FcfsQueue(max_wait)
    if policy == "program":
        return ProgramQueue(max_wait)
    raise ValueError(f"scheduling policy must be one of {SCHEDULING_POLICIES}, got {policy!r}")
