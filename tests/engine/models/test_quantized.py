"""Quantized weights: GGUF blocks mapped exactly, packed for the CPU kernels
without losing a code, and the default model's logits and greedy answers
against the dequantized reference."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch

from agentgate.engine.layers.quant_linear import (
    Int4Linear,
    Int8Linear,
    int4_scale_and_zero,
    kernel_error,
    kernels_work,
)
from agentgate.engine.layers.quantized import GROUP_SIZE, Int4Groups, cat_rows, quantize_int4, quantize_int8
from agentgate.engine.loaders import load_model
from agentgate.engine.loaders import quantization as quant
from agentgate.engine.loaders.gguf_blocks import decode, dense
from tests.engine.models.test_default_model import PROMPT

Q = gguf.GGMLQuantizationType
ROWS, COLS = 64, 512

pytestmark = pytest.mark.skipif(not kernels_work(), reason="no CPU weight-only kernels in this torch build")


def file_blocks(qtype: Q, seed: int = 0) -> np.ndarray:
    """[ROWS, bytes] of blocks as a GGUF file holds them: quantized by the
    gguf package where it can, random bytes with sane fp16 scales for Q4_K
    (every bit pattern of its codes and 6-bit scales is valid)."""
    rng = np.random.default_rng(seed)
    if qtype != Q.Q4_K:
        return gguf.quants.quantize(rng.standard_normal((ROWS, COLS), dtype=np.float32), qtype)
    block_bytes = gguf.GGML_QUANT_SIZES[qtype][1]
    blocks = rng.integers(0, 256, (ROWS, COLS // 256, block_bytes), dtype=np.uint8)
    halves = rng.uniform(1e-3, 1e-1, (ROWS, COLS // 256, 2)).astype(np.float16)  # d, dmin
    blocks[..., :4] = halves.view(np.uint8).reshape(ROWS, COLS // 256, 4)
    return blocks.reshape(ROWS, -1)


def encode_like_gguf(groups: Int4Groups, qtype: Q) -> np.ndarray:
    """The inverse of `decode` for the types whose fields it keeps as they are."""
    codes = groups.codes.numpy().reshape(ROWS, -1, GROUP_SIZE)
    nibbles = codes[..., :16] | (codes[..., 16:] << 4)

    def f16(values: torch.Tensor) -> np.ndarray:
        return values.numpy().astype(np.float16)[..., None].view(np.uint8)

    if qtype == Q.Q4_0:
        assert torch.equal(groups.offsets, -8 * groups.scales)
        return np.concatenate([f16(groups.scales), nibbles], axis=-1).reshape(ROWS, -1)
    if qtype == Q.Q4_1:
        return np.concatenate([f16(groups.scales), f16(groups.offsets), nibbles], axis=-1).reshape(ROWS, -1)
    assert qtype == Q.Q8_0
    pairs = codes.astype(np.int16).reshape(ROWS, -1, 2, GROUP_SIZE)
    values = ((pairs[:, :, 0] - 8) * 16 + pairs[:, :, 1]).astype(np.int8).view(np.uint8)
    scales = groups.scales.view(ROWS, -1, 2)
    assert torch.equal(scales[..., 0], 16 * scales[..., 1])
    return np.concatenate([f16(scales[..., 1]), values], axis=-1).reshape(ROWS, -1)


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q4_1, Q.Q4_K, Q.Q8_0])
def test_gguf_blocks_decode_to_the_files_values(qtype):
    raw = file_blocks(qtype)
    groups = decode(raw, qtype, ROWS)
    reference = torch.from_numpy(gguf.quants.dequantize(raw, qtype))
    assert groups.shape == (ROWS, COLS)
    assert groups.codes.max() <= 15
    assert torch.equal(groups.dequantize(), reference)  # bit for bit, as the gguf package computes them


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q4_1, Q.Q8_0])
def test_dense_dequantizes_bit_for_bit_as_the_gguf_package(qtype):
    """The loader's own dequantization (float32 starts) against ``gguf.quants``, every weight's bits."""
    raw = file_blocks(qtype, seed=3)
    ours = dense(raw, qtype, (ROWS // 4, 4, COLS))
    reference = gguf.quants.dequantize(raw, qtype).reshape(ROWS // 4, 4, COLS)
    assert ours.dtype == torch.float32
    assert np.array_equal(ours.numpy().view(np.uint32), reference.view(np.uint32))


def test_dense_leaves_the_types_it_does_not_cover_to_the_gguf_package():
    assert dense(file_blocks(Q.Q4_K), Q.Q4_K, (ROWS, COLS)) is None


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q4_1, Q.Q8_0])
def test_gguf_blocks_round_trip_to_the_same_bytes(qtype):
    raw = file_blocks(qtype, seed=1)
    assert np.array_equal(encode_like_gguf(decode(raw, qtype, ROWS), qtype), raw)


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q4_1, Q.Q4_K, Q.Q8_0])
def test_packing_for_the_kernel_keeps_every_code(qtype):
    """With scale 1 and zero 8 the kernel dequantizes a code to itself, so an
    identity input reads every packed code back."""
    groups = decode(file_blocks(qtype, seed=2), qtype, ROWS)
    linear = Int4Linear(groups)
    width = groups.codes.shape[1]
    identity = torch.eye(width, dtype=torch.bfloat16)
    unit = torch.zeros_like(linear.scale_and_zero)
    unit[..., 0], unit[..., 1] = 1, 8
    read = torch.ops.aten._weight_int4pack_mm_for_cpu(identity, linear.packed, GROUP_SIZE, unit)
    assert torch.equal(read.T.to(torch.uint8), groups.codes)


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q4_1, Q.Q4_K, Q.Q8_0])
def test_kernel_scale_rounding_stays_within_its_bound(qtype):
    """bfloat16 scales and zeros move a weight by at most |code - 8| * 2^-9 *
    scale + 2^-9 * |zero| (round to nearest, 8 significant bits)."""
    groups = decode(file_blocks(qtype, seed=3), qtype, ROWS)
    sz = int4_scale_and_zero(groups).transpose(0, 1).float()
    zeros = (groups.offsets.double() + 8 * groups.scales.double()).abs()
    bound = (8 * 2.0**-9 * groups.scales.abs() + 2.0**-9 * zeros).max() / groups.scales.abs().min()
    largest, rms = kernel_error(groups)
    assert 0 < largest <= bound
    assert rms < 2e-3
    assert torch.equal(sz[..., 0], groups.scales.to(torch.bfloat16).float())


def test_int4_linear_equals_a_matmul_of_its_weights():
    groups = decode(file_blocks(Q.Q8_0, seed=4), Q.Q8_0, ROWS)  # repeat=2: each input feeds two groups
    x = torch.randn(5, COLS).to(torch.bfloat16).float()
    sz = int4_scale_and_zero(groups).transpose(0, 1).float()
    codes = groups.codes.view(ROWS, -1, GROUP_SIZE).float()
    kernel_weight = ((codes - 8) * sz[..., :1] + sz[..., 1:]).view(ROWS, -1, 2, GROUP_SIZE).sum(2).view(ROWS, COLS)
    expected = (x @ kernel_weight.T).to(torch.bfloat16).float()
    torch.testing.assert_close(Int4Linear(groups)(x), expected, rtol=1e-2, atol=1e-2)


def test_load_time_quantizers_are_exact_for_the_kernel():
    """`quantize_int4`/`quantize_int8` pick scales already in the kernel's
    dtype: the kernel then dequantizes to exactly what the codes say."""
    weight = torch.randn(96, 256)
    groups = quantize_int4(weight)
    assert kernel_error(groups) == (0.0, 0.0)
    assert (groups.dequantize() - weight).abs().max() <= groups.scales.max() / 2 + 1e-6
    channels = quantize_int8(weight)
    assert torch.equal(channels.scales.to(torch.bfloat16).float(), channels.scales)
    assert (channels.dequantize() - weight).abs().max() <= channels.scales.max() / 2 + 1e-6
    x = torch.randn(3, 256).to(torch.bfloat16).float()
    torch.testing.assert_close(Int8Linear(channels)(x), x @ channels.dequantize().T, rtol=2e-2, atol=2e-2)


def test_rows_concatenate_and_a_mix_falls_back_to_dense():
    a, b = decode(file_blocks(Q.Q4_1), Q.Q4_1, ROWS), decode(file_blocks(Q.Q4_0), Q.Q4_0, ROWS)
    joined = cat_rows([a, b], torch.float32)
    assert isinstance(joined, Int4Groups) and joined.source == "Q4_0+Q4_1"
    assert torch.equal(joined.dequantize(), torch.cat([a.dequantize(), b.dequantize()]))
    q8 = decode(file_blocks(Q.Q8_0), Q.Q8_0, ROWS)
    mixed = cat_rows([a, q8], torch.float32)
    assert isinstance(mixed, torch.Tensor) and torch.equal(mixed, torch.cat([a.dequantize(), q8.dequantize()]))


def test_modes_fall_back_to_dense_off_the_cpu_or_without_kernels(monkeypatch):
    assert quant.resolve("auto", torch.device("cuda")) == "none"
    assert quant.resolve("int4", torch.device("cpu")) == "int4"
    monkeypatch.setattr(quant, "kernels_work", lambda: False)
    assert quant.resolve("auto", torch.device("cpu")) == "none"


# -- the default model ------------------------------------------------------------


@pytest.fixture(scope="module")
def quantized_default():
    return load_model(dtype="float32", quantization="auto")


def test_default_model_keeps_the_files_blocks(quantized_default):
    summary, nbytes = quant.describe(quantized_default.model)
    assert quantized_default.quantization == "auto"
    assert summary == "int4 Q4_1 x 120, int4 Q8_0 x 1"  # 30 layers x 4 linears, the tied LM head
    # Q4_1 and the LM head's Q8_0 nibbles with bfloat16 scales, dense norms: ~102 MB, a fifth of float32.
    assert 95e6 < nbytes < 110e6


def test_quantized_logits_stay_close_to_the_dequantized_reference(quantized_default, default_loaded, paged_runner):
    """Stated tolerance (bfloat16 activations into the kernel, bfloat16
    scales, 30 layers): RMS difference under 3% of the logits' RMS, mean KL
    under 0.01 nats, top-1 agreement on at least 90% of positions."""
    ours = paged_runner(quantized_default.model, quantized_default.config, block_size=16).step([(0, PROMPT)])
    ref = paged_runner(default_loaded.model, default_loaded.config, block_size=16).step([(0, PROMPT)])
    assert (ours - ref).pow(2).mean().sqrt() < 0.03 * ref.pow(2).mean().sqrt()
    kl = (ref.log_softmax(-1).exp() * (ref.log_softmax(-1) - ours.log_softmax(-1))).sum(-1)
    assert kl.mean() < 0.01
    assert (ours.argmax(-1) == ref.argmax(-1)).float().mean() >= 0.9
