"""Backpressure: a bound on requests waiting for their first token.

A request waits from the moment it is admitted until its first token comes
back (or it ends): queued in the engine, held by a pause, or prefilling. When
``max_waiting`` requests already wait, a new one gets 429 with Retry-After
instead of joining an ever longer queue. Everything runs on the event loop,
so plain counters suffice.
"""

from __future__ import annotations

from agentgate.gateway.errors import QueueFullError

RETRY_AFTER_S = 1


class Ticket:
    """One admitted request's place in the waiting count."""

    __slots__ = ("_admission", "_waiting")

    def __init__(self, admission: Admission) -> None:
        self._admission = admission
        self._waiting = True

    def started(self) -> None:
        """The first token arrived: the request no longer waits."""
        if self._waiting:
            self._waiting = False
            self._admission.waiting -= 1

    close = started  # a request that ends without a token stops waiting too


class Admission:
    def __init__(self, max_waiting: int) -> None:
        self.max_waiting = max_waiting  # 0: unbounded
        self.waiting = 0

    def enter(self) -> Ticket:
        if self.max_waiting and self.waiting >= self.max_waiting:
            raise QueueFullError(
                f"the server has {self.waiting} requests waiting (its bound is {self.max_waiting}); retry later",
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        self.waiting += 1
        return Ticket(self)
