"""Which answers are retried and how long to wait: ``Retry-After`` first, else
exponential backoff with jitter."""

from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    """Retry 429 and 503 answers (and failures to connect) up to ``max_retries`` times.

    The wait is the server's ``Retry-After`` (seconds or an HTTP date, capped at
    ``max_retry_after``) when it sent one, else ``backoff * 2**attempt`` capped
    at ``max_backoff``, with full jitter in [50%, 100%]."""

    max_retries: int = 3
    backoff: float = 0.25
    max_backoff: float = 8.0
    max_retry_after: float = 60.0
    statuses: frozenset[int] = frozenset({429, 503})

    def delay(self, attempt: int, headers: dict[str, str] | None = None) -> float:
        retry_after = parse_retry_after((headers or {}).get("retry-after"))
        if retry_after is not None:
            return min(retry_after, self.max_retry_after)
        base = min(self.max_backoff, self.backoff * (2**attempt))
        return base * random.uniform(0.5, 1.0)


def parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
