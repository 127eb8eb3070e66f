"""KV retention for agent programs waiting on their tools.

When a turn that was offered tools finishes, the registered blocks of its conversation
are *pinned*: the pin holds a reference on each, so the prefix cache's LRU cannot evict
them. The pin is provisional (``GRACE_S``) until the gateway, having read the reply,
says whether it called tools (``TurnEnded``): no call releases it, calls give it the
TTL of the gap law of (program, tools) (``engine.scheduling.tool_gaps``; ``--kv-retention
SECONDS``: that fixed TTL). It is released when the program's next turn is admitted
(its blocks then held by that turn), at its TTL, or under pressure.

Tools the server runs (the hosted MCP loop) are not guessed at: the gateway's ``TurnEnded``
says it runs them (``server_hold``: at most that many seconds), and the pin is held for exactly
as long as they run: the next round, sent as they return, claims it, or ``ToolsReturned`` ends
it when the loop stops there. That round is admitted first (``Request.server_tool_return``; the
queues put it ahead of all but overdue requests) and its gap teaches no law: the learned gap
laws are for client-run tools only.

Bounds and order. Blocks held by pins never exceed ``max_fraction`` of the cache: a pin
that would pass it releases pins, new one included, in release order until it fits.
Release order (bound and pressure): pins whose next turn has not arrived before pins
whose turn waits to be admitted; among them, the least expected loss first (tokens to
recompute x their prefill cost x P(return soon): ``engine.scheduling.pin_cost`` states the
rule; under the program policy, ``by_service``, within the level of service of the programs,
those a level behind going first); then the oldest turn end. Releasing drops only the pin's references: blocks a running
request shares are never taken from it. /metrics counts the pinned blocks released for memory
and the returning turns of those programs that then missed part of what their pin held.

Programs' accounts (``engine.scheduling.programs.table``) live here too: each arriving turn is given its
program's record, whose service the scheduler counts. A program away longer than its
retention (the TTL its pin would get: the fixed one, else its gap law's) starts again as
new: its service goes back to 0, at level 0 as of its return.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from agentgate.engine.config import parse_retention
from agentgate.engine.front.protocol import RetentionStats
from agentgate.engine.kv.block_pool import Block, BlockPool
from agentgate.engine.request import Request
from agentgate.engine.scheduling.pin_cost import exclusive_blocks, recompute_cost
from agentgate.engine.scheduling.programs.table import ProgramRecord, ProgramTable, Rank
from agentgate.engine.scheduling.tool_gaps import ToolGaps, tool_key

# Seconds a pin lives before the gateway says whether its turn called tools.
GRACE_S = 5.0
# Programs remembered as having lost their pin to pressure, until their next turn is admitted.
MAX_EVICTED = 4096


@dataclass(slots=True)
class Pin:
    program_id: str
    request_id: str  # the turn that ended
    blocks: list[Block]
    ended: float  # monotonic
    expires: float
    served: ProgramRecord  # its program's account (the program policy ranks by it)
    key_served: ProgramRecord  # its API key's account (ranked before the program's)

    @property
    def rank(self) -> Rank:
        """As :attr:`Request.rank`: its key's, then its program's."""
        return (self.key_served.rank, self.served.rank)

    tools: str | None = None  # set once TurnEnded says what was called
    claimed_by: str | None = None  # the id of its next turn, waiting to be admitted
    server_run: bool = False  # its tools run in the server: held until they return (not a law's TTL)


class KVRetention:
    """Pins, their bound and release order, tool gaps and the figures on /metrics."""

    def __init__(
        self,
        pool: BlockPool,
        mode: str = "auto",
        max_fraction: float = 0.5,
        block_size: int = 16,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.pool = pool
        self.fixed_ttl = parse_retention(mode)
        self.enabled = self.fixed_ttl != 0.0
        self.max_held_blocks = int(max_fraction * pool.num_blocks)
        self.clock = clock
        self.wall_clock = wall_clock
        self.gaps = ToolGaps()
        self.programs = ProgramTable()
        self.pins: dict[str, Pin] = {}
        self.held_blocks = 0
        self.counts = RetentionStats(max_held_blocks=self.max_held_blocks)
        self.block_size = block_size
        self.by_service = False  # the program policy: pins of programs a level behind go first (set by it)
        # program id -> tokens its pin held when pressure released it (until its next turn is admitted)
        self.evicted: dict[str, int] = {}

    # -- a program's turns -----------------------------------------------------------
    def on_arrival(self, request: Request) -> None:
        """A request arrived: give it its key's account; a turn, its program's account too (its
        service back to 0 after an absence longer than its retention), learn the tool gap it ends,
        claim its pin."""
        tag = request.program
        now = self.clock()
        # the key's account, whatever program (or none) the request names: a new id starts no key afresh
        request.key_served = self.programs.touch(f"key\0{request.tenant}", now)
        if tag is None:
            return
        record = request.served = self.programs.touch(tag.program_id, now)
        record.tenant = request.tenant
        if record.in_flight == 0 and record.idle_since is not None:
            if now - record.idle_since > self.retention_seconds(tag.program_id, record.last_tools):
                record.start_again(now)
        record.in_flight += 1
        record.idle_since = None
        request.returns_after_tools = tag.after_tool_calls and record.last_tools is not None
        if tag.after_tool_calls and record.server_tools:
            request.server_tool_return = True  # no law learns from it; admitted first
        elif tag.after_tool_calls:
            self._observe_gap(tag, record.last_end, record.last_tools, now, request.tenant)
        pin = self.pins.get(tag.program_id)
        if pin is not None and pin.claimed_by is None:
            pin.claimed_by = request.request_id

    def _observe_gap(self, tag, last_end: float | None, last_tools: str | None, now: float, tenant: str) -> None:
        if last_end is not None:
            gap = now - last_end
        elif tag.previous_turn_end > 0:  # ended on another engine: the gateway's clock
            gap = self.wall_clock() - tag.previous_turn_end
        else:
            return
        tools = last_tools if last_tools is not None else tool_key(tag.tool_names, tenant)
        self.gaps.observe(tag.program_id, tools, max(gap, 0.0))

    def on_admitted(self, request: Request, num_cached: int) -> None:
        """A turn was admitted (its prefix hits already referenced): its program's pin goes."""
        tag = request.program
        if tag is None:
            return
        # A return this engine saw the call of: a client's tool-call tail alone is not counted (issue 50's rule).
        if request.returns_after_tools and not request.ever_scheduled:
            self.counts.returning_turns += 1
            self.counts.returning_queries_tokens += request.num_tokens
            self.counts.returning_hits_tokens += num_cached
            lost = self.evicted.pop(tag.program_id, None)
            if lost is not None and num_cached < lost:
                self.counts.returning_missed_after_eviction += 1
        pin = self.pins.get(tag.program_id)
        if pin is not None:
            self._release(pin, "returned")

    def on_left(self, request: Request) -> None:
        """A request left the engine (finished or aborted): its program may fall idle."""
        record = request.served
        record.in_flight = max(record.in_flight - 1, 0)
        if record.in_flight == 0:
            record.idle_since = self.clock()

    def retention_seconds(self, program_id: str, tools: str | None) -> float:
        """How long a program's conversation is kept for it after a turn ending in ``tools``: the fixed
        TTL, else its gap law's (with retention off too: how long a program may be away and still be
        the same program)."""
        if self.fixed_ttl:
            return self.fixed_ttl
        return self.gaps.law(program_id, tools).ttl()

    def on_abort(self, request: Request) -> None:
        """A waiting turn was aborted: the pin it claimed waits for no one now."""
        if request.program is None:
            return
        pin = self.pins.get(request.program.program_id)
        if pin is not None and pin.claimed_by == request.request_id:
            pin.claimed_by = None

    def on_finished(self, request: Request, blocks: Callable[[Request], list[Block]]) -> bool:
        """A turn finished (not aborted). Returns True when it was pinned: ``blocks(request)``
        handed its kept blocks over with their references; else the caller frees them."""
        tag = request.program
        if tag is None:
            return False
        now = self.clock()
        record = self.programs.touch(tag.program_id, now)
        record.last_end, record.last_tools = now, None
        if not (self.enabled and tag.tools_offered):
            return False
        old = self.pins.get(tag.program_id)
        if old is not None:
            self._release(old, "returned")
        kept = blocks(request)
        if not kept:
            return True
        pin = Pin(tag.program_id, request.request_id, kept, now, now + GRACE_S, request.served, request.key_served)
        self.pins[tag.program_id] = pin
        for block in kept:
            block.pins += 1
            if block.pins == 1:
                self.held_blocks += 1
        self.counts.pinned_total += 1
        while self.held_blocks > self.max_held_blocks and self.release_one(None, "pressure"):
            pass
        return True

    def on_turn_ended(self, program_id: str, request_id: str, tool_names: list[str], server_hold: float = 0.0) -> None:
        """The gateway read the reply of ``request_id``: it called ``tool_names``; ``server_hold`` > 0:
        the server runs them, for at most that many seconds (the pin is held until they return)."""
        record = self.programs.get(program_id)
        key = tool_key(tool_names, record.tenant if record is not None else "") if tool_names else None
        server = bool(key) and server_hold > 0
        if record is not None:
            record.last_tools = key
            record.server_tools = server
        pin = self.pins.get(program_id)
        if pin is None or pin.request_id != request_id:
            return
        if key is None:
            self._release(pin, "no_tool_call")
            return
        pin.tools, pin.server_run = key, server
        if server:
            pin.expires = self.clock() + server_hold
            return
        ttl = self.fixed_ttl if self.fixed_ttl is not None else self.gaps.law(program_id, key).ttl()
        pin.expires = pin.ended + ttl

    def on_tools_returned(self, program_id: str, request_id: str) -> None:
        """The server's tools called by ``request_id`` returned and the loop stopped: the pin goes
        (a next round would have claimed it)."""
        pin = self.pins.get(program_id)
        if pin is not None and pin.request_id == request_id and pin.server_run and pin.claimed_by is None:
            self._release(pin, "loop_ended")

    # -- releasing -------------------------------------------------------------------
    def expire(self) -> None:
        """Release the pins past their TTL whose next turn has not arrived."""
        now = self.clock()
        for pin in [p for p in self.pins.values() if p.expires <= now and p.claimed_by is None]:
            self._release(pin, "expired")

    def release_order(self, exclude: str | None = None, ranked_after: Rank | None = None) -> list[Pin]:
        """Pins (but ``exclude``'s, and only those of programs ranked after ``ranked_after`` when given)
        in the order pressure releases them."""
        now = self.clock()

        def key(pin: Pin) -> tuple[bool, tuple[int, int], float, float]:
            levels = (-pin.key_served.level, -pin.served.level) if self.by_service else (0, 0)
            return (pin.claimed_by is not None, levels, self.expected_loss(pin, now), pin.ended)

        candidates = (
            p for p in self.pins.values() if p.program_id != exclude and (ranked_after is None or p.rank > ranked_after)
        )
        return sorted(candidates, key=key)

    def expected_loss(self, pin: Pin, now: float) -> float:
        """What releasing ``pin`` is expected to cost (``engine.scheduling.pin_cost``)."""
        soon = 1.0 if pin.server_run else self.gaps.law(pin.program_id, pin.tools).return_soon(now - pin.ended)
        return recompute_cost(pin.blocks, self.block_size) * soon

    def release_one(self, exclude: str | None, reason: str = "pressure", ranked_after: Rank | None = None) -> bool:
        """Release the first pin in release order (not ``exclude``'s; only a program's ranked after
        ``ranked_after`` when given); False: none left."""
        order = self.release_order(exclude, ranked_after)
        if not order:
            return False
        self._release(order[0], reason)
        return True

    def release_all(self) -> None:
        for pin in list(self.pins.values()):
            self._release(pin, "expired")

    def _release(self, pin: Pin, reason: str) -> None:
        if reason == "pressure":
            self.counts.pressure_released_blocks += exclusive_blocks(pin.blocks)
            self.evicted[pin.program_id] = len(pin.blocks) * self.block_size
            if len(self.evicted) > MAX_EVICTED:
                del self.evicted[next(iter(self.evicted))]
        del self.pins[pin.program_id]
        for block in pin.blocks:
            block.pins -= 1
            if block.pins == 0:
                self.held_blocks -= 1
        self.pool.free(pin.blocks[::-1])
        name = f"released_{reason}"
        setattr(self.counts, name, getattr(self.counts, name) + 1)

    def stats(self) -> RetentionStats:
        counts = self.counts
        counts.pins = len(self.pins)
        counts.held_blocks = self.held_blocks
        counts.tool_gaps = self.gaps.count
        counts.tool_gap_seconds_sum = self.gaps.seconds_sum
        return RetentionStats(*(getattr(counts, f) for f in counts.__struct_fields__))
