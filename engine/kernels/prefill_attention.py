"""Triton flash attention for a ragged batch of new tokens over the paged cache.

Covers prefill, extend (chunked prefill, prefix-cache hits) and mixed batches
in which some sequences decode: query ``j`` of sequence ``i`` sits at position
``seq_lens[i] - q_len_i + j`` and sees keys ``0 ..`` that position, all read
from the cache through the block table (``rotary_write_kv`` has already stored the
step's own keys and values).

Both matrix products take their operands in the cache dtype (fp16/bf16
tensor cores) and accumulate in fp32; the softmax runs in fp32, in base 2.
A float32 cache's products are full fp32 (``input_precision="ieee"``), not
TF32, so they match the CPU's.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from agentgate.engine.kernels import dot_precision

BLOCK_M = 128  # rows (query token x head of a GQA group) per program
BLOCK_N = 64  # keys per inner tile
NUM_WARPS = 8  # with 128x64 tiles: no register spills at head_dim 128 on sm_90


@triton.jit
def _prefill_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    out_ptr,
    query_start_loc_ptr,
    seq_lens_ptr,
    block_tables_ptr,
    qk_scale,
    stride_qt,
    stride_qh,
    stride_qd,
    stride_ot,
    stride_oh,
    stride_od,
    stride_cb,
    stride_co,
    stride_ch,
    stride_cd,
    stride_bt,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """Grid ``(cdiv(max_query_len, BLOCK_Q), num_seqs, num_kv_heads)``.

    The program for (query tile t, seq, kv head g) stacks ``BLOCK_Q`` query
    tokens x the ``GROUP`` heads that share kv head g as the ``BLOCK_M`` rows
    of one tile (row r = token ``r // GROUP``, head ``r % GROUP``), so each
    K/V tile, gathered ``BLOCK_N`` keys at a time through the block table,
    serves the whole group. Keys run from 0 to the tile's last query
    position, with a causal mask per row; the softmax is online, in base 2
    and fp32. Tiles past the sequence's query length exit at once.
    """
    tile = tl.num_programs(0) - 1 - tl.program_id(0)  # the longest (causal) tiles first
    seq = tl.program_id(1).to(tl.int64)
    kv_head = tl.program_id(2)

    q_start = tl.load(query_start_loc_ptr + seq)
    q_len = tl.load(query_start_loc_ptr + seq + 1) - q_start
    if tile * BLOCK_Q >= q_len:
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    ctx_len = seq_len - q_len  # cached prefix before the new tokens

    rows = tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    q_idx = tile * BLOCK_Q + rows // GROUP
    heads = kv_head * GROUP + rows % GROUP
    row_mask = (rows < BLOCK_Q * GROUP) & (q_idx < q_len)
    dim_mask = dims < HEAD_DIM
    io_mask = row_mask[:, None] & dim_mask[None, :]
    token = (q_start + q_idx).to(tl.int64)
    q = tl.load(
        q_ptr + token[:, None] * stride_qt + heads[:, None] * stride_qh + dims[None, :] * stride_qd,
        mask=io_mask,
        other=0.0,
    ).to(k_cache_ptr.dtype.element_ty)
    q_pos = tl.where(row_mask, ctx_len + q_idx, -1)  # an invalid row sees nothing

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    table = block_tables_ptr + seq * stride_bt
    head_off = kv_head * stride_ch + dims[None, :] * stride_cd
    kv_end = tl.minimum(seq_len, ctx_len + (tile + 1) * BLOCK_Q)
    for n in range(0, kv_end, BLOCK_N):
        pos = n + tl.arange(0, BLOCK_N)
        key_mask = pos < kv_end
        page = tl.load(table + pos // BLOCK_SIZE, mask=key_mask, other=0).to(tl.int64)
        kv_off = page[:, None] * stride_cb + (pos % BLOCK_SIZE)[:, None] * stride_co + head_off
        kv_mask = key_mask[:, None] & dim_mask[None, :]
        k = tl.load(k_cache_ptr + kv_off, mask=kv_mask, other=0.0)
        v = tl.load(v_cache_ptr + kv_off, mask=kv_mask, other=0.0)

        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale
        qk = tl.where(pos[None, :] <= q_pos[:, None], qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that saw nothing yet
        p = tl.exp2(qk - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(
        out_ptr + token[:, None] * stride_ot + heads[:, None] * stride_oh + dims[None, :] * stride_od,
        out.to(out_ptr.dtype.element_ty),
        mask=io_mask,
    )


def prefill_attention(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_tables: torch.Tensor,
    max_query_len: int,
    scale: float,
    block_m: int = BLOCK_M,
    block_n: int = BLOCK_N,
) -> torch.Tensor:
    """Causal attention of the ragged ``query`` (``[num_tokens, num_heads,
    head_dim]``, sequence ``i`` owning rows ``query_start_loc[i] :
    query_start_loc[i + 1]``) over the paged cache. ``max_query_len`` is the
    host-side bound that sizes the grid. Rows outside every sequence are
    zeros. Returns a new tensor of ``query``'s shape and dtype."""
    num_tokens, num_heads, head_dim = query.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    num_seqs = seq_lens.shape[0]
    assert k_cache.stride() == v_cache.stride() and block_tables.stride(1) == 1
    out = torch.zeros_like(query)
    if num_tokens == 0 or num_seqs == 0 or max_query_len == 0:
        return out
    group = num_heads // num_kv_heads
    block_m = max(block_m, triton.next_power_of_2(group))
    block_q = block_m // group
    _prefill_kernel[(triton.cdiv(max_query_len, block_q), num_seqs, num_kv_heads)](
        query,
        k_cache,
        v_cache,
        out,
        query_start_loc,
        seq_lens,
        block_tables,
        scale * 1.4426950408889634,  # log2(e): the kernel works in base 2
        *query.stride(),
        *out.stride(),
        *k_cache.stride(),
        block_tables.stride(0),
        GROUP=group,
        HEAD_DIM=head_dim,
        BLOCK_SIZE=block_size,
        BLOCK_Q=block_q,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_D=max(16, triton.next_power_of_2(head_dim)),
        DOT_PRECISION=dot_precision(k_cache.dtype),
        num_warps=NUM_WARPS,
    )
    return out
