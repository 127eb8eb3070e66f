"""The attention interface: what a step tells attention about its batch
(`AttentionMetadata`), the backend protocol, and its selection by device
(`get_backend`): the Triton kernels on CUDA (`attention.triton`), the
plain-torch reference elsewhere (`attention.torch`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass
class AttentionMetadata:
    """Layout of a ragged batch against the paged KV cache.

    Sequence ``i`` contributes the query tokens
    ``query_start_loc[i] : query_start_loc[i + 1]``; they sit at positions
    ``seq_lens[i] - query_len_i ... seq_lens[i] - 1`` of that sequence, and
    every earlier position's key and value are already in the cache (the
    step's own keys and values are written by `rotary_write_kv` before attention
    runs). Attention is causal: the query at position ``p`` sees keys
    ``0..p``.

    Device tensors:
      slot_mapping:    [num_tokens] int64; cache slot (block * block_size +
                       offset) of each new token, -1 = do not write (padding).
      query_start_loc: [num_seqs + 1] int32, cumulative query lengths.
      seq_lens:        [num_seqs] int32, context length after this step;
                       0 marks a padded (unused) row.
      block_tables:    [num_seqs, max_blocks_per_seq] int32, physical block
                       of each logical block; unused entries are ignored.

    Host values (known to the scheduler without a device sync):
      max_query_len:   longest query in the batch (1 = pure decode).
      max_seq_len:     longest context in the batch. Kernels that must be
                       CUDA-graph safe size their grids without it.
      query_start_loc_cpu, seq_lens_cpu: host copies of the two device
                       tensors, for backends that loop over sequences on the
                       host (the CPU reference). Reading them never syncs.
      padded:          some rows are padding (slot -1, seq_len 0): the CUDA
                       graphs' fixed-size batches. Eager steps never pad, so
                       a backend may skip the masking then.
      shared_prefix_blocks: the first this-many entries of every row of
                       ``block_tables`` name the same physical blocks (a
                       prefix every sequence of the batch shares, such as a
                       common system prompt held once by the prefix cache).
                       Filled by runners whose backend ``reads_shared_prefix``;
                       0 = unknown, always correct.
    """

    slot_mapping: torch.Tensor
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_tables: torch.Tensor
    max_query_len: int
    max_seq_len: int
    query_start_loc_cpu: torch.Tensor
    seq_lens_cpu: torch.Tensor
    shared_prefix_blocks: int = 0
    padded: bool = False

    @property
    def num_seqs(self) -> int:
        return self.seq_lens.shape[0]

    @property
    def is_pure_decode(self) -> bool:
        return self.max_query_len == 1


def count_shared_prefix_blocks(block_tables: Sequence[Sequence[int]]) -> int:
    """How many leading physical blocks every one of ``block_tables`` shares.
    The common prefix of a set of sequences is the common prefix of its
    lexicographically smallest and largest members, so two C-level
    comparisons of lists and one short walk do it."""
    if not block_tables:
        return 0
    smallest, largest = min(block_tables), max(block_tables)
    shared = 0
    for a, b in zip(smallest, largest):
        if a != b:
            break
        shared += 1
    return shared


class AttentionBackend(Protocol):
    """Writes a step's keys/values into the paged cache and attends over it.

    Cache layout, per layer: ``k_cache`` and ``v_cache`` are each
    ``[num_blocks, block_size, num_kv_heads, head_dim]``.
    """

    name: str
    # Whether `paged_attention` uses AttentionMetadata.shared_prefix_blocks
    # (runners skip the host work of finding it otherwise).
    reads_shared_prefix: bool

    def rotary_write_kv(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        """Rotate ``query`` ([num_tokens, num_heads, head_dim]) and ``key``
        ([num_tokens, num_kv_heads, head_dim]) by RoPE (``cos``/``sin``
        [num_tokens, head_dim / 2]: the tables' rows at the tokens'
        positions), store the rotated keys and ``value`` at their slots
        (``meta.slot_mapping``; tokens whose slot is -1 are skipped), and
        return the rotated query, which may be ``query`` itself, rotated in
        place."""
        ...

    def paged_attention(
        self,
        query: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor:
        """Causal attention of ``query`` ([num_tokens, num_heads, head_dim])
        over the cache; returns the same shape and dtype. Grouped-query:
        head ``h`` reads KV head ``h // (num_heads // num_kv_heads)``.
        Rows of padded sequences (seq_len 0) may hold anything."""
        ...
