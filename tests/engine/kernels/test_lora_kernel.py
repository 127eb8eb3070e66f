"""The LoRA Triton kernels (`engine.kernels.lora.add_lora`) against their torch reference: under
TRITON_INTERPRET=1 in fp32 on CPU (small shapes: the interpreter is slow), and (``gpu`` marker)
on CUDA in bf16 at the default model's projection shapes. Rows of a negative slot must come back
bit-identical; a zero adapter adds exact zeros."""

from __future__ import annotations

import os

import pytest
import torch

from agentgate.engine.kernels.lora import add_lora, add_lora_reference

FP32, BF16 = torch.float32, torch.bfloat16
interpreted = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="CPU cases need TRITON_INTERPRET=1")


def cases(cpu, gpu):
    return [pytest.param(*c, "cpu", marks=interpreted) for c in cpu] + [
        pytest.param(*c, "cuda", marks=pytest.mark.gpu) for c in gpu
    ]


def stacks(num_slots, rank, size_in, size_out, *, gen, device, dtype):
    """``a_stack`` ``[S, R, in]``, ``b_stack`` ``[S, out, R]`` at LoRA-like scales (B pre-scaled)."""
    a = torch.randn(num_slots, rank, size_in, generator=gen) / size_in**0.5
    b = torch.randn(num_slots, size_out, rank, generator=gen) * 0.5
    return a.to(device=device, dtype=dtype), b.to(device=device, dtype=dtype)


def run_both(y, x, a, b, slots):
    """``(kernel's y, reference's y)`` from copies of ``y``."""
    got, want = y.clone(), y.clone()
    add_lora(got, x, a, b, slots)
    add_lora_reference(want, x, a, b, slots)
    return got, want


def tolerance(dtype):
    return {"atol": 1e-5, "rtol": 1e-5} if dtype == FP32 else {"atol": 2e-2, "rtol": 2e-2}


# (tokens, in, out, R, slots in the stack, dtype): odd in/out exercise the masks; R 8 and 24 are
# padded to R_PAD 16 and 32; in 300 at R 64 takes five BLOCK_K chunks, out 130 three BLOCK_N tiles.
SHAPE_CASES = cases(
    [(7, 72, 200, 8, 3, FP32), (6, 72, 200, 16, 2, FP32), (5, 300, 130, 64, 2, FP32), (4, 40, 33, 24, 3, FP32)],
    [(9, 576, 576, 16, 4, BF16), (64, 576, 1536 * 2, 8, 4, BF16), (33, 1536, 576, 64, 3, BF16)],
)


@pytest.mark.parametrize("tokens,size_in,size_out,rank,num_slots,dtype,device", SHAPE_CASES)
def test_mixed_slots_match_the_reference(tokens, size_in, size_out, rank, num_slots, dtype, device):
    gen = torch.Generator().manual_seed(tokens * size_in + rank)
    a, b = stacks(num_slots, rank, size_in, size_out, gen=gen, device=device, dtype=dtype)
    x = torch.randn(tokens, size_in, generator=gen).to(device=device, dtype=dtype)
    y = torch.randn(tokens, size_out, generator=gen).to(device=device, dtype=dtype)
    # every slot, interleaved, and base-model rows (-1) between them, first and last
    pattern = [-1, *range(num_slots), -1, num_slots - 1, 0]
    slots = torch.tensor([pattern[i % len(pattern)] for i in range(tokens)], dtype=torch.int32, device=device)
    got, want = run_both(y, x, a, b, slots)
    base = slots < 0
    assert base.any() and not base.all()
    assert torch.equal(got[base], y[base])  # the base model's rows: not written at all
    assert not torch.equal(got[~base], y[~base])
    torch.testing.assert_close(got, want, **tolerance(dtype))


@pytest.mark.parametrize("slot_dtype,device", cases([(torch.int64,), (torch.int32,)], [(torch.int64,)]))
def test_one_slot_for_every_row(slot_dtype, device):
    dtype = FP32 if device == "cpu" else BF16
    gen = torch.Generator().manual_seed(11)
    a, b = stacks(3, 16, 48, 72, gen=gen, device=device, dtype=dtype)
    x = torch.randn(5, 48, generator=gen).to(device=device, dtype=dtype)
    y = torch.randn(5, 72, generator=gen).to(device=device, dtype=dtype)
    slots = torch.full((5,), 2, dtype=slot_dtype, device=device)
    got, want = run_both(y, x, a, b, slots)
    torch.testing.assert_close(got, want, **tolerance(dtype))
    # the same as the dense product of that one adapter
    torch.testing.assert_close(got, y + (x @ a[2].T) @ b[2].T, **tolerance(dtype))


@pytest.mark.parametrize("device", cases([()], [()]))
def test_a_single_token(device):
    dtype = FP32 if device == "cpu" else BF16
    gen = torch.Generator().manual_seed(1)
    a, b = stacks(2, 8, 72, 200, gen=gen, device=device, dtype=dtype)
    x = torch.randn(1, 72, generator=gen).to(device=device, dtype=dtype)
    y = torch.randn(1, 200, generator=gen).to(device=device, dtype=dtype)
    got, want = run_both(y, x, a, b, torch.tensor([1], device=device))
    torch.testing.assert_close(got, want, **tolerance(dtype))
    untouched, _ = run_both(y, x, a, b, torch.tensor([-1], device=device))
    assert torch.equal(untouched, y)


@pytest.mark.parametrize("device", cases([()], [()]))
def test_a_zero_adapter_adds_exact_zeros(device):
    """A zero slot beside a nonzero one (and padding past an adapter's rank, which is zeros too)."""
    dtype = FP32 if device == "cpu" else BF16
    gen = torch.Generator().manual_seed(5)
    a, b = stacks(2, 16, 72, 200, gen=gen, device=device, dtype=dtype)
    a[0].zero_()
    b[0].zero_()
    x = torch.randn(4, 72, generator=gen).to(device=device, dtype=dtype)
    y = torch.randn(4, 200, generator=gen).to(device=device, dtype=dtype)
    slots = torch.tensor([0, 1, 0, -1], device=device)
    got, want = run_both(y, x, a, b, slots)
    zero = slots != 1
    assert torch.equal(got[zero], y[zero])
    torch.testing.assert_close(got, want, **tolerance(dtype))


@interpreted
def test_padded_rank_adds_what_the_smaller_rank_does():
    """A rank-5 adapter zero-padded to R 16 gives the rank-5 product (the stack's layout)."""
    gen = torch.Generator().manual_seed(9)
    a5, b5 = stacks(1, 5, 40, 24, gen=gen, device="cpu", dtype=FP32)
    a16, b16 = torch.zeros(1, 16, 40), torch.zeros(1, 24, 16)
    a16[:, :5], b16[:, :, :5] = a5, b5
    x, y = torch.randn(3, 40, generator=gen), torch.randn(3, 24, generator=gen)
    slots = torch.zeros(3, dtype=torch.int32)
    padded, _ = run_both(y, x, a16, b16, slots)
    small, _ = run_both(y, x, a5, b5, slots)
    torch.testing.assert_close(padded, small, atol=1e-6, rtol=1e-6)


@interpreted
def test_no_tokens_and_refusals():
    a, b = torch.zeros(1, 8, 16), torch.zeros(1, 32, 8)
    add_lora(torch.empty(0, 32), torch.empty(0, 16), a, b, torch.empty(0, dtype=torch.int32))
    with pytest.raises(AssertionError, match="rank 80"):
        add_lora(
            torch.zeros(1, 32),
            torch.zeros(1, 16),
            torch.zeros(1, 80, 16),
            torch.zeros(1, 32, 80),
            torch.zeros(1, dtype=torch.int32),
        )
    with pytest.raises(AssertionError):  # B's dtype is not y's
        add_lora(torch.zeros(1, 32), torch.zeros(1, 16), a, b.half(), torch.zeros(1, dtype=torch.int32))
