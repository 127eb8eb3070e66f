"""Device-side input preparation for the overlapped runner: the Triton
kernels (`input_prep_triton`) on CUDA, the plain-torch references
(`input_prep_ref`) elsewhere. Both have the same signatures; see
`input_prep_ref` for the semantics. Triton is imported only on first CUDA
use, so CPU installs need not have it."""

from __future__ import annotations

from types import ModuleType

from torch import Tensor

from agentgate.engine.kernels import input_prep_ref


def _impl(state: Tensor) -> ModuleType:
    """The implementation for tensors on ``state``'s device."""
    if state.is_cuda:
        from agentgate.engine.kernels import input_prep_triton

        return input_prep_triton
    return input_prep_ref


def prepare_inputs(idx_mapping: Tensor, query_lens: Tensor, sample_rows: Tensor, token_ids: Tensor,
                   num_computed: Tensor, block_table: Tensor, block_size: int, num_tokens: int,
                   input_ids: Tensor, positions: Tensor, slot_mapping: Tensor, query_start_loc: Tensor,
                   seq_lens: Tensor, logits_indices: Tensor) -> None:
    _impl(token_ids).prepare_inputs(idx_mapping, query_lens, sample_rows, token_ids, num_computed, block_table,
                                    block_size, num_tokens, input_ids, positions, slot_mapping, query_start_loc,
                                    seq_lens, logits_indices)


def apply_block_table_writes(block_table: Tensor, rows: Tensor, cols: Tensor, values: Tensor) -> None:
    _impl(block_table).apply_block_table_writes(block_table, rows, cols, values)


def post_update(idx_mapping: Tensor, query_lens: Tensor, sample_rows: Tensor, sampled: Tensor,
                token_ids: Tensor, num_tokens: Tensor, num_computed: Tensor,
                output_counts: Tensor | None) -> None:
    _impl(token_ids).post_update(idx_mapping, query_lens, sample_rows, sampled, token_ids, num_tokens,
                                 num_computed, output_counts)
