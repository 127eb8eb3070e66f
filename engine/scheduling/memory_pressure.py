"""Who gives way when blocks run out: the pins of programs waiting on tools
(`engine.scheduling.retention`), or a running request, preempted.

A waiting head may release pins for its memory when it is a returning turn, resumes, or is
overdue (it has waited ``--max-wait``), and any pin when nothing runs; a new program's turn
waits for memory instead. By fcfs, any pin, and a pin is released before any running request
is preempted. By program, memory goes by rank, pinned or running, as the waiting queue orders
(the API key's attained service first, then the program's: ``Request.rank``): a request may
release only the pins ranked after its own while anything runs, then preempts the running
request ranked last (itself, if it is that one). Among the pins a request may release, those of
the programs served a level more first, and within a level the least expected loss
(``engine.scheduling.pin_cost``).
"""

from __future__ import annotations

from agentgate.engine.kv.kv_cache_manager import KVCacheManager
from agentgate.engine.request import Request
from agentgate.engine.scheduling.programs.table import Rank
from agentgate.engine.scheduling.retention import KVRetention
from agentgate.engine.scheduling.waiting_queue import FcfsQueue


class MemoryPressure:
    """The rules above, over the scheduler's ``kv``, ``retention`` and ``waiting`` queue;
    ``by_program``: the program policy's ranks, else fcfs."""

    def __init__(self, kv: KVCacheManager, retention: KVRetention, waiting: FcfsQueue, by_program: bool) -> None:
        self.kv = kv
        self.retention = retention
        self.waiting = waiting
        self.by_program = by_program
        retention.by_service = by_program

    def ranked_after(self, request: Request) -> Rank | None:
        """Whose pins ``request`` may release for memory: by program, only those ranked after its
        own, its key's rank first, then its program's (the pins of those ranked before outrank its
        needs: the running request ranked last is preempted instead, itself included); by fcfs,
        any (None)."""
        return request.rank if self.by_program else None

    def lost_conversation(self, request: Request) -> bool:
        """Whether pressure released the pin of ``request``'s program and the prefix cache no longer
        holds all the blocks the pin held (released, they stay cached until a block is needed)."""
        held = self.retention.evicted.get(request.program.program_id) if request.program is not None else None
        return held is not None and len(self.kv.find_cached_prefix(request)) * self.kv.block_size < held

    def victim(self, running: list[Request]) -> Request:
        """The running request to preempt: the last admitted (fcfs), or the last admitted of
        the programs ranked last (program policy)."""
        if not self.by_program:
            return running[-1]
        return max(reversed(running), key=lambda r: r.rank)

    def allocate_waiting(self, request: Request, budget: int, anything_runs: bool) -> tuple[int, int | None]:
        """Allocate the waiting ``request``'s blocks (prefix hits, then up to ``budget`` tokens):
        its cached token count and tokens to compute, None when memory is short. Pins are
        released for it (never its own program's): any when nothing runs; else when it returns
        after tool calls, resumes after a preemption or is overdue: by fcfs any, by program those
        of programs ranked after its own. (An overdue request holds the queue until it fits, so
        what runs drains, and then any pin is its to release.)"""
        program = request.program
        ranked_after = self.ranked_after(request) if anything_runs else None
        may_release = (
            not anything_runs or request.ever_scheduled or request.returns_after_tools or self.waiting.overdue(request)
        )
        while True:
            hits = self.kv.find_cached_prefix(request)
            num_cached = len(hits) * self.kv.block_size
            num_tokens = min(request.num_tokens - num_cached, budget)
            if self.kv.allocate(request, num_tokens, hits) is not None:
                return num_cached, num_tokens
            exclude = program.program_id if program is not None else None
            if not (may_release and self.retention.release_one(exclude, ranked_after=ranked_after)):
                return num_cached, None
