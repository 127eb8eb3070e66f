"""Triton kernel: rotary position embeddings on a step's queries and keys,
fused with storing the keys and values into the paged KV cache. One launch
replaces the reference's two RoPEs (nine ops each) and the cache scatter
(`engine.attention.torch_rotary.rotary_write_kv`: the same contract and roundings).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rotary_kv_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    cos_ptr,
    sin_ptr,
    k_cache_ptr,
    v_cache_ptr,
    slot_ptr,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_ct,
    stride_cb,
    stride_co,
    stride_ch,
    NUM_HEADS: tl.constexpr,
    NUM_KV_HEADS: tl.constexpr,
    HALF: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_HQ: tl.constexpr,
    BLOCK_HK: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
):
    """Grid ``(num_tokens,)``. The program of token t rotates its query
    heads in place (element ``i`` of a head pairs with ``i + HALF``, neox
    layout), rotates its key heads, and stores keys and values at cache slot
    ``slot_mapping[t]`` (block ``slot // BLOCK_SIZE``, offset ``slot %
    BLOCK_SIZE``); slot -1 (padding) stores nothing. The rotation runs in
    fp32 and is rounded to the input's dtype, then to the cache's."""
    token = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, BLOCK_HALF)
    in_half = j < HALF
    cos = tl.load(cos_ptr + token * stride_ct + j, mask=in_half, other=0.0).to(tl.float32)[None, :]
    sin = tl.load(sin_ptr + token * stride_ct + j, mask=in_half, other=0.0).to(tl.float32)[None, :]

    q_heads = tl.arange(0, BLOCK_HQ)
    q_mask = (q_heads < NUM_HEADS)[:, None] & in_half[None, :]
    q_at = q_ptr + token * stride_qt + q_heads[:, None] * stride_qh + j[None, :]
    q1 = tl.load(q_at, mask=q_mask, other=0.0).to(tl.float32)
    q2 = tl.load(q_at + HALF, mask=q_mask, other=0.0).to(tl.float32)
    tl.store(q_at, (q1 * cos - q2 * sin).to(q_ptr.dtype.element_ty), mask=q_mask)
    tl.store(q_at + HALF, (q2 * cos + q1 * sin).to(q_ptr.dtype.element_ty), mask=q_mask)

    slot = tl.load(slot_ptr + token).to(tl.int64)
    kv_heads = tl.arange(0, BLOCK_HK)
    heads_to_write = tl.where(slot >= 0, NUM_KV_HEADS, 0)
    kv_mask = (kv_heads < heads_to_write)[:, None] & in_half[None, :]
    k_at = k_ptr + token * stride_kt + kv_heads[:, None] * stride_kh + j[None, :]
    v_at = v_ptr + token * stride_vt + kv_heads[:, None] * stride_vh + j[None, :]
    k1 = tl.load(k_at, mask=kv_mask, other=0.0).to(tl.float32)
    k2 = tl.load(k_at + HALF, mask=kv_mask, other=0.0).to(tl.float32)
    v1 = tl.load(v_at, mask=kv_mask, other=0.0)
    v2 = tl.load(v_at + HALF, mask=kv_mask, other=0.0)
    dst = (
        (slot // BLOCK_SIZE) * stride_cb + (slot % BLOCK_SIZE) * stride_co + kv_heads[:, None] * stride_ch + j[None, :]
    )
    k_type, cache_type = k_ptr.dtype.element_ty, k_cache_ptr.dtype.element_ty
    tl.store(k_cache_ptr + dst, (k1 * cos - k2 * sin).to(k_type).to(cache_type), mask=kv_mask)
    tl.store(k_cache_ptr + dst + HALF, (k2 * cos + k1 * sin).to(k_type).to(cache_type), mask=kv_mask)
    tl.store(v_cache_ptr + dst, v1.to(v_cache_ptr.dtype.element_ty), mask=kv_mask)
    tl.store(v_cache_ptr + dst + HALF, v2.to(v_cache_ptr.dtype.element_ty), mask=kv_mask)


def rotary_write_kv(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> torch.Tensor:
    """``query`` ``[T, H, D]``, ``key``/``value`` ``[T, KVH, D]`` (views of
    one QKV projection are fine: only the last dim must be contiguous),
    ``cos``/``sin`` ``[T, D / 2]``. Rotates ``query`` in place and returns
    it; stores the rotated keys and the values in the cache (``[num_blocks,
    block_size, KVH, D]``, contiguous in D, shared strides)."""
    num_tokens, num_heads, head_dim = query.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    assert head_dim % 2 == 0 and k_cache.stride() == v_cache.stride() and k_cache.stride(-1) == 1
    assert query.stride(-1) == key.stride(-1) == value.stride(-1) == 1 and cos.stride() == sin.stride()
    if num_tokens == 0:
        return query
    half = head_dim // 2
    _rotary_kv_kernel[(num_tokens,)](
        query,
        key,
        value,
        cos,
        sin,
        k_cache,
        v_cache,
        slot_mapping,
        query.stride(0),
        query.stride(1),
        key.stride(0),
        key.stride(1),
        value.stride(0),
        value.stride(1),
        cos.stride(0),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        NUM_HEADS=num_heads,
        NUM_KV_HEADS=num_kv_heads,
        HALF=half,
        BLOCK_SIZE=block_size,
        BLOCK_HQ=triton.next_power_of_2(num_heads),
        BLOCK_HK=triton.next_power_of_2(num_kv_heads),
        BLOCK_HALF=triton.next_power_of_2(half),
    )
    return query
