"""Adaptive draft length per request, from its recent acceptance."""

from __future__ import annotations

MAX_COOLDOWN = 16  # steps without drafts, at most, after repeated misses


class DraftLength:
    """How many tokens to draft for one request next.

    A fully accepted draft doubles the length (up to ``max_k``); a partly
    accepted one sets it to what was accepted plus one. Drafts that keep
    failing (no token accepted, ``miss_limit`` times in a row) stop drafting
    for a cooldown that doubles with every further miss, after which one
    short draft probes again; an accepted token resets the cooldown.
    """

    __slots__ = ("max_k", "k", "misses", "cooldown", "miss_limit")

    def __init__(self, max_k: int, miss_limit: int = 2) -> None:
        self.max_k = max_k
        self.k = max(1, max_k // 2)
        self.misses = 0
        self.cooldown = 0
        self.miss_limit = miss_limit

    def next(self) -> int:
        """The draft length for the next step (0: do not draft)."""
        if self.cooldown > 0:
            self.cooldown -= 1
            return 0
        return self.k

    def observe(self, drafted: int, accepted: int) -> None:
        """Record one verification: ``accepted`` of ``drafted`` tokens matched."""
        if drafted <= 0:
            return
        if accepted >= drafted:
            self.k = min(self.max_k, 2 * self.k)
        else:
            self.k = max(1, accepted + 1)
        if accepted > 0:
            self.misses = 0
            return
        self.misses += 1
        if self.misses >= self.miss_limit:
            self.cooldown = min(MAX_COOLDOWN, 1 << (self.misses - self.miss_limit + 1))
            self.k = 1
