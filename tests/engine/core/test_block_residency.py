"""vLLM's KV residency figures from the block pool (``engine.kv.block_pool.Residency``): a block's
life ends when it is taken for new content; its lifetime, idle time and reuse gaps are observed
then, and never for a block's first allocation."""

from __future__ import annotations

import time

from agentgate.engine.front.protocol import KV_RESIDENCY_BUCKETS
from agentgate.engine.kv.block_pool import REUSE_HISTORY, BlockPool


def test_a_blocks_life_ends_when_it_is_taken_again():
    pool = BlockPool(2)
    first = pool.allocate(2)
    stats = pool.residency.stats()
    assert sum(stats.lifetime.counts) == 0  # first allocations end no life
    assert len(stats.lifetime.counts) == len(KV_RESIDENCY_BUCKETS) + 1
    pool.register(first[0], 7, (1, 2))
    pool.free(first)
    for _ in range(REUSE_HISTORY + 2):  # more hits than the block remembers
        time.sleep(0.003)
        hit = pool.lookup(7, (1, 2))
        assert hit is first[0]
        pool.touch(hit)
        pool.free([hit])
    time.sleep(0.01)
    pool.allocate(2)  # both blocks again: two lives end
    stats = pool.residency.stats()
    assert sum(stats.lifetime.counts) == 2 and sum(stats.idle_before_evict.counts) == 2
    assert sum(stats.reuse_gap.counts) == REUSE_HISTORY - 1  # gaps between the last accesses remembered
    assert stats.idle_before_evict.total < stats.lifetime.total
    assert stats.reuse_gap.total >= (REUSE_HISTORY - 1) * 0.003
    assert stats.lifetime.counts[-1] == 0  # nothing lived past 1800 s
    assert pool.lookup(7, (1, 2)) is None  # and the hit block's content was evicted
