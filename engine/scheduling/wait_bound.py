"""The wait bound in force (``--max-wait``): how long a request may wait while requests that came
after it are admitted (the queue's use of it: ``engine.scheduling.waiting_queue``).

``auto`` (the default) states it relative to service: max(``MIN_WAIT_S``, ``SERVICE_FACTOR`` x the
median service time of the last ``WINDOW`` turns), a turn's service time being seconds from its
first admission to its end. A fixed bound shorter than one turn makes every held turn overdue
(on this project's CPUs an agent turn takes 7-20 s, beside the 10 s bound that was the default),
and then no policy but arrival order is left; three turns' time keeps the bound a few turns long
on any machine. A number keeps that fixed bound.
"""

from __future__ import annotations

import statistics
from collections import deque

MIN_WAIT_S = 10.0
SERVICE_FACTOR = 3.0
WINDOW = 64


def parse_max_wait(setting: str | float) -> float | None:
    """``--max-wait``: "auto" -> None; "SECONDS" (positive, finite) -> that fixed bound; ValueError
    naming max_wait for anything else."""
    if setting == "auto":
        return None
    try:
        seconds = float(setting)
    except (TypeError, ValueError):
        seconds = 0.0
    if not 0 < seconds < float("inf"):
        raise ValueError(f"max_wait must be auto or a positive number of seconds, got {setting!r}")
    return seconds


class WaitBound:
    """The bound in force: fixed, or (``auto``) from the service times of recent turns."""

    def __init__(self, setting: str | float = "auto") -> None:
        self.fixed = parse_max_wait(setting)
        self._service: deque[float] = deque(maxlen=WINDOW)

    def observe(self, seconds: float) -> None:
        """A turn was served in ``seconds`` (first admission to its end)."""
        self._service.append(max(seconds, 0.0))

    @property
    def median_service(self) -> float:
        """Seconds: the median service time of the recent turns (0 before any)."""
        return statistics.median(self._service) if self._service else 0.0

    @property
    def seconds(self) -> float:
        if self.fixed is not None:
            return self.fixed
        return max(MIN_WAIT_S, SERVICE_FACTOR * self.median_service)

    def describe(self) -> str:
        """The bound in words, for the start-up line."""
        if self.fixed is not None:
            return f"{self.fixed:g} s (fixed)"
        return f"auto: max({MIN_WAIT_S:g} s, {SERVICE_FACTOR:g} x median turn service time), now {self.seconds:g} s"
