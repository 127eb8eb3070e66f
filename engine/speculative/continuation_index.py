"""A bounded index from recent n-grams to where they continued.

Sequences of tokens are appended to a store; every n-gram (``min_n`` to
``max_n`` tokens) ending just before a stored token is a key whose value is
that token's place, so the tokens that followed the most recent occurrence of
a context can be read back. Total stored tokens are bounded: when the budget
is exceeded the oldest whole sequences are evicted, and keys still pointing
into them are dropped. A longest-match lookup over n-grams of decreasing
length is the bounded stand-in for a suffix tree's deepest match (suffix
decoding, arXiv 2411.04975): it finds the same continuation for every
context of up to ``max_n`` tokens, in O(max_n) dict probes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class ContinuationIndex:
    """N-gram -> (sequence, position) over a bounded store of token sequences."""

    def __init__(self, min_n: int, max_n: int, max_tokens: int) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError("need 1 <= min_n <= max_n")
        self.min_n, self.max_n, self.max_tokens = min_n, max_n, max_tokens
        self._sequences: OrderedDict[object, list[int]] = OrderedDict()
        self._keys: dict[tuple[int, ...], tuple[object, int]] = {}
        self.num_tokens = 0

    def __contains__(self, key: object) -> bool:
        return key in self._sequences

    def append(self, key: object, tokens: Sequence[int]) -> None:
        """Extend sequence ``key`` (new ones are created) and index the n-grams
        that now have a continuation."""
        seq = self._sequences.get(key)
        if seq is None:
            seq = self._sequences[key] = []
        keys, min_n, max_n = self._keys, self.min_n, self.max_n
        for token in tokens:
            end = len(seq)  # the n-grams ending at end-1 continue with `token`
            for n in range(min_n, min(max_n, end) + 1):
                keys[tuple(seq[end - n : end])] = (key, end)
            seq.append(token)
        self.num_tokens += len(tokens)
        while self.num_tokens > self.max_tokens and len(self._sequences) > 1:
            self._evict_oldest()

    def drop(self, key: object) -> None:
        """Forget sequence ``key`` and its n-grams."""
        seq = self._sequences.pop(key, None)
        if seq is not None:
            self._forget(key, seq)

    def lookup(self, context: Sequence[int], k: int) -> tuple[list[int], int]:
        """Up to ``k`` tokens that followed the longest indexed suffix of
        ``context``, and that suffix's length (0 and [] when none matches)."""
        if k <= 0:
            return [], 0
        for n in range(min(self.max_n, len(context)), self.min_n - 1, -1):
            hit = self._keys.get(tuple(context[len(context) - n :]))
            if hit is not None:
                seq = self._sequences[hit[0]]
                return seq[hit[1] : hit[1] + k], n
        return [], 0

    def _evict_oldest(self) -> None:
        key, seq = self._sequences.popitem(last=False)
        self._forget(key, seq)

    def _forget(self, key: object, seq: list[int]) -> None:
        self.num_tokens -= len(seq)
        keys, min_n = self._keys, self.min_n
        for end in range(min_n, len(seq)):
            for n in range(min_n, min(self.max_n, end) + 1):
                gram = tuple(seq[end - n : end])
                if keys.get(gram, (None,))[0] == key:
                    del keys[gram]
