"""Triton kernel: store a step's new keys and values into the paged KV cache."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _kv_write_kernel(
    key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
    stride_kt, stride_kh, stride_kd,
    stride_vt, stride_vh, stride_vd,
    stride_cb, stride_co, stride_ch, stride_cd,
    NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Grid ``(num_tokens,)``: one program copies one token's
    ``[num_kv_heads, head_dim]`` key and value tiles to cache slot
    ``slot_mapping[token]`` (block ``slot // BLOCK_SIZE``, offset
    ``slot % BLOCK_SIZE``). A slot of -1 writes no head: every load and
    store is masked off."""
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + token).to(tl.int64)
    heads = tl.arange(0, BLOCK_H)
    dims = tl.arange(0, BLOCK_D)
    heads_to_write = tl.where(slot >= 0, NUM_KV_HEADS, 0)
    mask = (heads[:, None] < heads_to_write) & (dims[None, :] < HEAD_DIM)

    key_off = token * stride_kt + heads[:, None] * stride_kh + dims[None, :] * stride_kd
    value_off = token * stride_vt + heads[:, None] * stride_vh + dims[None, :] * stride_vd
    key = tl.load(key_ptr + key_off, mask=mask)
    value = tl.load(value_ptr + value_off, mask=mask)
    dst = (slot // BLOCK_SIZE) * stride_cb + (slot % BLOCK_SIZE) * stride_co
    dst = dst + heads[:, None] * stride_ch + dims[None, :] * stride_cd
    tl.store(k_cache_ptr + dst, key.to(k_cache_ptr.dtype.element_ty), mask=mask)
    tl.store(v_cache_ptr + dst, value.to(v_cache_ptr.dtype.element_ty), mask=mask)


def write_kv(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Same contract as `engine.attention.torch.write_kv`: ``key``/``value``
    are ``[num_tokens, num_kv_heads, head_dim]``; tokens with slot -1 are skipped.
    ``k_cache`` and ``v_cache`` must share their strides."""
    num_tokens = key.shape[0]
    if num_tokens == 0:
        return
    assert k_cache.stride() == v_cache.stride()
    _, block_size, num_kv_heads, head_dim = k_cache.shape
    _kv_write_kernel[(num_tokens,)](
        key, value, k_cache, v_cache, slot_mapping,
        *key.stride(), *value.stride(), *k_cache.stride(),
        NUM_KV_HEADS=num_kv_heads, HEAD_DIM=head_dim, BLOCK_SIZE=block_size,
        BLOCK_H=triton.next_power_of_2(num_kv_heads), BLOCK_D=triton.next_power_of_2(head_dim),
    )
