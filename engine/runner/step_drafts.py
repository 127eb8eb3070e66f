"""Speculative drafts in the overlapped runner: what a step that verifies drafts
stages beside its `StepBatch`, and the post-update that accepts them on the
device.

A row with ``k`` drafts computes its last known token and the ``k`` drafts
(written into the slot's token history before input preparation, so the
inputs come from the device as always) and samples at its last ``k + 1``
positions: sampling row ``i`` of the row is the target token at position
``num_tokens + i``, conditioned on the drafts before it, with that position's
noise. Draft ``i`` is accepted when it equals target ``i``
(`engine.speculative.verify`), so the tokens emitted are the ones decoding
token by token would have sampled.

The device resolves the accepted counts itself (`post_update_drafts`): every
target is written at its position, ``num_tokens`` advances by the accepted
drafts plus one, and ``num_computed`` falls back by the rejected drafts, whose
KV is then overwritten by later steps. No host read is needed before the next
step is prepared; the host learns the counts from the same sampled tokens when
it waits for the step and reconciles its mirror there.

These run as plain torch on every device (on CUDA too, where steps without
drafts use the Triton kernels of `engine.kernels.input_prep`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from agentgate.engine.runner.slot_state import SlotState
    from agentgate.engine.runner.step_batch import StepBatch

_NEVER = torch.iinfo(torch.int64).max  # no rejection at any offset (only past the last draft, which always "fails")


@dataclass(frozen=True)
class StepDrafts:
    """The device half of a step with drafts (indices refer to the step's sampling rows).

    offsets [N]: ``i`` of each sampling row (it samples position ``num_tokens + i``);
    compared [N]: the draft that target ``i`` must equal, -1 for the target after the last;
    row_drafts [B]: each batch row's number of drafts;
    first_rows [R]: the sampling row with offset 0 of each batch row that samples;
    logits_indices [N]: the token row whose hidden state each sampling row reads;
    count_rows, count_tokens [P]: the drafts before each sampling row, for the penalties'
    output counts (sampling row ``count_rows[p]`` has seen ``count_tokens[p]`` once more).
    """

    offsets: Tensor
    compared: Tensor
    row_drafts: Tensor
    first_rows: Tensor
    logits_indices: Tensor
    count_rows: Tensor
    count_tokens: Tensor


@dataclass
class DraftPlan:
    """The host half, built row by row while a step is assembled; `arrays` is what gets staged."""

    offsets: list[int] = field(default_factory=list)
    compared: list[int] = field(default_factory=list)
    row_drafts: list[int] = field(default_factory=list)
    first_rows: list[int] = field(default_factory=list)
    logits_indices: list[int] = field(default_factory=list)
    count_rows: list[int] = field(default_factory=list)
    count_tokens: list[int] = field(default_factory=list)
    token_writes: tuple[list[int], list[int], list[int]] = field(default_factory=lambda: ([], [], []))

    def add_row(self, slot: int, start: int, end_token: int, drafts: tuple[int, ...], samples: bool) -> None:
        """One batch row: its slot, its first computed position, the index (in the step's tokens)
        one past its last token, its drafts, and whether it samples."""
        k = len(drafts)
        self.row_drafts.append(k)
        if not samples:
            return
        first = len(self.offsets)
        self.first_rows.append(first)
        self.offsets.extend(range(k + 1))
        self.compared.extend([*drafts, -1])
        self.logits_indices.extend(range(end_token - 1 - k, end_token))
        for i in range(1, k + 1):  # sampling row first + i has seen drafts[:i]
            self.count_rows.extend([first + i] * i)
            self.count_tokens.extend(drafts[:i])
        rows, cols, values = self.token_writes
        rows.extend([slot] * k)
        cols.extend(range(start + 1, start + 1 + k))  # after the last known token, at position `start`
        values.extend(drafts)

    def arrays(self) -> list[list[int]]:
        return [
            self.offsets,
            self.compared,
            self.row_drafts,
            self.first_rows,
            self.logits_indices,
            self.count_rows,
            self.count_tokens,
            *self.token_writes,
        ]

    @staticmethod
    def staged(views: list[Tensor]) -> tuple[StepDrafts, tuple[Tensor, Tensor, Tensor]]:
        """The device tensors of `arrays`, staged in that order: the drafts and the token writes."""
        return StepDrafts(*views[:7]), (views[7], views[8], views[9])


def write_drafts(token_ids: Tensor, writes: tuple[Tensor, Tensor, Tensor]) -> None:
    """Put each draft in its slot's token history, where input preparation reads it."""
    rows, cols, values = writes
    token_ids[rows.long(), cols.long()] = values.to(token_ids.dtype)


def post_update_drafts(step: StepBatch, drafts: StepDrafts, sampled: Tensor, slots: SlotState) -> None:
    """`input_prep.post_update` for a step with drafts: each row emits its accepted drafts and the
    target after them, and takes back the KV positions of the drafts it rejected."""
    idx = step.idx_mapping.long()
    counter = slots.num_computed.dtype
    slots.num_computed.index_add_(0, idx, step.query_lens.to(counter))
    rows = step.sample_rows.long()
    sampling_slots = idx[rows]
    offsets = drafts.offsets.long()
    sampled = sampled.long()
    positions = slots.num_tokens[sampling_slots].long() + offsets
    slots.token_ids[sampling_slots, positions] = sampled.to(slots.token_ids.dtype)
    rejected_at = torch.where(sampled == drafts.compared.long(), _NEVER, offsets)
    accepted = torch.full((step.num_rows,), _NEVER, dtype=torch.long, device=idx.device)
    accepted.scatter_reduce_(0, rows, rejected_at, "amin")  # the first rejected offset: the drafts accepted
    first_batch_rows = rows[drafts.first_rows.long()]
    first_slots = idx[first_batch_rows]
    num_accepted = accepted[first_batch_rows]
    slots.num_tokens.index_add_(0, first_slots, (num_accepted + 1).to(counter))
    rejected = drafts.row_drafts.long()[first_batch_rows] - num_accepted
    slots.num_computed.index_add_(0, first_slots, (-rejected).to(counter))
    if slots.output_counts is not None:
        emitted = (offsets <= accepted[rows]).to(slots.output_counts.dtype)
        slots.output_counts.index_put_((sampling_slots, sampled), emitted, accumulate=True)
