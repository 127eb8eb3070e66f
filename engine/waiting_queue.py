"""The scheduler's waiting queue, in the order of ``--scheduling-policy``, and the wait bound
every policy keeps.

fcfs: first come, first served by request; a preempted request goes back first.

program: by the rank of the request's program (``engine.programs.table``: the level of the service it
has had, least first, as Autellix's PLAS orders programs, then who entered that level first), so
a program's turn goes ahead of every program served a level more, and of those of its level that
came after it; nothing a client chooses (an early start, a constant ``user``) buys more than its
first level. Within a program, a preempted request first, then by arrival. A preempted request
does not go ahead of programs ranked before it: under this policy it was preempted because they
outrank it (engine.scheduler), and at the head it would hold their turns back while it waits for
memory they hold.

The bound, under both: a request is *overdue* once ``max_wait`` seconds (``--max-wait``) have
passed since a request that arrived after it was first admitted ahead of it (the scheduler marks
``Request.passed_since``). Overdue requests go ahead of every other request (among them, by
arrival), program admission does not hold them back, nothing after them is admitted while the
first of them waits (engine.scheduler), and they may release the pins of programs ranked after
their own, any pin once nothing runs. So no request waits more than ``max_wait`` behind
requests that came after it; then it waits only for the memory and the sequence slots that
requests admitted before that moment hold. A request that waits for memory while nothing passes
it is not overdue: in a slow queue, order is kept, not turned into arrival order.
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

    def overdue(self, request: Request, now: float | None = None) -> bool:
        """Whether ``request`` has waited ``max_wait`` seconds since it was first passed (see the
        module docstring)."""
        passed = request.passed_since
        return passed is not None and (self.clock() if now is None else now) - passed >= self.max_wait

    def mark_passed(self, latest_arrival: float) -> None:
        """Requests admitted now arrived as late as ``latest_arrival``: the waiting requests that
        arrived before it have been passed (their wait bound starts, if it had not)."""
        now = self.clock()
        for request in self._queue:
            if request.passed_since is None and request.arrival_time < latest_arrival:
                request.passed_since = now

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
    """Ordered by program rank (see the module docstring); the head is found on each peek
    (waiting queues are short beside a step's work)."""

    def order_key(self, request: Request, now: float) -> tuple[int, tuple[int, float], bool, float]:
        if self.overdue(request, now):
            return (0, (0, request.arrival_time), False, 0.0)
        return (1, request.served.rank, not request.ever_scheduled, request.arrival_time)

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
