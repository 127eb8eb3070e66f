"""Per-request block tables on top of the block pool, with prefix caching."""

from __future__ import annotations

from agentgate.engine.kv.block_pool import Block, BlockPool
from agentgate.engine.kv.prefix_cache import extend_block_hashes
from agentgate.engine.request import Request


class KVCacheManager:
    """Gives each request the blocks its tokens need and shares full blocks
    between requests with the same prefix (when ``enable_prefix_caching``)."""

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True) -> None:
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.pool = BlockPool(num_blocks)
        self._blocks: dict[str, list[Block]] = {}
        # How many leading blocks of each request were offered to the cache.
        self._num_offered: dict[str, int] = {}
        self.prefix_queries_tokens = 0
        self.prefix_hits_tokens = 0

    @property
    def usage(self) -> float:
        return self.pool.usage

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    def block_ids(self, request_id: str) -> list[int]:
        return [b.block_id for b in self._blocks.get(request_id, ())]

    def find_cached_prefix(self, request: Request) -> list[Block]:
        """The longest run of cached full blocks that starts the request's
        known tokens. At least one token is always left to compute, since the
        step that computes it is the one that samples."""
        if not self.enable_prefix_caching:
            return []
        token_ids = request.all_token_ids
        extend_block_hashes(request.block_hashes, token_ids, len(token_ids), self.block_size, request.cache_root)
        max_blocks = (len(token_ids) - 1) // self.block_size
        hits: list[Block] = []
        for index, key in enumerate(request.block_hashes[:max_blocks]):
            start = index * self.block_size
            block = self.pool.lookup(key, token_ids[start : start + self.block_size])
            if block is None:
                break
            hits.append(block)
        return hits

    def record_prefix_lookup(self, num_tokens: int, num_hit_tokens: int) -> None:
        """Count one admitted request's lookup in the hit-rate statistics."""
        if self.enable_prefix_caching:
            self.prefix_queries_tokens += num_tokens
            self.prefix_hits_tokens += num_hit_tokens

    def allocate(
        self, request: Request, num_new_tokens: int, cached_prefix: list[Block] | None = None
    ) -> list[int] | None:
        """Make the request's table cover its computed tokens, the prefix hit
        and ``num_new_tokens`` more. Returns the ids of the blocks added (hit
        blocks first), or None, taking nothing, when the pool is short."""
        held = self._blocks.setdefault(request.request_id, [])
        if not cached_prefix:  # the common case: a running request's next tokens
            num_new_blocks = -(-(request.num_computed_tokens + num_new_tokens) // self.block_size) - len(held)
            if num_new_blocks <= 0:
                return []
            fresh = self.pool.allocate(num_new_blocks)
            if fresh is None:
                return None
            held.extend(fresh)
            return [b.block_id for b in fresh]
        needed_tokens = request.num_computed_tokens + len(cached_prefix) * self.block_size + num_new_tokens
        num_new_blocks = -(-needed_tokens // self.block_size) - len(held) - len(cached_prefix)
        # Hit blocks that sit free count against the pool too, until touched.
        num_free_hits = sum(1 for b in cached_prefix if b.ref_count == 0)
        if num_new_blocks + num_free_hits > self.pool.num_free_blocks:
            return None
        for block in cached_prefix:
            self.pool.touch(block)
        fresh = self.pool.allocate(max(num_new_blocks, 0)) or []
        added = cached_prefix + fresh
        held.extend(added)
        self._num_offered[request.request_id] = len(cached_prefix)
        return [b.block_id for b in added]

    def cache_full_blocks(self, request: Request, num_computed: int | None = None) -> None:
        """Register blocks whose every token id is known and whose KV the
        scheduled steps write (up to ``num_computed`` tokens, by default the
        request's count). Safe at schedule time: a later reader runs after
        the writing step, or in the same step, whose every layer writes all
        its keys and values before attending."""
        if not self.enable_prefix_caching:
            return
        held = self._blocks.get(request.request_id)
        if not held:
            return
        if num_computed is None:
            num_computed = request.num_computed_tokens
        num_full = min(num_computed, request.num_tokens) // self.block_size
        offered = self._num_offered.get(request.request_id, 0)
        if num_full <= offered:
            return
        token_ids = request.all_token_ids
        extend_block_hashes(
            request.block_hashes, token_ids, num_full * self.block_size, self.block_size, request.cache_root
        )
        for index in range(offered, num_full):
            start = index * self.block_size
            self.pool.register(held[index], request.block_hashes[index], token_ids[start : start + self.block_size])
        self._num_offered[request.request_id] = num_full

    def trim(self, request: Request) -> None:
        """Return the blocks past the request's computed tokens (written only
        for drafts that were rejected) to the pool, tail first. They were
        never offered to the prefix cache: only blocks of known tokens are."""
        held = self._blocks.get(request.request_id)
        keep = -(-request.num_computed_tokens // self.block_size)
        if held and len(held) > keep:
            self.pool.free(held[keep:][::-1])
            del held[keep:]

    def detach(self, request: Request) -> list[Block]:
        """End the request's table but keep its leading blocks registered in the
        prefix cache: they are returned with the request's reference on each, now
        the caller's (a retention pin's) to give back with ``pool.free``. The
        rest is freed, tail first."""
        self._num_offered.pop(request.request_id, None)
        held = self._blocks.pop(request.request_id, None) or []
        keep = 0
        while keep < len(held) and self.pool.is_cached(held[keep]):
            keep += 1
        if keep < len(held):
            self.pool.free(held[keep:][::-1])
        return held[:keep]

    def accounting_errors(self, pinned: list[list[Block]] = ()) -> list[str]:
        """Every way the pool's state disagrees with its holders (empty when exact):
        each block's reference count must equal the request tables and ``pinned``
        block lists holding it, its pin count the latter, and a block is free
        exactly when nothing holds it."""
        refs = [0] * self.pool.num_blocks
        pins = [0] * self.pool.num_blocks
        for held in self._blocks.values():
            for block in held:
                refs[block.block_id] += 1
        for held in pinned:
            for block in held:
                refs[block.block_id] += 1
                pins[block.block_id] += 1
        errors = []
        for block in self.pool.blocks:
            i = block.block_id
            if block.ref_count != refs[i] or block.pins != pins[i]:
                errors.append(f"block {i}: ref_count {block.ref_count}/pins {block.pins}, held {refs[i]}/{pins[i]}")
            if self.pool.is_free(block) != (refs[i] == 0):
                errors.append(f"block {i}: free {self.pool.is_free(block)} with {refs[i]} holders")
        return errors

    def free(self, request: Request) -> None:
        """Release every block of the request (tail first, so the tail is
        evicted before the shared prefix)."""
        self._num_offered.pop(request.request_id, None)
        held = self._blocks.pop(request.request_id, None)
        if held:
            self.pool.free(held[::-1])
