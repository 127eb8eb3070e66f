"""The fused Triton RMSNorm(+residual) and RoPE(+KV write) kernels against
their torch references: under TRITON_INTERPRET=1 in fp32 (and fp16) on CPU,
and (``gpu`` marker) on CUDA in bf16 at the default model's and Qwen3's
shapes. Inputs are strided views of one QKV projection, as in the model."""

from __future__ import annotations

import os

import pytest
import torch

from agentgate.engine.attention import torch_rotary as reference
from agentgate.engine.kernels.rms_norm import rms_norm as triton_rms_norm
from agentgate.engine.kernels.rotary_kv import rotary_write_kv
from agentgate.engine.layers.norm import RMSNorm, rms_norm

FP32, FP16, BF16 = torch.float32, torch.float16, torch.bfloat16
interpreted = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="CPU cases need TRITON_INTERPRET=1")


def cases(cpu, gpu):
    return [pytest.param(*c, "cpu", marks=interpreted) for c in cpu] + [
        pytest.param(*c, "cuda", marks=pytest.mark.gpu) for c in gpu
    ]


def rand(*shape, gen, device, dtype, scale=1.0):
    return (torch.randn(*shape, generator=gen) * scale).to(device=device, dtype=dtype)


# --- RMSNorm --------------------------------------------------------------------

# (tokens, hidden, dtype): the default model's hidden 576 (not a power of two)
NORM_CASES = cases(
    [(5, 576, FP32), (3, 64, FP16), (1, 40, FP32)],
    [(7, 576, BF16), (64, 1024, BF16), (1, 4096, BF16)],
)


@pytest.mark.parametrize("tokens,hidden,dtype,device", NORM_CASES)
def test_rms_norm_matches_reference(tokens, hidden, dtype, device):
    gen = torch.Generator().manual_seed(tokens + hidden)
    x = rand(tokens, hidden, gen=gen, device=device, dtype=dtype, scale=3.0)
    weight = rand(hidden, gen=gen, device=device, dtype=dtype)
    want, want_res = rms_norm(x, weight, 1e-5)
    got, got_res = triton_rms_norm(x, weight, 1e-5)
    tol = 1e-5 if dtype == FP32 else 1e-2
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)
    assert got_res is x and want_res is x


@pytest.mark.parametrize("tokens,hidden,dtype,device", NORM_CASES)
def test_rms_norm_adds_the_residual_in_place(tokens, hidden, dtype, device):
    gen = torch.Generator().manual_seed(7)
    x = rand(tokens, hidden, gen=gen, device=device, dtype=dtype)
    residual = rand(tokens, hidden, gen=gen, device=device, dtype=dtype, scale=4.0)
    weight = rand(hidden, gen=gen, device=device, dtype=dtype)
    want, want_sum = rms_norm(x, weight, 1e-6, residual.clone())
    held = residual
    got, got_sum = triton_rms_norm(x, weight, 1e-6, residual)
    assert got_sum is held  # the sum went into the residual's memory
    torch.testing.assert_close(got_sum, want_sum, atol=0, rtol=0)  # one rounding of x + r, as torch's add
    tol = 1e-5 if dtype == FP32 else 1e-2
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype,device", cases([(FP32,)], [(BF16,)]))
def test_rms_norm_of_heads_in_a_strided_view(dtype, device):
    """Qwen3's q/k norm: per head, over [tokens, heads, head_dim] views of a QKV row."""
    gen = torch.Generator().manual_seed(3)
    qkv = rand(4, 6 * 16 + 2 * 2 * 16, gen=gen, device=device, dtype=dtype)
    q = qkv[:, : 6 * 16].view(4, 6, 16)
    weight = rand(16, gen=gen, device=device, dtype=dtype)
    want, _ = rms_norm(q, weight, 1e-6)
    got, _ = triton_rms_norm(q, weight, 1e-6)
    assert got.is_contiguous() and got.shape == q.shape
    tol = 1e-5 if dtype == FP32 else 1e-2
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)


@interpreted
def test_rms_norm_module_runs_the_kernel_only_when_asked():
    gen = torch.Generator().manual_seed(0)
    x, residual = torch.randn(3, 32, generator=gen), torch.randn(3, 32, generator=gen)
    plain, fused = RMSNorm(32, 1e-6), RMSNorm(32, 1e-6, kernel=True)
    assert plain._impl is rms_norm and fused._impl is triton_rms_norm
    torch.testing.assert_close(fused(x), plain(x))
    want = plain(x, residual.clone())
    got = fused(x, residual)
    torch.testing.assert_close(got[0], want[0])
    assert got[1] is residual and torch.equal(got[1], want[1])


# --- RoPE + KV write ------------------------------------------------------------

# (num_heads, num_kv_heads, head_dim, block_size, dtype)
ROTARY_CASES = cases(
    [(9, 3, 64, 16, FP32), (4, 4, 16, 16, FP16), (6, 1, 32, 8, FP32)],
    [(9, 3, 64, 16, BF16), (16, 8, 128, 16, BF16), (32, 8, 128, 32, BF16)],
)


@pytest.mark.parametrize("num_heads,num_kv_heads,head_dim,block_size,dtype,device", ROTARY_CASES)
def test_rotary_write_kv_matches_reference(num_heads, num_kv_heads, head_dim, block_size, dtype, device):
    gen = torch.Generator().manual_seed(num_heads * head_dim)
    tokens, num_blocks = 6, 5
    q_size, kv_size = num_heads * head_dim, num_kv_heads * head_dim
    qkv = rand(tokens, q_size + 2 * kv_size, gen=gen, device=device, dtype=dtype)
    q = qkv[:, :q_size].view(tokens, num_heads, head_dim)
    k = qkv[:, q_size : q_size + kv_size].view(tokens, num_kv_heads, head_dim)
    v = qkv[:, q_size + kv_size :].view(tokens, num_kv_heads, head_dim)
    positions = torch.tensor([0, 7, 300, 1, 4095, 12])
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = torch.outer(positions.float(), inv_freq)
    cos, sin = angles.cos().to(device), angles.sin().to(device)
    slots = torch.tensor([5, -1, 0, num_blocks * block_size - 1, -1, 2 * block_size + 3], device=device)
    cache_shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache, v_cache = (
        rand(*cache_shape, gen=gen, device=device, dtype=dtype),
        rand(*cache_shape, gen=gen, device=device, dtype=dtype),
    )
    want_k, want_v = k_cache.clone(), v_cache.clone()
    want_q = reference.rotary_write_kv(q, k, v, cos, sin, want_k, want_v, slots)
    k_before = k.clone()
    got_q = rotary_write_kv(q, k, v, cos, sin, k_cache, v_cache, slots)
    assert got_q.data_ptr() == q.data_ptr()  # rotated in place in the projection's output
    tol = 1e-5 if dtype == FP32 else 1e-2
    torch.testing.assert_close(got_q, want_q, atol=tol, rtol=tol)
    torch.testing.assert_close(k_cache, want_k, atol=tol, rtol=tol)
    assert torch.equal(v_cache, want_v)  # values are copied, untouched, to exactly the slots written
    assert torch.equal(k, k_before)  # keys are rotated on their way into the cache only


def test_reference_rotation_is_a_rotation():
    """cos = 1, sin = 0 leaves everything as it is; a quarter turn swaps the halves."""
    x = torch.randn(2, 3, 8)
    ones, zeros = torch.ones(2, 4), torch.zeros(2, 4)
    assert torch.equal(reference.apply_rope(x, ones, zeros), x)
    turned = reference.apply_rope(x, zeros, ones)
    assert torch.equal(turned[..., :4], -x[..., 4:]) and torch.equal(turned[..., 4:], x[..., :4])
