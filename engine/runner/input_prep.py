"""Device-side input preparation for the overlapped runner.

A step is a `StepBatch` (what the host staged: the slot of each batch row,
its query length, the rows that sample; both records live in `step_batch`);
`prepare_inputs` turns it and the slot state into the model's inputs, a
`StepInputs`, on the device, and
`post_update` writes the sampled tokens back into the slot state. The Triton
kernels (`engine.kernels.input_prep`) run on CUDA, the plain-torch references
(`input_prep_torch`, which document the semantics) elsewhere; Triton is
imported only on first CUDA use, so CPU installs need not have it.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

from torch import Tensor

from agentgate.engine.runner import input_prep_torch
from agentgate.engine.runner.step_batch import StepBatch, StepInputs

if TYPE_CHECKING:
    from agentgate.engine.runner.slot_state import SlotState


def _impl(state: Tensor) -> ModuleType:
    """The implementation for tensors on ``state``'s device."""
    if state.is_cuda:
        from agentgate.engine.kernels import input_prep

        return input_prep
    return input_prep_torch


def prepare_inputs(step: StepBatch, slots: SlotState, block_size: int, out: StepInputs) -> None:
    """Fill ``out`` from the slot state (see `input_prep_torch.prepare_inputs`)."""
    _impl(slots.token_ids).prepare_inputs(step, slots, block_size, out)


def apply_block_table_writes(block_table: Tensor, rows: Tensor, cols: Tensor, values: Tensor) -> None:
    """``block_table[rows[i], cols[i]] = values[i]`` for every staged write."""
    _impl(block_table).apply_block_table_writes(block_table, rows, cols, values)


def post_update(step: StepBatch, sampled: Tensor, slots: SlotState) -> None:
    """Append the sampled tokens to the slot state (see `input_prep_torch.post_update`)."""
    _impl(slots.token_ids).post_update(step, sampled, slots)
