"""A linear with per-row LoRA adapters: ``y = base(x) + (x[rows] @ A^T) @ (scale * B)^T`` for the
rows of each adapter in the step.

Two forms (`LoraStep.rows` picks by whether the step has resident slots, `engine.lora.slots`):

- segmented (the CPU): the step's rows are grouped by adapter, each adapter's tokens one slice when
  they are contiguous, else an index, and its low-rank product is computed once per group from the
  stored adapter and added to those rows: a segmented matmul in torch;
- slots (CUDA): the step's adapters are made resident in the slot stacks and one kernel call per
  linear (``engine.kernels.lora.add_lora``, BGMV: each token row gathers its slot's A and B) adds
  every row's product; base-model rows carry slot -1 and are never written. The kernel computes
  each row alone, so this form is row-invariant as it stands.

The base linear runs exactly as without LoRA: a step without adapters never touches its output,
and a zero adapter adds exact zeros, so both give bit-identical results.

Under ``--deterministic`` (``LoraStep.row_invariant``) a row's low-rank product depends on that row
alone, as the base linears' do (`engine.layers.batch_invariant`): each row is computed alone in a
zero-padded tile of ``TILE_ROWS`` rows, the same two matmuls on the same shapes whatever the step
holds (that module's ``per row`` mode: a BLAS may compute a row differently by its position in a
tile or by the number of rows, so only this mode holds on every CPU; it costs two small matmuls per
adapter row and module).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from agentgate.engine.layers.batch_invariant import TILE_ROWS

if TYPE_CHECKING:
    from agentgate.engine.lora.adapter import LoraAdapter
    from agentgate.engine.lora.slots import LoraSlots

Rows = slice | Tensor


class LoraStep:
    """The adapter groups of the step being run, shared by every `LoraLinear` of a model."""

    def __init__(self, row_invariant: bool = False) -> None:
        self.groups: list[tuple[LoraAdapter, Rows]] = []
        self.row_invariant = row_invariant  # --deterministic: each row's product computed alone
        self.slots: LoraSlots | None = None  # resident slots: the kernel form (module docstring)
        self.slot_ids: Tensor | None = None  # the step's slot per token row (-1: base), in the kernel form

    @contextmanager
    def rows(self, row_adapters: Sequence[tuple[LoraAdapter | None, int]], device: torch.device) -> Iterator[bool]:
        """For the forward pass of a step whose rows (in order) compute ``n`` tokens each through
        ``adapter`` (None: the base model alone); yields whether any row has an adapter."""
        if self.slots is not None:
            self.slot_ids = _slot_ids(self.slots, row_adapters, device)
            try:
                yield self.slot_ids is not None
            finally:
                self.slot_ids = None
            return
        runs: dict[int, tuple[LoraAdapter, list[tuple[int, int]]]] = {}
        start = 0
        for adapter, n in row_adapters:
            if adapter is not None and n:
                spans = runs.setdefault(id(adapter), (adapter, []))[1]
                if spans and spans[-1][1] == start:
                    spans[-1] = (spans[-1][0], start + n)
                else:
                    spans.append((start, start + n))
            start += n
        self.groups = [(adapter, _rows(spans, device)) for adapter, spans in runs.values()]
        try:
            yield bool(self.groups)
        finally:
            self.groups = []


def _slot_ids(
    slots: LoraSlots, row_adapters: Sequence[tuple[LoraAdapter | None, int]], device: torch.device
) -> Tensor | None:
    """The slot of each token row (-1 for the base model's), the step's adapters made resident; None
    when no row has an adapter."""
    adapters = [adapter for adapter, n in row_adapters if adapter is not None and n]
    if not adapters:
        return None
    slot = slots.assign(adapters)
    # One entry per request row, not per token: each row's slot and its token count, expanded on the device.
    host = torch.tensor(
        [
            [slot[adapter.uid] if adapter is not None and n else -1 for adapter, n in row_adapters],
            [n for _, n in row_adapters],
        ],
        dtype=torch.int32,
    )
    if device.type == "cuda":
        # torch's pinned allocator keeps the buffer until the copy has run: no host-device sync. (A buffer
        # reused across steps could be rewritten while a step in flight still copies from it.)
        host = host.pin_memory().to(device, non_blocking=True)
    num_tokens = sum(n for _, n in row_adapters)  # known here: repeat_interleave need not read it back (a sync)
    return torch.repeat_interleave(host[0], host[1], output_size=num_tokens)


def _rows(spans: list[tuple[int, int]], device: torch.device) -> Rows:
    if len(spans) == 1:
        return slice(*spans[0])
    return torch.cat([torch.arange(a, b) for a, b in spans]).to(device)


def _low_rank(x: Tensor, a: Tensor, b: Tensor, row_invariant: bool) -> Tensor:
    """``(x @ a.T) @ b.T``; with ``row_invariant``, each row alone in a zero-padded tile (see the
    module docstring)."""
    if not row_invariant:
        return (x @ a.T) @ b.T
    return torch.cat([((F.pad(row, (0, 0, 0, TILE_ROWS - 1)) @ a.T) @ b.T)[:1] for row in x.split(1)])


class LoraLinear(nn.Module):
    """``base`` (any [rows, in] -> [rows, out] module) plus the step's adapters for ``key``
    (``layers.N.<module>``, the key of `LoraAdapter.weights`)."""

    def __init__(self, base: nn.Module, key: str, step: LoraStep) -> None:
        super().__init__()
        self.base = base
        self.key = key
        self.step = step
        self.in_features: int = base.in_features
        self.out_features: int = base.out_features

    def forward(self, x: Tensor) -> Tensor:
        y = self.base(x)
        step = self.step
        if step.slot_ids is not None:
            a_stack, b_stack = step.slots.stacks[self.key]
            step.slots.kernel(y, x, a_stack, b_stack, step.slot_ids)
            return y
        for adapter, rows in self.step.groups:
            pair = adapter.weights.get(self.key)
            if pair is None:
                continue
            a, b = pair
            delta = _low_rank(x[rows], a, b, self.step.row_invariant)
            if isinstance(rows, slice):
                y[rows] += delta
            else:
                y.index_add_(0, rows, delta)
        return y

    def extra_repr(self) -> str:
        return f"key={self.key!r}"
