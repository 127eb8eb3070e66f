"""Plain-torch references of the overlapped runner's device-side input
preparation and post-update: the CPU path behind `input_prep`, and what the
Triton kernels in `engine.kernels.input_prep` are tested against. Nothing
here reads a device value on the host: every size is a host integer.

Slot state (`SlotState`, persistent, indexed by slot): ``token_ids [S, L]``
(prompt and sampled tokens), ``num_tokens [S]`` (how many of them are known),
``num_computed [S]`` (how many have KV in the cache), ``block_table [S, M]``,
``output_counts [S, V]`` (penalties; None until first used). A step is a
`StepBatch`: ``idx_mapping [B]`` (the slot of each batch row), ``query_lens
[B]`` (tokens computed per row) and ``sample_rows [N]`` (the batch rows that
sample).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from agentgate.engine.runner.slot_state import SlotState
    from agentgate.engine.runner.step_batch import StepBatch, StepInputs


def prepare_inputs(step: StepBatch, slots: SlotState, block_size: int, out: StepInputs) -> None:
    """Fill the step's model inputs (written in place over the first
    ``num_tokens`` / B / N entries of each buffer of ``out``) from slot state.

    Row b computes positions ``num_computed[slot] ..
    num_computed[slot] + query_lens[b] - 1`` of its slot; its input ids are
    read from ``token_ids`` (prompt tokens, or the token sampled last step,
    written there on the device by `post_update`)."""
    num_rows, num_tokens = step.num_rows, step.num_tokens
    lens = step.query_lens.to(torch.int32)
    out.query_start_loc[0] = 0
    out.query_start_loc[1 : num_rows + 1] = torch.cumsum(lens, 0)
    idx = step.idx_mapping.long()
    start = slots.num_computed[idx]
    out.seq_lens[:num_rows] = start + lens
    row_of_token = torch.repeat_interleave(
        torch.arange(num_rows, device=lens.device), lens.long(), output_size=num_tokens
    )
    offset = torch.arange(num_tokens, device=lens.device) - out.query_start_loc[row_of_token].long()
    pos = start[row_of_token].long() + offset
    token_slot = idx[row_of_token]
    out.positions[:num_tokens] = pos
    out.input_ids[:num_tokens] = slots.token_ids[token_slot, pos].long()
    blocks = slots.block_table[token_slot, pos // block_size].long()
    out.slot_mapping[:num_tokens] = blocks * block_size + pos % block_size
    out.logits_indices[: step.num_sampling] = out.query_start_loc[step.sample_rows.long() + 1].long() - 1


def apply_block_table_writes(block_table: Tensor, rows: Tensor, cols: Tensor, values: Tensor) -> None:
    """``block_table[rows[i], cols[i]] = values[i]`` for every staged write, in one launch."""
    block_table[rows.long(), cols.long()] = values.to(block_table.dtype)


def post_update(step: StepBatch, sampled: Tensor, slots: SlotState) -> None:
    """After sampling, on the device: append each sampled token
    (``sampled [N]``) to its slot's token history, advance ``num_tokens`` of
    sampling rows and ``num_computed`` of every row, and count the token for
    penalties (when the slot state has ``output_counts``)."""
    idx = step.idx_mapping.long()
    slots.num_computed.index_add_(0, idx, step.query_lens.to(slots.num_computed.dtype))
    sampling_slots = idx[step.sample_rows.long()]
    at = slots.num_tokens[sampling_slots].long()
    slots.token_ids[sampling_slots, at] = sampled.to(slots.token_ids.dtype)
    slots.num_tokens.index_add_(0, sampling_slots, torch.ones_like(sampling_slots, dtype=slots.num_tokens.dtype))
    if slots.output_counts is not None:
        slots.output_counts.index_put_(
            (sampling_slots, sampled.long()),
            torch.ones_like(sampling_slots, dtype=slots.output_counts.dtype),
            accumulate=True,
        )
