"""What the engine remembers of each agent program it has served: when it started (the
program scheduling policy orders by it) and how its last turn ended (for tool gaps)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

# Programs remembered; the least recently active is forgotten first.
MAX_PROGRAMS = 65536


@dataclass(slots=True)
class ProgramRecord:
    started: float  # monotonic: the arrival of its first turn seen here
    last_end: float | None = None  # monotonic: when its last turn finished
    last_tools: str | None = None  # the tool key its last turn called; None: unknown or no call


class ProgramTable:
    def __init__(self) -> None:
        self._records: OrderedDict[str, ProgramRecord] = OrderedDict()

    def get(self, program_id: str) -> ProgramRecord | None:
        return self._records.get(program_id)

    def touch(self, program_id: str, now: float) -> ProgramRecord:
        """The program's record (made, started ``now``, if it is new), marked recently active."""
        record = self._records.pop(program_id, None) or ProgramRecord(started=now)
        self._records[program_id] = record
        if len(self._records) > MAX_PROGRAMS:
            self._records.popitem(last=False)
        return record

    def __len__(self) -> int:
        return len(self._records)
