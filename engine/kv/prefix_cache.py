"""Chained block hashes: a full block's key is (parent block's key, its token ids).

The first block's parent is a request's root: :data:`ROOT_HASH`, or a key made from its cache
salt (vLLM's ``cache_salt``; ``--prefix-cache-isolation key`` salts by API key), so requests
with different salts never share a cached block, even with the same tokens."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

# The key of the (non-existent) block before the first one, for unsalted requests.
ROOT_HASH = 0x5A17


def salted_root(salt: str) -> int:
    """The root key of requests with cache salt ``salt`` (ROOT_HASH when empty): a digest, stable
    across processes, that no unsalted chain starts from."""
    if not salt:
        return ROOT_HASH
    return int.from_bytes(hashlib.sha256(b"agentgate-cache-salt\0" + salt.encode()).digest()[:8], "little")


def block_hash(parent_hash: int, token_ids: Sequence[int]) -> int:
    """The key of one full block given its parent's key. Python's tuple hash
    of ints is deterministic across processes; collisions are harmless
    because every hit is verified against the block's tokens."""
    return hash((parent_hash, tuple(token_ids)))


def extend_block_hashes(
    hashes: list[int], token_ids: Sequence[int], num_tokens: int, block_size: int, root: int = ROOT_HASH
) -> None:
    """Append the keys of every full block among the first ``num_tokens`` of
    ``token_ids`` not hashed yet (``hashes`` grows in place; ``root``: the request's, see
    :func:`salted_root`)."""
    for index in range(len(hashes), num_tokens // block_size):
        parent = hashes[-1] if hashes else root
        start = index * block_size
        hashes.append(block_hash(parent, token_ids[start : start + block_size]))
