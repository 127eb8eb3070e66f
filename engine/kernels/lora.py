"""Triton kernels: LoRA adapters per token row (BGMV style: each row gathers its own adapter).

``add_lora(y, x, a_stack, b_stack, slots)`` computes, in place,
``y[t] += (x[t] @ a_stack[slots[t]].T) @ b_stack[slots[t]].T`` for every row ``t`` with
``slots[t] >= 0``; rows with ``slots[t] < 0`` (the base model alone) are never written, so they
stay bit-identical. ``add_lora_reference`` is the plain-torch reference (a loop over the slots),
with the same signature.

Layout: ``y`` ``[T, out]`` and ``x`` ``[T, in]`` (rows addressed through their stride, the last
dim contiguous), ``a_stack`` ``[S, R, in]`` and ``b_stack`` ``[S, out, R]`` contiguous, one slot
per resident adapter; ``B`` is pre-scaled (``lora_alpha / r`` folded in) and an adapter of rank
below ``R`` is zero-padded (rows of its A, columns of its B), so the padding adds exact zeros.
``slots`` ``[T]`` int32 or int64. All four float tensors share one dtype (fp16, bf16 or fp32).

Two launches:

- shrink, grid ``(T,)``: row ``t``'s ``x[t] @ A^T`` over ``in`` in ``BLOCK_K`` chunks, into an
  fp32 ``[T, R_PAD]`` intermediate (``R_PAD``: ``R`` padded to a power of two, at least 16);
- expand, grid ``(T, cdiv(out, BLOCK_N))``: ``intermediate[t] @ B^T`` for ``BLOCK_N`` outputs,
  rounded to ``y``'s dtype and added to ``y`` (the add in fp32, rounded once, as torch's add).

Products accumulate in fp32 (elementwise products and sums, no ``tl.dot``: a row is one vector,
and fp32 stays fp32 on a GPU). The reference rounds its intermediate to the dtype (torch's
matmul), the kernel does not: in fp32 the two agree to rounding, in bf16 to bf16's precision.
``in`` and ``out`` are runtime arguments, not constexprs: the seven projections of a model share
compiled kernels (one per R and block sizes) instead of compiling one per shape.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

MAX_RANK = 64  # the largest R (``a_stack.shape[1]``) the kernels take
TILE = 4096  # elements of A or B one program holds per loop step: BLOCK_K (BLOCK_N) * R_PAD


@triton.jit
def _row(slots_ptr, RANK: tl.constexpr, R_PAD: tl.constexpr):
    """This program's token row ``t`` (grid axis 0), its slot, and the rank lanes (``R_PAD`` of
    them; those below ``RANK`` are the stack's)."""
    t = tl.program_id(0).to(tl.int64)
    ranks = tl.arange(0, R_PAD)
    return t, tl.load(slots_ptr + t).to(tl.int64), ranks, ranks < RANK


@triton.jit
def _shrink_kernel(
    x_ptr,
    a_ptr,
    slots_ptr,
    inter_ptr,
    stride_xt,
    size_in,
    RANK: tl.constexpr,
    R_PAD: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """Grid ``(T,)``: ``inter[t, :RANK] = x[t] @ a_stack[slots[t]].T`` in fp32 (lanes past RANK
    are zero). A row with a negative slot returns at once: its intermediate is never read."""
    t, slot, ranks, rank_mask = _row(slots_ptr, RANK, R_PAD)
    if slot < 0:
        return
    cols = tl.arange(0, BLOCK_K)
    a_rows = a_ptr + slot * (RANK * size_in) + ranks[:, None] * size_in
    acc = tl.zeros([R_PAD], dtype=tl.float32)
    for k in range(0, size_in, BLOCK_K):
        col_mask = k + cols < size_in
        xs = tl.load(x_ptr + t * stride_xt + k + cols, mask=col_mask, other=0.0).to(tl.float32)
        a = tl.load(a_rows + k + cols[None, :], mask=rank_mask[:, None] & col_mask[None, :], other=0.0)
        acc += tl.sum(a.to(tl.float32) * xs[None, :], axis=1)
    tl.store(inter_ptr + t * R_PAD + ranks, acc)


@triton.jit
def _expand_kernel(
    y_ptr,
    b_ptr,
    slots_ptr,
    inter_ptr,
    stride_yt,
    size_out,
    RANK: tl.constexpr,
    R_PAD: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Grid ``(T, cdiv(size_out, BLOCK_N))``: ``y[t, n] += inter[t] @ b_stack[slots[t], n].T`` for
    this program's ``BLOCK_N`` outputs ``n``; the fp32 sum is rounded to y's dtype, then added to
    y in fp32 and rounded once more (torch's ``y += delta``). A negative slot writes nothing."""
    t, slot, ranks, rank_mask = _row(slots_ptr, RANK, R_PAD)
    if slot < 0:
        return
    outs = tl.program_id(1).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    out_mask = outs < size_out
    inter = tl.load(inter_ptr + t * R_PAD + ranks, mask=rank_mask, other=0.0)
    b_at = b_ptr + slot * (size_out * RANK) + outs[:, None] * RANK + ranks[None, :]
    b = tl.load(b_at, mask=out_mask[:, None] & rank_mask[None, :], other=0.0)
    delta = tl.sum(b.to(tl.float32) * inter[None, :], axis=1)
    y_at = y_ptr + t * stride_yt + outs
    y = tl.load(y_at, mask=out_mask, other=0.0)
    dtype = y_ptr.dtype.element_ty
    summed = y.to(tl.float32) + delta.to(dtype).to(tl.float32)
    tl.store(y_at, summed.to(dtype), mask=out_mask)


def _check(y: Tensor, x: Tensor, a_stack: Tensor, b_stack: Tensor, slots: Tensor) -> tuple[int, int, int]:
    """The shapes, dtypes and layouts `add_lora` takes; returns ``(in, out, R)``."""
    num_t, size_out = y.shape
    size_in = x.shape[1]
    num_slots, rank = a_stack.shape[:2]
    assert x.shape == (num_t, size_in) and slots.shape == (num_t,), (x.shape, y.shape, slots.shape)
    assert a_stack.shape == (num_slots, rank, size_in), (a_stack.shape, x.shape)
    assert b_stack.shape == (num_slots, size_out, rank), (b_stack.shape, a_stack.shape, y.shape)
    assert x.dtype == y.dtype == a_stack.dtype == b_stack.dtype, (x.dtype, y.dtype, a_stack.dtype, b_stack.dtype)
    assert slots.dtype in (torch.int32, torch.int64), slots.dtype
    assert 1 <= rank <= MAX_RANK, f"LoRA rank {rank} is above the kernel's {MAX_RANK}"
    return size_in, size_out, rank


def add_lora(y: Tensor, x: Tensor, a_stack: Tensor, b_stack: Tensor, slots: Tensor) -> None:
    """y[t] += (x[t] @ a_stack[slots[t]].T) @ b_stack[slots[t]].T for every token row t with slots[t] >= 0
    (in place); rows with slots[t] < 0 are left untouched (bit-identical)."""
    size_in, size_out, rank = _check(y, x, a_stack, b_stack, slots)
    assert y.stride(1) == 1 and x.stride(1) == 1, (y.stride(), x.stride())
    assert a_stack.is_contiguous() and b_stack.is_contiguous() and slots.is_contiguous()
    num_t = y.shape[0]
    if num_t == 0:
        return
    r_pad = max(16, triton.next_power_of_2(rank))
    inter = torch.empty(num_t, r_pad, dtype=torch.float32, device=y.device)
    block_k = min(triton.next_power_of_2(size_in), TILE // r_pad)
    _shrink_kernel[(num_t,)](x, a_stack, slots, inter, x.stride(0), size_in, RANK=rank, R_PAD=r_pad, BLOCK_K=block_k)
    block_n = min(triton.next_power_of_2(size_out), TILE // r_pad)
    _expand_kernel[(num_t, triton.cdiv(size_out, block_n))](
        y, b_stack, slots, inter, y.stride(0), size_out, RANK=rank, R_PAD=r_pad, BLOCK_N=block_n
    )


def add_lora_reference(y: Tensor, x: Tensor, a_stack: Tensor, b_stack: Tensor, slots: Tensor) -> None:
    """`add_lora` in plain torch: for each slot in use, its rows' two products in y's dtype, added
    to those rows of ``y``; rows with a negative slot are not written."""
    _check(y, x, a_stack, b_stack, slots)
    for slot in sorted({int(s) for s in slots.tolist() if s >= 0}):
        rows = torch.nonzero(slots == slot).flatten()
        delta = (x[rows] @ a_stack[slot].T) @ b_stack[slot].T
        y.index_add_(0, rows, delta)
