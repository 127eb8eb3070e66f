"""The two records of an overlapped step on the device: `StepBatch`, what the host staged, and
`StepInputs`, the model inputs `runner.input_prep` builds from it. A module of their own, so the
input preparation's implementations (torch references, Triton kernels) import them without
importing the dispatcher that imports those implementations."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class StepBatch:
    """One step as staged by the host: device index vectors plus the host
    integers that size the kernels' grids (never read from the device).

    idx_mapping [B]: the slot of each batch row; query_lens [B]: tokens
    computed per row; sample_rows [N]: the batch rows that sample this step.
    """

    idx_mapping: Tensor
    query_lens: Tensor
    sample_rows: Tensor
    num_tokens: int

    @property
    def num_rows(self) -> int:
        return self.idx_mapping.shape[0]

    @property
    def num_sampling(self) -> int:
        return self.sample_rows.shape[0]


@dataclass(frozen=True)
class StepInputs:
    """The model inputs of one step, written on the device by
    `prepare_inputs` over the first ``num_tokens`` / B / N entries of each
    buffer (buffers may be longer: the CUDA graphs keep one static instance
    sized for the largest batch and pad the rest)."""

    input_ids: Tensor  # [T] int64
    positions: Tensor  # [T] int64
    slot_mapping: Tensor  # [T] int64; -1 = do not write the KV cache
    query_start_loc: Tensor  # [B + 1] int32
    seq_lens: Tensor  # [B] int32
    logits_indices: Tensor  # [N] int64: the token row of each sampling row

    @classmethod
    def empty(cls, num_tokens: int, num_rows: int, num_sampling: int, device: torch.device) -> StepInputs:
        """Uninitialised buffers of exactly one step's sizes."""

        def buffer(size: int, dtype: torch.dtype) -> Tensor:
            return torch.empty(size, dtype=dtype, device=device)

        return cls(
            buffer(num_tokens, torch.long),
            buffer(num_tokens, torch.long),
            buffer(num_tokens, torch.long),
            buffer(num_rows + 1, torch.int32),
            buffer(num_rows, torch.int32),
            buffer(num_sampling, torch.long),
        )

    @classmethod
    def padded(cls, max_rows: int, device: torch.device) -> StepInputs:
        """Buffers for pure-decode batches of up to ``max_rows`` rows, filled
        as padding (slot -1: no KV write; seq_len 0: no attention)."""
        long = dict(dtype=torch.long, device=device)
        return cls(
            torch.zeros(max_rows, **long),
            torch.zeros(max_rows, **long),
            torch.full((max_rows,), -1, **long),
            torch.arange(max_rows + 1, dtype=torch.int32, device=device),
            torch.zeros(max_rows, dtype=torch.int32, device=device),
            torch.zeros(max_rows, **long),
        )
