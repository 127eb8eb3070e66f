"""Plain-torch references of the overlapped runner's device-side input
preparation and post-update. The Triton kernels in `input_prep.py` have the
same signatures; on CPU these run. Nothing here reads a device value on the
host: every size is a host integer passed in.

Slot state (persistent, indexed by slot): ``token_ids [S, L]`` (prompt and
sampled tokens), ``num_tokens [S]`` (how many of them are known),
``num_computed [S]`` (how many have KV in the cache), ``block_table [S, M]``.
A step is described by ``idx_mapping [B]`` (the slot of each batch row),
``query_lens [B]`` (tokens computed per row) and ``sample_rows [N]`` (the
batch rows that sample).
"""

from __future__ import annotations

import torch
from torch import Tensor


def prepare_inputs(
    idx_mapping: Tensor,
    query_lens: Tensor,
    sample_rows: Tensor,
    token_ids: Tensor,
    num_computed: Tensor,
    block_table: Tensor,
    block_size: int,
    num_tokens: int,
    input_ids: Tensor,
    positions: Tensor,
    slot_mapping: Tensor,
    query_start_loc: Tensor,
    seq_lens: Tensor,
    logits_indices: Tensor,
) -> None:
    """Fill the step's model inputs (the last six arguments, written in place
    over their first ``num_tokens`` / B / N entries) from slot state.

    Row b computes positions ``num_computed[slot] ..
    num_computed[slot] + query_lens[b] - 1`` of its slot; its input ids are
    read from ``token_ids`` (prompt tokens, or the token sampled last step,
    written there on the device by `post_update`)."""
    num_rows = idx_mapping.shape[0]
    lens = query_lens.to(torch.int32)
    query_start_loc[0] = 0
    query_start_loc[1 : num_rows + 1] = torch.cumsum(lens, 0)
    slots = idx_mapping.long()
    start = num_computed[slots]
    seq_lens[:num_rows] = start + lens
    row_of_token = torch.repeat_interleave(
        torch.arange(num_rows, device=lens.device), lens.long(), output_size=num_tokens
    )
    offset = torch.arange(num_tokens, device=lens.device) - query_start_loc[row_of_token].long()
    pos = start[row_of_token].long() + offset
    token_slot = slots[row_of_token]
    positions[:num_tokens] = pos
    input_ids[:num_tokens] = token_ids[token_slot, pos].long()
    blocks = block_table[token_slot, pos // block_size].long()
    slot_mapping[:num_tokens] = blocks * block_size + pos % block_size
    logits_indices[: sample_rows.shape[0]] = query_start_loc[sample_rows.long() + 1].long() - 1


def apply_block_table_writes(block_table: Tensor, rows: Tensor, cols: Tensor, values: Tensor) -> None:
    """``block_table[rows[i], cols[i]] = values[i]`` for every staged write, in one launch."""
    block_table[rows.long(), cols.long()] = values.to(block_table.dtype)


def post_update(
    idx_mapping: Tensor,
    query_lens: Tensor,
    sample_rows: Tensor,
    sampled: Tensor,
    token_ids: Tensor,
    num_tokens: Tensor,
    num_computed: Tensor,
    output_counts: Tensor | None,
) -> None:
    """After sampling, on the device: append each sampled token to its slot's
    token history, advance ``num_tokens`` of sampling rows and
    ``num_computed`` of every row, and count the token for penalties."""
    slots = idx_mapping.long()
    num_computed.index_add_(0, slots, query_lens.to(num_computed.dtype))
    sampling_slots = slots[sample_rows.long()]
    at = num_tokens[sampling_slots].long()
    token_ids[sampling_slots, at] = sampled.to(token_ids.dtype)
    num_tokens.index_add_(0, sampling_slots, torch.ones_like(sampling_slots, dtype=num_tokens.dtype))
    if output_counts is not None:
        output_counts.index_put_(
            (sampling_slots, sampled.long()),
            torch.ones_like(sampling_slots, dtype=output_counts.dtype),
            accumulate=True,
        )
