"""The scheduler's waiting queue in first-come-first-served order (``--scheduling-policy
fcfs``: by request; a preempted request goes back first), and the wait bound every policy
keeps. The program policy's order is ``engine.scheduling.programs.queue.ProgramQueue``, built on this one;
``engine.core_parts.make_queue`` picks the queue for the policy.

The bound, under both: a request is *overdue* once ``max_wait`` seconds (``--max-wait``: the bound
in force, ``engine.scheduling.wait_bound``; ``auto`` follows the engine's turn service time) have
passed since a request that arrived after it was first admitted ahead of it (the scheduler marks
``Request.passed_since``). Overdue requests go ahead of every other request (among them, by
arrival), program admission does not hold them back, nothing after them is admitted while the
first of them waits (engine.scheduler), and they may release the pins of programs ranked after
their own, any pin once nothing runs. So no request waits more than ``max_wait`` behind
requests that came after it; then it waits only for the memory and the sequence slots that
requests admitted before that moment hold. A request that waits for memory while nothing passes
it is not overdue: in a slow queue, order is kept, not turned into arrival order.

What each request waited from its first pass to its admission is measured (``take``): the longest
such wait since the engine started, and how many were longer than the bound in force when they
ended (``/metrics``: the bound covers the passing, not the memory an overdue request then waits
for, so those are the waits to read beside it). A request's wait ends at each admission: one
preempted and queued again waits afresh.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator

from agentgate.engine.request import Request
from agentgate.engine.scheduling.wait_bound import MIN_WAIT_S, WaitBound

# Seconds after which a waiting request is served by arrival, whatever the policy, while no turn's
# service time has been measured (``auto``; the floor of the bound it keeps).
DEFAULT_MAX_WAIT_S = MIN_WAIT_S


class FcfsQueue:
    def __init__(self, max_wait: str | float = "auto", clock: Callable[[], float] = time.monotonic) -> None:
        self._queue: deque[Request] = deque()
        self.bound = WaitBound(max_wait)
        self.clock = clock
        self.longest_wait_passed = 0.0  # seconds: the longest wait from a first pass to admission
        self.num_waits_past_bound = 0  # admissions after a wait from the first pass longer than the bound

    @property
    def max_wait(self) -> float:
        """Seconds: the bound in force now."""
        return self.bound.seconds

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

    def ordered(self) -> list[Request]:
        """The waiting requests in the order they are served."""
        return list(self._queue)

    def push(self, request: Request) -> None:
        """Queue ``request``: last, but a round returning from tools the server ran goes first
        (after the requests it finds there that did too)."""
        if not request.server_tool_return:
            self._queue.append(request)
            return
        ahead = next((i for i, r in enumerate(self._queue) if not r.server_tool_return), len(self._queue))
        self._queue.insert(ahead, request)

    def push_preempted(self, request: Request) -> None:
        self._queue.appendleft(request)

    def remove(self, request: Request) -> None:
        self._queue.remove(request)

    def take(self, request: Request) -> None:
        """``request`` leaves the queue, admitted: its wait since it was first passed is counted."""
        self._queue.remove(request)
        if request.passed_since is None:
            return
        waited = self.clock() - request.passed_since
        self.longest_wait_passed = max(self.longest_wait_passed, waited)
        self.num_waits_past_bound += waited > self.max_wait
        request.passed_since = None

    def __len__(self) -> int:
        return len(self._queue)

    def __bool__(self) -> bool:
        return bool(self._queue)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._queue)
