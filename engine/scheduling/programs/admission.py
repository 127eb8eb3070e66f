"""Program admission, under the program scheduling policy: a new program starts only while
the programs already active, and it, fit in the KV cache at the size programs reach.

An agent program's conversation grows turn by turn. Programs that start together fit at
first, then outgrow the cache together, and each one's pinned and running blocks push out
the others' (measured: 12 agents in a cache that holds about half of their final
conversations hit 30 % of their returning prompts with every program let in at once). So a
new program's turn waits while (active programs + 1) x the expected size of a program
passes the cache, and the scheduler admits what comes after it in the queue meanwhile.

- A program is *active* while it has a running request, a pin, or a turn waiting that
  returns after tool calls or resumes after a preemption; not a program whose pin pressure
  released and whose blocks the prefix cache no longer all holds
  (``MemoryPressure.lost_conversation``): its return is admitted as a new program's turn is. Else
  every eviction let a turn in that recomputes its whole conversation, whose blocks push out the
  next program's pin, and so on down the line (``loadtests/programs_simulated.py
  --retention-fraction 0.5``, ``agent_programs`` on the null runner, 12 agents in a cache that
  holds about 5: 0.53 of the returning prompts hit with the evicted let in at once, 0.63 held).
- The expected size is the largest conversation (its blocks when a turn ends) seen lately,
  decaying by ``DECAY`` at each turn end and by half every ``HALF_LIFE_S`` seconds, and at
  least ``GROWTH`` times the new turn's prompt.
- A request of no program is never held back, nor a new program when none is active.

A program held back waits for an active program to end (its last turn ends without a tool
call, or its pin runs out), for the expected size to fade, or for the queue's wait bound:
an overdue request is not held back (``engine.scheduling.waiting_queue``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Set

from agentgate.engine.request import Request

DECAY = 0.99  # per turn end: old programs' sizes fade as programs change
HALF_LIFE_S = 30.0  # and with time, so a size no program has reached lately stops holding new ones
GROWTH = 2.0  # a program reaches at least this many times its first prompt


class ProgramAdmission:
    def __init__(self, num_blocks: int, block_size: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.clock = clock
        self._largest = 0.0  # blocks: the largest conversation seen lately, as of ``_at``
        self._at = 0.0

    @property
    def largest(self) -> float:
        """Blocks: the largest conversation seen lately, faded by the time since."""
        return self._largest * 0.5 ** (max(self.clock() - self._at, 0.0) / HALF_LIFE_S)

    def turn_ended(self, num_blocks: int) -> None:
        """A program's turn ended holding ``num_blocks``."""
        self._largest, self._at = max(self.largest * DECAY, float(num_blocks)), self.clock()

    def admits(self, request: Request, active: Set[str]) -> bool:
        """Whether ``request`` may start now, ``active`` being the active programs' ids."""
        tag = request.program
        if tag is None or request.ever_scheduled:
            return True
        if not active or tag.program_id in active:
            return True
        expected = max(self.largest, GROWTH * math.ceil(request.num_tokens / self.block_size))
        return (len(active) + 1) * expected <= self.num_blocks
