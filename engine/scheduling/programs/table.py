"""What the engine remembers of each agent program it has served: the service it has had and its
rank by it (the program scheduling policy orders by it), whether a turn of it is in the engine, and
how its last turn ended (for tool gaps).

**Rank.** A program's service is the tokens the engine has served it: prompt tokens it computed
(not found in the cache) and tokens it sampled. Programs are ranked least served first, as
Autellix's PLAS ranks them, in levels as its multi-level queue does: level 0 holds programs served
fewer than `SERVICE_QUANTUM` tokens, and each level after it twice the service of the one before
(so a program served 10x another beyond the first level is at least three levels behind it).
Within a level, the program that entered it first goes first; a new program enters level 0 when
its first turn arrives. Levels keep the order stable while programs are served alike (ranks by
raw counts would swap with every token, and every swap could take a pinned conversation), and
nothing a client chooses buys more: a constant ``user`` that started long ago is one program,
behind every program served less than a level of it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from agentgate.engine.byte_lru import ByteLRU, str_bytes

# Tokens of service in level 0; level k >= 1 holds [2^(k-1), 2^k) x this.
SERVICE_QUANTUM = 4096
# Bytes of program records kept (ids counted); the least recently active program is forgotten
# first (a request or pin still holding its record keeps it until it leaves).
MAX_PROGRAM_BYTES = 32 << 20


def service_level(tokens: int) -> int:
    """The level of a program served ``tokens`` (see the module docstring)."""
    return (tokens // SERVICE_QUANTUM).bit_length()


Rank = tuple[tuple[int, float], tuple[int, float]]
"""The program policy's rank of a request or a pin: its API key's account's, then its program's
(:attr:`ProgramRecord.rank` each); lower goes first."""


@dataclass(slots=True)
class ProgramRecord:
    """A program's account. A request of no program gets a record of its own, never in the table."""

    level_since: float  # monotonic: when it entered its level (its first turn's arrival for level 0)
    service: int = 0  # tokens served: prompt tokens computed (not found in the cache) and tokens sampled
    level: int = 0
    in_flight: int = 0  # its requests in the engine (waiting or running)
    idle_since: float | None = None  # monotonic: when its last request left; None: one is in, or none came
    last_end: float | None = None  # monotonic: when its last turn finished
    last_tools: str | None = None  # the tool key its last turn called; None: unknown or no call
    tenant: str = ""  # the API key's digest its turns came with (tool keys are scoped by it)
    server_tools: bool = False  # its last turn's tools run in the server (the hosted MCP loop)

    @property
    def rank(self) -> tuple[int, float]:
        """Lower goes first: its level, then when it entered it."""
        return (self.level, self.level_since)

    def serve(self, tokens: int, now: float) -> None:
        """Count ``tokens`` served to it ``now``."""
        self.service += tokens
        level = service_level(self.service)
        if level != self.level:
            self.level, self.level_since = level, now

    def start_again(self, now: float) -> None:
        """A new program again (back after an absence longer than its retention)."""
        self.service, self.level, self.level_since = 0, 0, now


_RECORD_BYTES = sys.getsizeof(ProgramRecord(0.0))


class ProgramTable:
    def __init__(self, max_bytes: int = MAX_PROGRAM_BYTES) -> None:
        self._records: ByteLRU[str, ProgramRecord] = ByteLRU(max_bytes)

    def get(self, program_id: str) -> ProgramRecord | None:
        return self._records.peek(program_id)

    def touch(self, program_id: str, now: float) -> ProgramRecord:
        """The program's record (a new one, started ``now``, if it has none), marked recently active."""
        record = self._records.get(program_id)
        if record is None:
            record = ProgramRecord(level_since=now)
            self._records.put(program_id, record, str_bytes(program_id) + _RECORD_BYTES)
        return record

    def __len__(self) -> int:
        return len(self._records)
