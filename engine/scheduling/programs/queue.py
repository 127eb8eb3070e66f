"""The waiting queue under ``--scheduling-policy program``: first by the rank of the request's API key
(the same levels, of the service all its programs and its requests of no program have had: keys
share the engine least served first, and a client that rotates its session, ``user`` or
``prompt_cache_key`` starts no key afresh), then by the rank of the request's program
(``engine.scheduling.programs.table``: the level of the service it has had, least first, as Autellix's PLAS
orders programs, then who entered that level first), so a program's turn goes ahead of every
program served a level more, and of those of its level that came after it; nothing a client
chooses (an early start, a constant ``user``) buys more than its first level. Within a program, a
preempted request first, then by arrival. A preempted request does not go ahead of programs ranked
before it: under this policy it was preempted because they outrank it (engine.scheduler), and at
the head it would hold their turns back while it waits for memory they hold.

Overdue requests (the wait bound every policy keeps, ``engine.scheduling.waiting_queue``) go ahead of all
of these, by arrival; then the rounds that return from tools the server ran (the hosted MCP loop:
its KV is pinned through the call, ``engine.scheduling.retention``), by arrival.
"""

from __future__ import annotations

from agentgate.engine.request import Request
from agentgate.engine.scheduling.waiting_queue import FcfsQueue


class ProgramQueue(FcfsQueue):
    """Ordered by program rank (see the module docstring); the head is found on each peek
    (waiting queues are short beside a step's work)."""

    def order_key(self, request: Request, now: float) -> tuple[int, tuple[int, float], tuple[int, float], bool, float]:
        if self.overdue(request, now):
            return (0, (0, 0.0), (0, request.arrival_time), False, 0.0)
        if request.server_tool_return and not request.ever_scheduled:
            return (1, (0, 0.0), (0, request.arrival_time), False, 0.0)
        return (2, request.key_served.rank, request.served.rank, not request.ever_scheduled, request.arrival_time)

    def peek(self) -> Request:
        now = self.clock()
        return min(self._queue, key=lambda r: self.order_key(r, now))

    def ordered(self) -> list[Request]:
        """The waiting requests in the order they are served."""
        now = self.clock()
        return sorted(self._queue, key=lambda r: self.order_key(r, now))

    def push_preempted(self, request: Request) -> None:
        self._queue.append(request)
