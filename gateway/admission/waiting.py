"""Backpressure: a bound on engine requests waiting for their first token.

An HTTP request is ``n x prompts`` engine requests (its choices); each waits
from the moment the request is admitted until its first token comes back (or
the request ends): queued in the engine, held by a pause, or prefilling. When
a request's choices would take the count past ``max_waiting``, it gets 429
with Retry-After before anything reaches the engine, instead of joining an
ever longer queue. Everything runs on the event loop, so plain counters suffice.
"""

from __future__ import annotations

from agentgate.gateway.errors import QueueFullError

RETRY_AFTER_S = 1


class Ticket:
    """One admitted request's places in the waiting count: one per engine request."""

    __slots__ = ("_admission", "_waiting")

    def __init__(self, admission: Admission, count: int) -> None:
        self._admission = admission
        self._waiting = count

    def started(self) -> None:
        """A choice's first token arrived: that engine request no longer waits."""
        if self._waiting:
            self._waiting -= 1
            self._admission.waiting -= 1

    def close(self) -> None:
        """The request ended: whatever still waited stops waiting."""
        self._admission.waiting -= self._waiting
        self._waiting = 0


class Admission:
    def __init__(self, max_waiting: int) -> None:
        self.max_waiting = max_waiting  # 0: unbounded
        self.waiting = 0

    def enter(self, count: int = 1) -> Ticket:
        """Admit a request of ``count`` engine requests (one always fits an idle queue)."""
        if self.max_waiting and self.waiting and self.waiting + count > self.max_waiting:
            raise QueueFullError(
                f"the server has {self.waiting} generations waiting and this request adds {count} (its bound is "
                f"{self.max_waiting}); retry later",
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        self.waiting += count
        return Ticket(self, count)
