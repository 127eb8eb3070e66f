"""RoPE and the KV-cache write in plain torch: the CPU path and the reference the Triton kernel
(`engine.kernels.rotary_kv`) is tested against. `TorchAttentionBackend` (`engine.attention.torch`)
works the factors and slots out once a step and reuses them in every layer."""

from __future__ import annotations

from typing import NamedTuple

import torch


def write_kv(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Scatter a step's keys/values into their cache slots (slot -1 = skip)."""
    write_kv_at(key, value, k_cache, v_cache, KvSlots.of(slot_mapping))


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` [tokens, heads, head_dim] by ``cos``/``sin`` [tokens,
    head_dim / 2] (rows of `engine.layers.rope.rope_tables` gathered at the
    tokens' positions), neox layout: element ``i`` pairs with ``i +
    head_dim / 2``. Computed in float32, returned in ``x``'s dtype."""
    return rotate(x, *rope_factors(cos, sin))


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
    """RoPE on the query and the keys, the keys and values stored at their
    slots; returns the rotated query (see `AttentionBackend.rotary_write_kv`)."""
    cos_full, sin_signed = rope_factors(cos, sin)
    write_kv_at(rotate(key, cos_full, sin_signed), value, k_cache, v_cache, KvSlots.of(slot_mapping))
    return rotate(query, cos_full, sin_signed)


def rope_factors(cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos``/``sin`` [tokens, head_dim / 2] → [tokens, 1, head_dim] float32 factors ``(cos | cos)``
    and ``(-sin | sin)``: the rotation is then ``x * cos_full + swap_halves(x) * sin_signed``."""
    return torch.cat((cos, cos), -1)[:, None, :], torch.cat((-sin, sin), -1)[:, None, :]


def rotate(x: torch.Tensor, cos_full: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """`apply_rope` with the factors of `rope_factors`, in few operator calls (it runs twice a
    layer on the CPU's eager path): one float32 copy, the halves swapped by a flip, a multiply and
    an ``addcmul`` in place, one copy back."""
    xf = torch.empty(x.shape, dtype=torch.float32, device=x.device).copy_(x)
    swapped = xf.view(*x.shape[:-1], 2, x.shape[-1] // 2).flip(-2).view(x.shape)
    return torch.empty(x.shape, dtype=x.dtype, device=x.device).copy_(xf.mul_(cos_full).addcmul_(swapped, sin_signed))


class KvSlots(NamedTuple):
    """Where a step's keys and values go: ``slots`` [n] int64, and ``rows`` (a boolean mask of the
    step's tokens) when some tokens have slot -1 (padding) and are skipped; None when all are written."""

    slots: torch.Tensor
    rows: torch.Tensor | None

    @classmethod
    def of(cls, slot_mapping: torch.Tensor) -> KvSlots:
        valid = slot_mapping >= 0
        if bool(valid.all()):
            return cls(slot_mapping, None)
        return cls(slot_mapping[valid], valid)


def write_kv_at(
    key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, at: KvSlots
) -> None:
    for new, cache in ((key, k_cache), (value, v_cache)):
        new = new if at.rows is None else new[at.rows]
        cache.view(-1, *cache.shape[2:]).index_copy_(
            0, at.slots, new if new.dtype == cache.dtype else new.to(cache.dtype)
        )
