"""Rotary position embedding tables, for the neox / HF ``rotate_half``
layout: the two halves of each head are rotated against each other, element
``i`` pairing with ``i + head_dim / 2`` and turning by ``position *
inv_freq[i]``. The rotation itself is the attention backend's, fused with
the KV-cache write (`AttentionBackend.rotary_write_kv`).
"""

from __future__ import annotations

import math

import torch

from agentgate.engine.models.config import ModelConfig


def inverse_frequencies(config: ModelConfig, device: torch.device | str = "cpu") -> torch.Tensor:
    """[head_dim / 2] float32, with llama3 scaling applied when configured."""
    dim = config.head_dim
    exponents = torch.arange(0, dim, 2, dtype=torch.int64, device=device).float() / dim
    inv_freq = 1.0 / (config.rope_theta**exponents)
    if config.rope_freq_factors is not None:
        return inv_freq / torch.tensor(config.rope_freq_factors, dtype=torch.float32, device=device)
    scaling = config.rope_scaling
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


def rope_tables(config: ModelConfig, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin, each [max_position_embeddings, head_dim / 2] float32."""
    positions = torch.arange(config.max_position_embeddings, dtype=torch.float32, device=device)
    angles = torch.outer(positions, inverse_frequencies(config, device))
    return angles.cos(), angles.sin()
