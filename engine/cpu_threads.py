"""Torch's CPU threads, sized to the cores other processes leave free.

Every parallel op (a matmul, a kernel over the weights) ends at a barrier
where all of torch's OpenMP threads meet. With one thread per core and one
other busy process on the machine, one of them is off its core for a
scheduler slice at nearly every barrier: on 2 cores a decode step went from
~70 ms to 1.46 s. One thread fewer than the cores in use loses nothing to
such waits. So, unless ``--cpu-threads`` fixes the count, `ThreadGovernor`
looks every couple of seconds at how busy the machine was apart from this
process (``/proc/stat`` against our own CPU time) and runs one thread fewer
for each core the others keep at least three quarters busy, at least one:
every core on a quiet machine (or beside a light front end), one fewer
while another program keeps a core busy.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from agentgate.engine.config import EngineConfig

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def machine_busy_seconds() -> float | None:
    """CPU seconds all cores spent busy since boot (None off Linux)."""
    try:
        values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return (sum(values[:8]) - idle) / _TICKS


def own_busy_seconds() -> float:
    """CPU seconds this process used (every thread)."""
    times = os.times()
    return times.user + times.system


def threads_for(cores: int, others_busy: float) -> int:
    """Threads to run when other processes keep ``others_busy`` cores busy."""
    return max(1, min(cores, cores - int(others_busy + 0.25)))


def configure(config: EngineConfig, device_type: str) -> ThreadGovernor | None:
    """``--cpu-threads`` when given; else, unless ``--deterministic`` keeps
    torch's default, a governor for a model on the CPU. Nothing with the null
    runner, which computes nothing and imports no torch."""
    if config.runner == "null":
        return None
    import torch  # a model runner has imported it already

    if config.cpu_threads is not None:
        torch.set_num_threads(config.cpu_threads)
        return None
    if config.deterministic or device_type != "cpu":  # deterministic: a thread count that never changes mid-run
        return None
    return ThreadGovernor()


class ThreadGovernor:
    """Call `tick` once per engine step; it resizes torch's thread pool at
    most once per ``interval`` seconds, between steps."""

    def __init__(
        self,
        cores: int | None = None,
        interval: float = 2.0,
        machine: Callable[[], float | None] = machine_busy_seconds,
        own: Callable[[], float] = own_busy_seconds,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        import torch  # here, not at the top: the null runner's engine imports this module and no torch

        self._set_threads = torch.set_num_threads
        self.cores = cores or torch.get_num_threads()  # torch's default: one per core
        self.interval = interval
        self._machine, self._own, self._clock = machine, own, clock
        self._last = (self._clock(), self._machine(), self._own())
        self.threads = torch.get_num_threads()

    def tick(self) -> None:
        now = self._clock()
        last_time, last_machine, last_own = self._last
        if now - last_time < self.interval:
            return
        machine, own = self._machine(), self._own()
        self._last = (now, machine, own)
        if machine is None or last_machine is None:
            return
        others = max(0.0, (machine - last_machine) - (own - last_own)) / (now - last_time)
        wanted = threads_for(self.cores, others)
        if wanted != self.threads:
            self._set_threads(wanted)
            self.threads = wanted
