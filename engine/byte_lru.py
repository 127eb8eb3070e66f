"""A least-recently-used map bounded in bytes: the form of every cache keyed by what clients send
(schemas, tool names, program ids, conversations), so that no client can grow one past its bound.

Each entry's size is the owner's count, given when it is put (put it again to count it anew:
the map never calls back into its owner); past ``max_bytes`` the least recently used entries
go first, and an entry larger than the bound alone is not kept. Not thread-safe: an owner used
from several threads locks. Torch-free, so the gateway may use it too.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Iterator
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

# A dict entry's own cost beside its key and value: the hash table's slot and the order's links.
ENTRY_OVERHEAD_BYTES = 100


def str_bytes(*texts: str) -> int:
    """Bytes the strings take in memory (1, 2 or 4 per character, as CPython stores them)."""
    return sum(sys.getsizeof(text) for text in texts)


class ByteLRU(Generic[K, V]):
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self.nbytes = 0

    def get(self, key: K) -> V | None:
        """The value at ``key``, marked most recently used; None when absent."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: K, value: V, nbytes: int) -> None:
        """Keep ``value`` at ``key``, ``nbytes`` of key and value as the owner counts them, most
        recently used, then evict past the bound."""
        self.pop(key)
        size = nbytes + ENTRY_OVERHEAD_BYTES
        if size > self.max_bytes:
            return
        self._entries[key] = (value, size)
        self.nbytes += size
        while self.nbytes > self.max_bytes:
            _, (_, evicted) = self._entries.popitem(last=False)
            self.nbytes -= evicted

    def pop(self, key: K) -> V | None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return None
        self.nbytes -= entry[1]
        return entry[0]

    def peek(self, key: K) -> V | None:
        """The value at ``key`` without marking it used."""
        entry = self._entries.get(key)
        return None if entry is None else entry[0]

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[K]:
        return iter(self._entries)
