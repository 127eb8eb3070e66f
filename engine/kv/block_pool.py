"""The pool of fixed-size KV blocks: reference counts, an LRU of free blocks,
the map from block hash to the cached block that holds it, and how long blocks
keep their content (vLLM's KV residency histograms)."""

from __future__ import annotations

import bisect
import time
from collections import OrderedDict, deque
from collections.abc import Sequence

from agentgate.engine.front.protocol import KV_RESIDENCY_BUCKETS, HistogramCounts, KvResidencyStats

REUSE_HISTORY = 4  # accesses a block remembers for its reuse gaps, as vLLM's ring buffer


class Block:
    """One physical KV block. ``block_hash``/``token_ids`` are set while the
    block's contents are registered in the prefix cache. ``pins``: how many of
    its references are retention pins (engine.retention), not requests."""

    __slots__ = ("block_id", "ref_count", "block_hash", "token_ids", "pins", "born", "accesses")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_count = 0
        self.pins = 0
        self.block_hash: int | None = None
        self.token_ids: tuple[int, ...] | None = None
        self.born: float | None = None  # when it was last allocated (None: never)
        self.accesses: deque[float] = deque(maxlen=REUSE_HISTORY)  # its prefix-cache hits since


class Residency:
    """vLLM's KV residency histograms (``vllm:kv_block_*``), every block observed (vLLM samples
    a share, ``--kv-cache-metrics-sample``): when a block is taken for new content, its last life
    ends: seconds since its allocation, since its last access (allocation or hit), and between
    its last hits."""

    def __init__(self) -> None:
        self._histograms = [HistogramCounts([0] * (len(KV_RESIDENCY_BUCKETS) + 1)) for _ in range(3)]

    def life_ended(self, block: Block, now: float) -> None:
        if block.born is None:
            return
        lifetime, idle, reuse = self._histograms
        last = block.accesses[-1] if block.accesses else block.born
        _observe(lifetime, now - block.born)
        _observe(idle, now - last)
        history = list(block.accesses)
        for earlier, later in zip(history, history[1:], strict=False):
            _observe(reuse, later - earlier)

    def stats(self) -> KvResidencyStats:
        lifetime, idle, reuse = (HistogramCounts(list(h.counts), h.total) for h in self._histograms)
        return KvResidencyStats(lifetime, idle, reuse)


def _observe(histogram: HistogramCounts, seconds: float) -> None:
    histogram.counts[bisect.bisect_left(KV_RESIDENCY_BUCKETS, seconds)] += 1  # le: a bound holds its equal
    histogram.total += seconds


class BlockPool:
    """Allocates blocks, keeping freed cached blocks reusable until evicted.

    Free blocks sit in an LRU queue: the front is evicted first. A freed
    block that holds cached content stays in the hash map, so a later request
    with the same prefix can take it back (``touch``) instead of recomputing.
    """

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.blocks = [Block(i) for i in range(num_blocks)]
        self._free: OrderedDict[int, Block] = OrderedDict((b.block_id, b) for b in self.blocks)
        self._cached: dict[int, Block] = {}
        self.residency = Residency()

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def usage(self) -> float:
        """Fraction of blocks held by live requests."""
        return 1.0 - len(self._free) / self.num_blocks

    def allocate(self, count: int) -> list[Block] | None:
        """``count`` fresh blocks (evicting cached content LRU-first), or None
        when fewer are free; nothing is taken in that case."""
        if count > len(self._free):
            return None
        taken = []
        now = time.monotonic()
        for _ in range(count):
            _, block = self._free.popitem(last=False)
            self.residency.life_ended(block, now)
            self._evict(block)
            block.ref_count = 1
            block.born = now
            block.accesses.clear()
            taken.append(block)
        return taken

    def lookup(self, block_hash: int, token_ids: Sequence[int]) -> Block | None:
        """The cached block for ``block_hash`` if its tokens really match."""
        block = self._cached.get(block_hash)
        if block is None or block.token_ids != tuple(token_ids):
            return None
        return block

    def touch(self, block: Block) -> None:
        """Take a reference on a cached block (a prefix-cache hit)."""
        if block.ref_count == 0:
            del self._free[block.block_id]
        block.ref_count += 1
        block.accesses.append(time.monotonic())

    def register(self, block: Block, block_hash: int, token_ids: Sequence[int]) -> None:
        """Record a full block's content so later requests can hit it. A hash
        already cached in another block keeps that block."""
        if block.block_hash is not None or block_hash in self._cached:
            return
        block.block_hash = block_hash
        block.token_ids = tuple(token_ids)
        self._cached[block_hash] = block

    def free(self, blocks: Sequence[Block]) -> None:
        """Drop one reference from each block; blocks reaching zero become
        free. Pass a request's blocks tail first, so its tail is evicted first."""
        for block in blocks:
            block.ref_count -= 1
            if block.ref_count == 0:
                self._free[block.block_id] = block

    def is_free(self, block: Block) -> bool:
        return block.block_id in self._free

    def is_cached(self, block: Block) -> bool:
        return block.block_hash is not None and self._cached.get(block.block_hash) is block

    def reset_prefix_cache(self) -> None:
        """Forget every cached hash (content of live blocks stays valid)."""
        for block in self._cached.values():
            block.block_hash = None
            block.token_ids = None
        self._cached.clear()

    def _evict(self, block: Block) -> None:
        if block.block_hash is not None:
            del self._cached[block.block_hash]
            block.block_hash = None
            block.token_ids = None
