"""Quantized linear weights as the model holds them before packing for a kernel.

Two forms, each exact for what it stores:

- `Int4Groups`: 4-bit codes in groups of 32 along the input dimension, each
  group with a float32 scale and offset: ``w = code * scale + offset``. The
  GGUF block types map onto it without rounding anything (`engine.loaders.
  gguf_blocks`); a weight that is not quantized yet is quantized into it by
  `quantize_int4`. An 8-bit code (Q8_0) is stored as two 4-bit groups, its
  high and low nibbles, fed the same 32 inputs (``repeat = 2``).
- `Int8Channels`: int8 codes with one float32 scale per output row,
  ``w = code * scale`` (`quantize_int8`).

Both dequantize exactly (in float32, as the GGUF reference does) and keep
their rows in order, so the loaders can permute and concatenate them the way
they do dense weights (`permute_rows`, `cat_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

GROUP_SIZE = 32


@dataclass(frozen=True)
class Int4Groups:
    """``codes`` uint8 [N, K * repeat] in 0..15; ``scales`` and ``offsets``
    float32 [N, K * repeat / 32]. Input feature ``k`` feeds code columns
    ``g * 32 * repeat + r * 32 + k % 32`` for ``g = k // 32`` and each ``r <
    repeat``; the weight is the sum of what those codes dequantize to."""

    codes: Tensor
    scales: Tensor
    offsets: Tensor
    repeat: int = 1
    source: str = "int4"  # what the codes came from: a GGUF type name, or "int4"

    @property
    def shape(self) -> tuple[int, int]:
        return self.codes.shape[0], self.codes.shape[1] // self.repeat

    def dequantize(self) -> Tensor:
        """float32 [N, K]: what the codes stand for, rounded once to float32."""
        n, width = self.codes.shape
        grouped = self.codes.view(n, -1, GROUP_SIZE).float() * self.scales[..., None] + self.offsets[..., None]
        if self.repeat > 1:  # parts that are each exact in float32 and sum exactly (Q8_0's nibbles)
            grouped = grouped.view(n, -1, self.repeat, GROUP_SIZE).sum(2)
        return grouped.reshape(n, width // self.repeat)

    def take_rows(self, index: Tensor) -> Int4Groups:
        return Int4Groups(self.codes[index], self.scales[index], self.offsets[index], self.repeat, self.source)


@dataclass(frozen=True)
class Int8Channels:
    """``codes`` int8 [N, K]; ``scales`` float32 [N]."""

    codes: Tensor
    scales: Tensor
    source: str = "int8"

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.codes.shape)

    def dequantize(self) -> Tensor:
        return self.codes.float() * self.scales[:, None]

    def take_rows(self, index: Tensor) -> Int8Channels:
        return Int8Channels(self.codes[index], self.scales[index], self.source)


QuantizedWeight = Int4Groups | Int8Channels


def permute_rows(weight: Tensor | QuantizedWeight, index: Tensor) -> Tensor | QuantizedWeight:
    """``weight[index]`` for a dense or a quantized weight."""
    return weight[index] if isinstance(weight, Tensor) else weight.take_rows(index)


def cat_rows(parts: list[Tensor | QuantizedWeight], dtype: torch.dtype) -> Tensor | QuantizedWeight:
    """Stack weights along their output rows. Quantized parts of one form
    stay quantized; a mix (say a Q6_K part among Q4_K ones) is dequantized to
    ``dtype`` as a whole, which keeps every value exact."""
    first = parts[0]
    if isinstance(first, Int4Groups) and all(isinstance(p, Int4Groups) and p.repeat == first.repeat for p in parts):
        sources = sorted({p.source for p in parts})
        return Int4Groups(
            torch.cat([p.codes for p in parts]),
            torch.cat([p.scales for p in parts]),
            torch.cat([p.offsets for p in parts]),
            first.repeat,
            "+".join(sources),
        )
    if isinstance(first, Int8Channels) and all(isinstance(p, Int8Channels) for p in parts):
        return Int8Channels(torch.cat([p.codes for p in parts]), torch.cat([p.scales for p in parts]), first.source)
    return torch.cat([as_dense(p, dtype) for p in parts])


def as_dense(weight: Tensor | QuantizedWeight, dtype: torch.dtype) -> Tensor:
    return weight.to(dtype) if isinstance(weight, Tensor) else weight.dequantize().to(dtype)


def quantize_int4(weight: Tensor, scale_dtype: torch.dtype = torch.bfloat16) -> Int4Groups:
    """Asymmetric 4-bit groups of 32 (min to max, like GGUF's Q4_1) for a
    dense [N, K] weight. Scales and offsets are chosen already rounded to
    ``scale_dtype`` (what the kernel reads), and the codes against those
    rounded values, so the kernel adds no rounding of its own."""
    n, k = weight.shape
    if k % GROUP_SIZE:
        raise ValueError(f"int4 groups need in_features divisible by {GROUP_SIZE}, got {k}")
    groups = weight.float().view(n, k // GROUP_SIZE, GROUP_SIZE)
    low, high = groups.amin(-1), groups.amax(-1)
    scales = ((high - low) / 15).to(scale_dtype).float()
    scales = torch.where(scales > 0, scales, torch.ones_like(scales))
    # The kernel computes (code - 8) * scale + zero with zero = offset + 8 * scale.
    zeros = (low + 8 * scales).to(scale_dtype).float()
    offsets = zeros - 8 * scales
    codes = torch.round((groups - offsets[..., None]) / scales[..., None]).clamp(0, 15).to(torch.uint8)
    return Int4Groups(codes.view(n, k), scales, offsets)


def quantize_int8(weight: Tensor, scale_dtype: torch.dtype = torch.bfloat16) -> Int8Channels:
    """Symmetric int8 with one scale per output row (rounded to
    ``scale_dtype`` before the codes are chosen)."""
    dense = weight.float()
    scales = (dense.abs().amax(1) / 127).to(scale_dtype).float()
    scales = torch.where(scales > 0, scales, torch.ones_like(scales))
    codes = torch.round(dense / scales[:, None]).clamp(-128, 127).to(torch.int8)
    return Int8Channels(codes, scales)
