"""The Triton attention backend: the CUDA path behind `get_backend`."""

from __future__ import annotations

import torch

from agentgate.engine.attention.base import AttentionMetadata
from agentgate.engine.kernels.decode_attention import decode_attention, num_splits_for
from agentgate.engine.kernels.prefill_attention import prefill_attention
from agentgate.engine.kernels.rotary_kv import rotary_write_kv


class TritonAttentionBackend:
    """`rotary_write_kv` through the fused RoPE + KV-write kernel;
    `paged_attention` through the split-K decode kernel when every sequence
    has exactly one query token, else through the ragged prefill/extend
    kernel. Neither path reads device tensors on the host. The decode path's
    launch depends only on shapes (batch size, heads, block-table width), so
    it can be captured in a CUDA graph and replayed with other ``seq_lens``
    and block tables."""

    name = "triton"
    reads_shared_prefix = False

    def rotary_write_kv(self, query, key, value, cos, sin, k_cache, v_cache, meta) -> torch.Tensor:
        return rotary_write_kv(query, key, value, cos, sin, k_cache, v_cache, meta.slot_mapping)

    def paged_attention(
        self,
        query: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor:
        if meta.max_query_len == 1 and query.shape[0] == meta.num_seqs:
            max_context = meta.block_tables.shape[1] * k_cache.shape[1]
            num_splits = num_splits_for(meta.num_seqs, k_cache.shape[2], max_context, query.device)
            return decode_attention(query, k_cache, v_cache, meta.seq_lens, meta.block_tables, scale, num_splits)
        return prefill_attention(
            query,
            k_cache,
            v_cache,
            meta.query_start_loc,
            meta.seq_lens,
            meta.block_tables,
            meta.max_query_len,
            scale,
        )
