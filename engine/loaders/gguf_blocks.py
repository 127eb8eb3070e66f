"""GGUF quantized blocks as `Int4Groups`, value for value.

Every type here has groups of 32 weights with a scale and an offset that are
exact in float32, and 4-bit codes (Q8_0's 8-bit codes are split into two
4-bit groups), so the file's weights reach the kernel without a second
rounding of their codes. Block layouts follow ggml (and `gguf.quants`):

- Q4_0: fp16 ``d``, 16 bytes of nibbles; ``w = d * (q - 8)``.
- Q4_1: fp16 ``d``, fp16 ``m``, 16 bytes; ``w = d * q + m``.
- Q8_0: fp16 ``d``, 32 int8; ``w = d * q = 16d * (q >> 4) + d * (q & 15)``.
- Q4_K: super-blocks of 256: fp16 ``d`` and ``dmin``, eight 6-bit scales and
  mins, 128 bytes; ``w = d * sc * q - dmin * mn`` per group of 32.

In every block of 32 nibbles, the low nibbles of the 16 bytes are weights
0-15 and the high nibbles weights 16-31 (Q4_K: per 64 weights, the low
nibbles of 32 bytes, then their high nibbles).
"""

from __future__ import annotations

import gguf
import numpy as np
import torch

from agentgate.engine.layers.quantized import GROUP_SIZE, Int4Groups

Q = gguf.GGMLQuantizationType
INT4_TYPES = frozenset({Q.Q4_0, Q.Q4_1, Q.Q4_K, Q.Q8_0})
# Bits per weight of each type the int4 path keeps (with its scales).
CODE_BITS = {Q.Q4_0: 4, Q.Q4_1: 4, Q.Q4_K: 4, Q.Q8_0: 8}


def decode(raw: np.ndarray, qtype: Q, rows: int) -> Int4Groups:
    """The ``rows`` rows of a tensor's raw blocks (uint8, any shape) as
    `Int4Groups`; ``qtype`` must be in `INT4_TYPES`."""
    data = np.ascontiguousarray(raw).reshape(rows, -1)
    if qtype == Q.Q4_0:
        d, nibbles = _split(data, 18, [2])
        scale = _f16(d)
        return _groups(_nibbles(nibbles), scale, -8 * scale, "Q4_0")
    if qtype == Q.Q4_1:
        d, m, nibbles = _split(data, 20, [2, 4])
        return _groups(_nibbles(nibbles), _f16(d), _f16(m), "Q4_1")
    if qtype == Q.Q8_0:
        d, values = _split(data, 34, [2])
        q = values.view(np.int8)
        high = ((q >> 4) + 8).astype(np.uint8)  # arithmetic shift: -8..7, stored 0..15
        low = (q & 0x0F).astype(np.uint8)
        codes = np.stack([high, low], axis=2)  # [rows, blocks, 2, 32]
        scale = _f16(d)[..., None]
        scales = np.concatenate([16 * scale, scale], axis=-1)  # [rows, blocks, 2]
        offsets = np.concatenate([-128 * scale, np.zeros_like(scale)], axis=-1)
        return _groups(codes, scales, offsets, "Q8_0", repeat=2)
    if qtype == Q.Q4_K:
        d, dmin, packed_scales, nibbles = _split(data, 144, [2, 4, 16])
        blocks = packed_scales.reshape(-1, 12)
        sc, mn = gguf.quants.Q4_K.get_scale_min(blocks)
        sc = sc.reshape(*d.shape[:2], 8).astype(np.float32)
        mn = mn.reshape(*d.shape[:2], 8).astype(np.float32)
        chunks = nibbles.reshape(*nibbles.shape[:2], 4, 32)  # 4 chunks of 64 weights
        codes = np.stack([chunks & 0x0F, chunks >> 4], axis=3)  # [rows, supers, 4, 2, 32]
        return _groups(codes, _f16(d)[..., None] * sc, -(_f16(dmin)[..., None] * mn), "Q4_K")
    raise ValueError(f"{qtype.name} has no int4 form")


# Bytes per block of 32 weights of the types `dense` dequantizes itself.
_DENSE_BLOCK_BYTES = {Q.Q4_0: 18, Q.Q4_1: 20, Q.Q8_0: 34}


def dense(raw: np.ndarray, qtype: Q, shape: tuple[int, ...]) -> torch.Tensor | None:
    """A tensor's raw blocks (uint8) dequantized to float32 of ``shape`` (numpy order), bit for bit
    what ``gguf.quants.dequantize`` gives (the same float32 operations in the same order), over the
    whole tensor at once instead of its loop over groups of rows: ~2 s less of a float32 start of
    the default model. In numpy, not torch: numpy runs on one thread, while torch's elementwise ops
    at two threads beside a busy neighbour waited at their barriers (0.8 s became 9-20 s here).
    None for the types it does not cover (the caller uses ``gguf.quants``)."""
    block_bytes = _DENSE_BLOCK_BYTES.get(qtype)
    if block_bytes is None:
        return None
    blocks = np.ascontiguousarray(raw).reshape(-1, block_bytes)
    d = _f16(blocks[:, None, :2])  # [blocks, 1]
    if qtype == Q.Q8_0:
        out = blocks[:, 2:].view(np.int8).astype(np.float32) * d
    elif qtype == Q.Q4_0:
        out = d * (_nibbles(blocks[:, None, 2:])[:, 0].astype(np.int8) - np.int8(8)).astype(np.float32)
    else:  # Q4_1
        m = _f16(blocks[:, None, 2:4])
        out = (d * _nibbles(blocks[:, None, 4:])[:, 0].astype(np.float32)) + m
    return torch.from_numpy(out.reshape(shape))


def _split(data: np.ndarray, block_bytes: int, cuts: list[int]) -> list[np.ndarray]:
    """Per-block fields: [rows, blocks, bytes] arrays cut at ``cuts``."""
    blocks = data.reshape(data.shape[0], -1, block_bytes)
    return np.split(blocks, cuts, axis=2)


def _f16(field: np.ndarray) -> np.ndarray:
    """A 2-byte field as float32 [rows, blocks] (exact)."""
    return np.ascontiguousarray(field).view(np.float16)[..., 0].astype(np.float32)


def _nibbles(field: np.ndarray) -> np.ndarray:
    """16 bytes per block -> 32 codes: low nibbles first, then high."""
    return np.concatenate([field & 0x0F, field >> 4], axis=2)


def _groups(codes: np.ndarray, scales: np.ndarray, offsets: np.ndarray, source: str, repeat: int = 1) -> Int4Groups:
    rows = codes.shape[0]
    return Int4Groups(
        torch.from_numpy(np.ascontiguousarray(codes, dtype=np.uint8).reshape(rows, -1)),
        torch.from_numpy(np.ascontiguousarray(scales, dtype=np.float32).reshape(rows, -1)),
        torch.from_numpy(np.ascontiguousarray(offsets, dtype=np.float32).reshape(rows, -1)),
        repeat,
        source,
    )


assert GROUP_SIZE == 32, "GGUF blocks and sub-blocks hold 32 weights"
