"""Triton kernels of the overlapped runner's input preparation and
post-update: the CUDA path behind `engine.runner.input_prep`, with the same
signatures and semantics as the references in `engine.runner.input_prep_torch`.

No wrapper reads a device value on the host: grids are sized from host
integers and shapes only. 1-D tensors must be contiguous; 2-D slot state is
addressed through its strides.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import triton
import triton.language as tl
from torch import Tensor

if TYPE_CHECKING:
    from agentgate.engine.runner.slot_state import SlotState
    from agentgate.engine.runner.step_batch import StepBatch, StepInputs

BLOCK = 128  # tokens per loop iteration of `_prepare_inputs_kernel`
BLOCK_R = 128  # batch rows per chunk (prefix sums) or per program (other kernels)
# Batch sizes and token counts change every step: kernels do not specialize
# on them (== 1, multiple of 16), so each compiles once.


@triton.jit(do_not_specialize=["num_rows", "num_sampling", "num_tokens"])
def _prepare_inputs_kernel(
    idx_ptr,
    lens_ptr,
    sample_rows_ptr,
    token_ids_ptr,
    num_computed_ptr,
    block_table_ptr,
    input_ids_ptr,
    positions_ptr,
    slot_mapping_ptr,
    query_start_loc_ptr,
    seq_lens_ptr,
    logits_ptr,
    num_rows,
    num_sampling,
    num_tokens,
    stride_ts,
    stride_tl,
    stride_bs,
    stride_bm,
    BLOCK_SIZE: tl.constexpr,
    BLOCK: tl.constexpr,
    BLOCK_R: tl.constexpr,
):
    """Grid ``(max(B, N),)``. Each program first sums the query lengths it
    needs itself, in BLOCK_R chunks (B is small, so no program waits for
    another): those before batch row ``p`` and those through sampling row
    ``sample_rows[p]``. Program ``p < B`` then fills batch row ``p``: its
    ``query_start_loc[p + 1]``, ``seq_lens[p]``, and its tokens in BLOCK
    chunks (positions, input ids from ``token_ids[slot, pos]``, slot mapping
    through ``block_table[slot, pos // BLOCK_SIZE]``). Program ``p < N``
    writes ``logits_indices[p]``; program 0 writes ``query_start_loc[0] = 0``."""
    pid = tl.program_id(0)
    sample_row = tl.load(sample_rows_ptr + pid, mask=pid < num_sampling, other=0)
    first = tl.full([], 0, tl.int32)  # sum(query_lens[:pid])
    end = tl.full([], 0, tl.int32)  # sum(query_lens[:sample_row + 1])
    for chunk in range(0, num_rows, BLOCK_R):
        rows = chunk + tl.arange(0, BLOCK_R)
        lens = tl.load(lens_ptr + rows, mask=rows < num_rows, other=0).to(tl.int32)
        first += tl.sum(tl.where(rows < pid, lens, 0))
        end += tl.sum(tl.where(rows <= sample_row, lens, 0))

    if pid == 0:
        tl.store(query_start_loc_ptr, 0)
    if pid < num_sampling:
        tl.store(logits_ptr + pid, end.to(tl.int64) - 1)
    if pid < num_rows:
        slot = tl.load(idx_ptr + pid).to(tl.int64)
        query_len = tl.load(lens_ptr + pid).to(tl.int32)
        start = tl.load(num_computed_ptr + slot).to(tl.int32)
        tl.store(query_start_loc_ptr + pid + 1, first + query_len)
        tl.store(seq_lens_ptr + pid, start + query_len)
        for chunk in range(0, query_len, BLOCK):
            offs = chunk + tl.arange(0, BLOCK)
            out = first + offs
            mask = (offs < query_len) & (out < num_tokens)
            pos = (start + offs).to(tl.int64)
            tokens = tl.load(token_ids_ptr + slot * stride_ts + pos * stride_tl, mask=mask, other=0)
            blocks = tl.load(block_table_ptr + slot * stride_bs + (pos // BLOCK_SIZE) * stride_bm, mask=mask, other=0)
            tl.store(positions_ptr + out, pos, mask=mask)
            tl.store(input_ids_ptr + out, tokens.to(tl.int64), mask=mask)
            tl.store(slot_mapping_ptr + out, blocks.to(tl.int64) * BLOCK_SIZE + pos % BLOCK_SIZE, mask=mask)


@triton.jit(do_not_specialize=["num_writes"])
def _block_table_writes_kernel(
    block_table_ptr,
    rows_ptr,
    cols_ptr,
    values_ptr,
    num_writes,
    stride_bs,
    stride_bm,
    BLOCK_R: tl.constexpr,
):
    """Grid ``(cdiv(W, BLOCK_R),)``: each program applies BLOCK_R staged
    writes ``block_table[rows[i], cols[i]] = values[i]``."""
    i = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    mask = i < num_writes
    rows = tl.load(rows_ptr + i, mask=mask, other=0).to(tl.int64)
    cols = tl.load(cols_ptr + i, mask=mask, other=0).to(tl.int64)
    values = tl.load(values_ptr + i, mask=mask, other=0)
    dst = block_table_ptr + rows * stride_bs + cols * stride_bm
    tl.store(dst, values.to(block_table_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["num_rows", "num_sampling"])
def _post_update_kernel(
    idx_ptr,
    lens_ptr,
    sample_rows_ptr,
    sampled_ptr,
    token_ids_ptr,
    num_tokens_ptr,
    num_computed_ptr,
    counts_ptr,
    num_rows,
    num_sampling,
    stride_ts,
    stride_tl,
    stride_cs,
    stride_cv,
    HAS_COUNTS: tl.constexpr,
    BLOCK_R: tl.constexpr,
):
    """Grid ``(cdiv(max(B, N), BLOCK_R),)``: lane ``i`` advances
    ``num_computed`` of batch row ``i`` (``i < B``) and, for sampling row
    ``i < N``, appends ``sampled[i]`` to its slot's token history, advances
    its ``num_tokens`` and counts the token in ``output_counts``. Slots are
    unique within a step, so no two lanes touch the same slot."""
    i = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)

    is_row = i < num_rows
    slots = tl.load(idx_ptr + i, mask=is_row, other=0).to(tl.int64)
    computed = tl.load(num_computed_ptr + slots, mask=is_row, other=0)
    lens = tl.load(lens_ptr + i, mask=is_row, other=0)
    tl.store(num_computed_ptr + slots, computed + lens.to(computed.dtype), mask=is_row)

    samples = i < num_sampling
    rows = tl.load(sample_rows_ptr + i, mask=samples, other=0)
    slots = tl.load(idx_ptr + rows, mask=samples, other=0).to(tl.int64)
    at = tl.load(num_tokens_ptr + slots, mask=samples, other=0)
    tokens = tl.load(sampled_ptr + i, mask=samples, other=0)
    dst = token_ids_ptr + slots * stride_ts + at.to(tl.int64) * stride_tl
    tl.store(dst, tokens.to(token_ids_ptr.dtype.element_ty), mask=samples)
    tl.store(num_tokens_ptr + slots, at + 1, mask=samples)
    if HAS_COUNTS:
        ones = tl.full([BLOCK_R], 1, dtype=counts_ptr.dtype.element_ty)
        tl.atomic_add(counts_ptr + slots * stride_cs + tokens.to(tl.int64) * stride_cv, ones, mask=samples)


def prepare_inputs(step: StepBatch, slots: SlotState, block_size: int, out: StepInputs) -> None:
    """See `input_prep_torch.prepare_inputs`."""
    num_rows, num_sampling = step.num_rows, step.num_sampling
    if num_rows == 0:
        out.query_start_loc[:1].zero_()
        return
    _prepare_inputs_kernel[(max(num_rows, num_sampling),)](
        step.idx_mapping,
        step.query_lens,
        step.sample_rows,
        slots.token_ids,
        slots.num_computed,
        slots.block_table,
        out.input_ids,
        out.positions,
        out.slot_mapping,
        out.query_start_loc,
        out.seq_lens,
        out.logits_indices,
        num_rows,
        num_sampling,
        step.num_tokens,
        *slots.token_ids.stride(),
        *slots.block_table.stride(),
        BLOCK_SIZE=block_size,
        BLOCK=BLOCK,
        BLOCK_R=BLOCK_R,
    )


def apply_block_table_writes(block_table: Tensor, rows: Tensor, cols: Tensor, values: Tensor) -> None:
    """See `input_prep_torch.apply_block_table_writes`."""
    num_writes = rows.shape[0]
    if num_writes == 0:
        return
    _block_table_writes_kernel[(triton.cdiv(num_writes, BLOCK_R),)](
        block_table,
        rows,
        cols,
        values,
        num_writes,
        *block_table.stride(),
        BLOCK_R=BLOCK_R,
    )


def post_update(step: StepBatch, sampled: Tensor, slots: SlotState) -> None:
    """See `input_prep_torch.post_update`."""
    num_rows, num_sampling = step.num_rows, step.num_sampling
    lanes = max(num_rows, num_sampling)
    if lanes == 0:
        return
    counts = slots.output_counts
    has_counts = counts is not None
    if counts is None:
        counts = slots.token_ids  # never read without HAS_COUNTS
    _post_update_kernel[(triton.cdiv(lanes, BLOCK_R),)](
        step.idx_mapping,
        step.query_lens,
        step.sample_rows,
        sampled,
        slots.token_ids,
        slots.num_tokens,
        slots.num_computed,
        counts,
        num_rows,
        num_sampling,
        *slots.token_ids.stride(),
        *counts.stride(),
        HAS_COUNTS=has_counts,
        BLOCK_R=BLOCK_R,
    )
