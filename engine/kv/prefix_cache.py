"""Chained block hashes: a full block's key is (parent block's key, its token ids)."""

from __future__ import annotations

from collections.abc import Sequence

# The key of the (non-existent) block before the first one.
ROOT_HASH = 0x5A17


def block_hash(parent_hash: int, token_ids: Sequence[int]) -> int:
    """The key of one full block given its parent's key. Python's tuple hash
    of ints is deterministic across processes; collisions are harmless
    because every hit is verified against the block's tokens."""
    return hash((parent_hash, tuple(token_ids)))


def extend_block_hashes(hashes: list[int], token_ids: Sequence[int], num_tokens: int, block_size: int) -> None:
    """Append the keys of every full block among the first ``num_tokens`` of
    ``token_ids`` not hashed yet (``hashes`` grows in place)."""
    for index in range(len(hashes), num_tokens // block_size):
        parent = hashes[-1] if hashes else ROOT_HASH
        start = index * block_size
        hashes.append(block_hash(parent, token_ids[start : start + block_size]))
