"""Rotary position embedding tables, for the neox / HF ``rotate_half``
layout: the two halves of each head are rotated against each other, element
``i`` pairing with ``i + head_dim / 2`` and turning by ``position *
inv_freq[i]``. The rotation itself is the attention backend's, fused with
the KV-cache write (`AttentionBackend.rotary_write_kv`).

The tables take plain numbers (head size, positions, base and the optional
scaling), as nano-vllm's ``get_rope(head_size, max_position, base)``: a layer
knows nothing of the model config it is built from.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class RopeScaling:
    """Llama 3.1-style RoPE frequency scaling (HF ``rope_type: llama3``)."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int


def inverse_frequencies(
    head_dim: int,
    base: float,
    *,
    scaling: RopeScaling | None = None,
    freq_factors: Sequence[float] | None = None,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """[head_dim / 2] float32 for RoPE base ``base``, with llama3 ``scaling`` applied, or each
    frequency divided by its ``freq_factors`` entry (llama.cpp's precomputed form of the same)."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim
    inv_freq = 1.0 / (base**exponents)
    if freq_factors is not None:
        return inv_freq / torch.tensor(freq_factors, dtype=torch.float32, device=device)
    if scaling is None:
        return inv_freq
    # Same arithmetic as transformers' _compute_llama3_parameters.
    old_len = scaling.original_max_position_embeddings
    low_freq_wavelen = old_len / scaling.low_freq_factor
    high_freq_wavelen = old_len / scaling.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / scaling.factor, inv_freq)
    smooth = (old_len / wavelen - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor)
    smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def rope_tables(
    head_dim: int,
    max_position: int,
    base: float,
    *,
    scaling: RopeScaling | None = None,
    freq_factors: Sequence[float] | None = None,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin, each [max_position, head_dim / 2] float32 (see `inverse_frequencies`)."""
    positions = torch.arange(max_position, dtype=torch.float32, device=device)
    inv_freq = inverse_frequencies(head_dim, base, scaling=scaling, freq_factors=freq_factors, device=device)
    angles = torch.outer(positions, inv_freq)
    return angles.cos(), angles.sin()
