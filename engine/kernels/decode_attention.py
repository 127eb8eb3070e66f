"""Triton split-K (flash-decoding) attention for one query token per sequence.

Phase 1 splits every sequence's context into ``num_splits`` spans; a program
attends the GQA group of one (sequence, kv head) over one span and leaves a
normalised partial output with its log-sum-exp. Phase 2 merges the spans.
The grid depends only on tensor shapes and ``num_splits`` (never on the
context lengths, which are read on the device), so the pair can be captured
in a CUDA graph and replayed with other ``seq_lens`` and block tables.
``num_splits`` is a runtime argument, not a compile-time constant: each
kernel compiles once per model shape, whatever split counts the batch sizes
and context bounds call for (a constexpr compiled both kernels again for
every new count: eight times while capturing the graphs, and every 64 tokens
of context in eager decode).

Both matrix products take their operands in the cache dtype (fp16/bf16
tensor cores) and accumulate in fp32; the softmax runs in fp32, in base 2.
A float32 cache's products are full fp32 (``input_precision="ieee"``), not
TF32, so they match the CPU's.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from agentgate.engine.kernels import dot_precision

BLOCK_N = 64  # keys per inner tile
MAX_SPLITS = 64  # bounds the merge kernel's [splits, head_dim] tile


@triton.jit(do_not_specialize=["num_splits"])
def _decode_split_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    seq_lens_ptr,
    block_tables_ptr,
    part_out_ptr,
    part_lse_ptr,
    qk_scale,
    num_splits,
    stride_qt,
    stride_qh,
    stride_qd,
    stride_cb,
    stride_co,
    stride_ch,
    stride_cd,
    stride_bt,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """Grid ``(num_seqs, num_kv_heads, num_splits)``.

    The program for (seq, kv head g, split s) holds the ``GROUP`` query heads
    ``g * GROUP ...`` as the rows of a ``[BLOCK_H, BLOCK_D]`` tile (padded to
    16 rows for ``tl.dot``) and walks its span ``BLOCK_N`` keys at a time,
    each key's page looked up in the block table. Spans are
    ``ceil(seq_len / num_splits)`` rounded up to ``BLOCK_N``; a span past the
    end (or any span of a seq_len-0 row) writes lse = -inf and zeros.
    Partials: out ``[num_seqs, num_heads, num_splits, HEAD_DIM]`` (fp32,
    normalised), lse ``[num_seqs, num_heads, num_splits]`` (fp32, base 2).
    """
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)

    seq_len = tl.load(seq_lens_ptr + seq)
    span = tl.cdiv(tl.cdiv(seq_len, num_splits), BLOCK_N) * BLOCK_N
    start = split * span
    end = tl.minimum(start + span, seq_len)

    rows = tl.arange(0, BLOCK_H)
    dims = tl.arange(0, BLOCK_D)
    heads = kv_head * GROUP + rows
    row_mask = rows < GROUP
    dim_mask = dims < HEAD_DIM
    q = tl.load(
        q_ptr + seq * stride_qt + heads[:, None] * stride_qh + dims[None, :] * stride_qd,
        mask=row_mask[:, None] & dim_mask[None, :],
        other=0.0,
    ).to(k_cache_ptr.dtype.element_ty)

    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)
    table = block_tables_ptr + seq * stride_bt
    head_off = kv_head * stride_ch + dims[None, :] * stride_cd
    for n in range(start, end, BLOCK_N):
        pos = n + tl.arange(0, BLOCK_N)
        key_mask = pos < end
        page = tl.load(table + pos // BLOCK_SIZE, mask=key_mask, other=0).to(tl.int64)
        kv_off = page[:, None] * stride_cb + (pos % BLOCK_SIZE)[:, None] * stride_co + head_off
        kv_mask = key_mask[:, None] & dim_mask[None, :]
        k = tl.load(k_cache_ptr + kv_off, mask=kv_mask, other=0.0)
        v = tl.load(v_cache_ptr + kv_off, mask=kv_mask, other=0.0)

        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale
        qk = tl.where(key_mask[None, :], qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp2(qk - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    lse = m_i + tl.log2(l_i)  # -inf for an empty span
    part = (seq * (GROUP * tl.num_programs(1)) + heads) * num_splits + split
    tl.store(part_lse_ptr + part, lse, mask=row_mask)
    tl.store(
        part_out_ptr + part[:, None] * HEAD_DIM + dims[None, :],
        out,
        mask=row_mask[:, None] & dim_mask[None, :],
    )


@triton.jit(do_not_specialize=["num_splits"])
def _decode_merge_kernel(
    part_out_ptr,
    part_lse_ptr,
    out_ptr,
    num_splits,
    stride_ot,
    stride_oh,
    stride_od,
    HEAD_DIM: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Grid ``(num_seqs, num_heads)``: one program weighs its head's
    ``num_splits`` (at most ``BLOCK_S``) partial outputs by
    ``exp2(lse - max lse)``. A head with no context (every lse -inf) gets
    zeros."""
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    splits = tl.arange(0, BLOCK_S)
    dims = tl.arange(0, BLOCK_D)
    split_mask = splits < num_splits
    dim_mask = dims < HEAD_DIM

    row = (seq * tl.num_programs(1) + head) * num_splits + splits
    lse = tl.load(part_lse_ptr + row, mask=split_mask, other=float("-inf"))
    lse_max = tl.max(lse, 0)
    weight = tl.exp2(lse - tl.where(lse_max == float("-inf"), 0.0, lse_max))
    part = tl.load(
        part_out_ptr + row[:, None] * HEAD_DIM + dims[None, :],
        mask=split_mask[:, None] & dim_mask[None, :],
        other=0.0,
    )
    total = tl.sum(weight, 0)
    out = tl.sum(part * weight[:, None], 0) / tl.where(total > 0, total, 1.0)
    tl.store(
        out_ptr + seq * stride_ot + head * stride_oh + dims * stride_od,
        out.to(out_ptr.dtype.element_ty),
        mask=dim_mask,
    )


@functools.cache
def _target_programs(device: torch.device) -> int:
    """Phase-1 programs that keep the device busy: four per SM on a GPU; a
    handful under the interpreter, where programs run one after another."""
    if device.type == "cuda":
        return 4 * torch.cuda.get_device_properties(device).multi_processor_count
    return 8


def num_splits_for(num_seqs: int, num_kv_heads: int, max_context: int, device: torch.device) -> int:
    """Enough splits to fill the device, at most one per ``BLOCK_N`` keys of
    ``max_context`` (a fixed bound such as the block-table width times the
    block size, never this step's longest context), at most ``MAX_SPLITS``."""
    wanted = triton.cdiv(_target_programs(device), max(1, num_seqs * num_kv_heads))
    return max(1, min(wanted, triton.cdiv(max_context, BLOCK_N), MAX_SPLITS))


def decode_attention(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    seq_lens: torch.Tensor,
    block_tables: torch.Tensor,
    scale: float,
    num_splits: int,
    block_n: int = BLOCK_N,
) -> torch.Tensor:
    """Attention of one query per sequence (``query`` ``[num_seqs, num_heads,
    head_dim]``, row ``i`` of sequence ``i``) over its first ``seq_lens[i]``
    cached positions, split ``num_splits`` ways. Rows with seq_len 0 are
    zeros. Returns a new tensor of ``query``'s shape and dtype.

    The fp32 split partials are allocated per call: eagerly that is a
    caching-allocator hit; under CUDA-graph capture they come from the
    graph's private pool and keep their addresses on every replay."""
    num_seqs, num_heads, head_dim = query.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    assert k_cache.stride() == v_cache.stride() and block_tables.stride(1) == 1
    assert 1 <= num_splits <= MAX_SPLITS, num_splits
    out = torch.empty_like(query)
    if num_seqs == 0:
        return out
    fp32 = dict(dtype=torch.float32, device=query.device)
    part_out = torch.empty(num_seqs, num_heads, num_splits, head_dim, **fp32)
    part_lse = torch.empty(num_seqs, num_heads, num_splits, **fp32)
    block_d = max(16, triton.next_power_of_2(head_dim))
    _decode_split_kernel[(num_seqs, num_kv_heads, num_splits)](
        query,
        k_cache,
        v_cache,
        seq_lens,
        block_tables,
        part_out,
        part_lse,
        scale * 1.4426950408889634,  # log2(e): the kernel works in base 2
        num_splits,
        *query.stride(),
        *k_cache.stride(),
        block_tables.stride(0),
        GROUP=num_heads // num_kv_heads,
        HEAD_DIM=head_dim,
        BLOCK_SIZE=block_size,
        BLOCK_H=max(16, triton.next_power_of_2(num_heads // num_kv_heads)),
        BLOCK_N=block_n,
        BLOCK_D=block_d,
        DOT_PRECISION=dot_precision(k_cache.dtype),
    )
    _decode_merge_kernel[(num_seqs, num_heads)](
        part_out,
        part_lse,
        out,
        num_splits,
        *out.stride(),
        HEAD_DIM=head_dim,
        BLOCK_S=MAX_SPLITS,
        BLOCK_D=block_d,
    )
    return out
