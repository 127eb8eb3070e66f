"""What the engine remembers of each agent program it has served: the service it has had (the
program scheduling policy ranks by it), whether a turn of it is in the engine, and how its last
turn ended (for tool gaps)."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from agentgate.engine.byte_lru import ByteLRU, str_bytes

# Bytes of program records kept (ids counted); the least recently active program is forgotten
# first (a request or pin still holding its record keeps it until it leaves).
MAX_PROGRAM_BYTES = 32 << 20


@dataclass(slots=True)
class ProgramRecord:
    """A program's account. A request of no program gets a record of its own, never in the table."""

    service: int = 0  # tokens served: prompt tokens computed (not found in the cache) and tokens sampled
    in_flight: int = 0  # its requests in the engine (waiting or running)
    idle_since: float | None = None  # monotonic: when its last request left; None: one is in, or none came
    last_end: float | None = None  # monotonic: when its last turn finished
    last_tools: str | None = None  # the tool key its last turn called; None: unknown or no call


_RECORD_BYTES = sys.getsizeof(ProgramRecord())


class ProgramTable:
    def __init__(self, max_bytes: int = MAX_PROGRAM_BYTES) -> None:
        self._records: ByteLRU[str, ProgramRecord] = ByteLRU(max_bytes, lambda pid, _: str_bytes(pid) + _RECORD_BYTES)

    def get(self, program_id: str) -> ProgramRecord | None:
        return self._records.peek(program_id)

    def touch(self, program_id: str) -> ProgramRecord:
        """The program's record (a new one if it has none), marked recently active."""
        record = self._records.get(program_id)
        if record is None:
            record = ProgramRecord()
            self._records.put(program_id, record)
        return record

    def __len__(self) -> int:
        return len(self._records)
