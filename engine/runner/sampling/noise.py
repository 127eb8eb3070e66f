"""Counter-based sampling noise: a pure function of (seed, position, token id).

The sampler's exponential race needs one uniform number per (row, token).
Instead of a stateful generator (whose stream depends on how many numbers
were drawn before, i.e. on the batch), each number is a hash of the request's
seed, the position of the token being sampled and the candidate token id, so
a seeded request draws the same noise in any batch, at any row, on any device.

The hash is SplitMix64 (Steele, Lea & Flood 2014; the seeder of xoshiro):
``row_key = mix64(seed + mix64((position + 1) * GAMMA))`` per row, then the
token's number is ``mix64(row_key + (token + 1) * GAMMA)``, the SplitMix64
stream of ``row_key``. Everything is int64 tensor arithmetic: additions and
multiplications wrap modulo 2**64 identically on CPU and CUDA, and logical
right shifts are emulated on signed int64 by masking off the sign-extended
high bits. ``tests/engine/runner/test_sampler.py`` checks the tensors against
a plain-Python version of the same formula.

The top 23 bits of the hash make ``u = (k + 0.5) / 2**23``, exact in float32
and strictly inside (0, 1), so ``-log(u)`` is finite and positive.
"""

from __future__ import annotations

import torch
from torch import Tensor

_U64 = 1 << 64


def as_int64(value: int) -> int:
    """An unsigned 64-bit value (a seed, a constant) as the int64 with the same bits."""
    return value - _U64 if value >= 1 << 63 else value


GAMMA = as_int64(0x9E3779B97F4A7C15)  # SplitMix64 increment (golden ratio)
MIX1 = as_int64(0xBF58476D1CE4E5B9)
MIX2 = as_int64(0x94D049BB133111EB)

UNIFORM_BITS = 23


def _xor_lshr_(x: Tensor, shift: int, scratch: Tensor) -> None:
    """``x ^= x >>> shift`` in place (logical shift on int64 bits)."""
    torch.bitwise_right_shift(x, shift, out=scratch)
    scratch.bitwise_and_((1 << (64 - shift)) - 1)
    x.bitwise_xor_(scratch)


def mix64_(x: Tensor, scratch: Tensor | None = None) -> Tensor:
    """The SplitMix64 finalizer applied in place to an int64 tensor; returns it."""
    if scratch is None:
        scratch = torch.empty_like(x)
    _xor_lshr_(x, 30, scratch)
    x.mul_(MIX1)
    _xor_lshr_(x, 27, scratch)
    x.mul_(MIX2)
    _xor_lshr_(x, 31, scratch)
    return x


def row_keys(seed: Tensor, position: Tensor) -> Tensor:
    """Per-row stream keys [N] int64 from seeds and positions ([N] int64 each)."""
    pos = position.to(torch.int64) + 1
    pos.mul_(GAMMA)
    mix64_(pos)
    key = pos.add_(seed.to(torch.int64))
    return mix64_(key)


def token_offsets(vocab_size: int, device: torch.device | str) -> Tensor:
    """``(token + 1) * GAMMA`` for every token id, [V] int64."""
    offsets = torch.arange(1, vocab_size + 1, dtype=torch.int64, device=device)
    return offsets.mul_(GAMMA)


def random_bits(keys: Tensor, offsets: Tensor) -> Tensor:
    """The raw 64-bit hashes [N, V] int64 of every (row key, token offset)."""
    bits = keys[:, None] + offsets[None, :]
    return mix64_(bits)


def exponential(keys: Tensor, offsets: Tensor) -> Tensor:
    """Standard exponential noise ``-log(u)`` [N, V] float32, u uniform in (0, 1)."""
    return _exponential_of_bits(random_bits(keys, offsets))


def exponential_at(keys: Tensor, offsets: Tensor, rows: Tensor, tokens: Tensor) -> Tensor:
    """`exponential`'s values at the pairs (``rows[i]``, ``tokens[i]``) only, [len(rows)] float32:
    the same element-wise operations on the same numbers, so the same bits."""
    bits = keys[rows] + offsets[tokens]
    return _exponential_of_bits(mix64_(bits))


def _exponential_of_bits(bits: Tensor) -> Tensor:
    """``-log(u)`` from raw 64-bit hashes (consumed), u from their top `UNIFORM_BITS` bits."""
    bits.bitwise_right_shift_(64 - UNIFORM_BITS).bitwise_and_((1 << UNIFORM_BITS) - 1)
    noise = bits.to(torch.float32)
    del bits
    noise.add_(0.5).mul_(2.0**-UNIFORM_BITS)
    return noise.log_().neg_()
