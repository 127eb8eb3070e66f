"""Resident LoRA slots: the adapters one step computes with, copied from the stored ones into
fixed device stacks that a BGMV kernel (`engine.kernels.lora.add_lora`) indexes per token row.

Per LoRA-capable module (``layers.N.<module>``) two stacks, ``A`` ``[max_loras, max_k, in]`` and
``B`` ``[max_loras, out, max_k]``, where ``max_k`` is ``--max-lora-rank`` times the module's fused
parts (q/k/v: 3, gate/up: 2, the others 1; `engine.lora.adapter`). A stored adapter's ``[k, in]``
and ``[out, k]`` pair goes into the first ``k`` rows (columns) of a slot, the rest zero, and a
module it does not adapt is a zero slot: the padding adds exact zeros.

Before a step, `LoraSlots.assign` makes the step's distinct adapters resident: an adapter already
in a slot stays there; another takes a free slot, else the least recently used slot that this
step does not use. The scheduler keeps the distinct adapters of a step within the slots
(`engine.scheduling.adapter_slots`), so a slot is always found.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from agentgate.engine.errors import LoraError

if TYPE_CHECKING:
    from agentgate.engine.lora.adapter import LoraAdapter

# add_lora(y, x, a_stack, b_stack, slots): y[t] += (x[t] @ a_stack[slots[t]].T) @ b_stack[slots[t]].T
# for the rows with slots[t] >= 0, in place (engine.kernels.lora).
LoraKernel = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], None]


class LoraSlots:
    """``num_slots`` resident adapters for the modules of ``shapes`` (key -> ``(in, out, max_k)``)."""

    def __init__(
        self,
        shapes: dict[str, tuple[int, int, int]],
        num_slots: int,
        kernel: LoraKernel,
        *,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        self.num_slots, self.kernel = num_slots, kernel
        self.stacks: dict[str, tuple[Tensor, Tensor]] = {
            key: (
                torch.zeros(num_slots, k, size_in, dtype=dtype, device=device),
                torch.zeros(num_slots, size_out, k, dtype=dtype, device=device),
            )
            for key, (size_in, size_out, k) in shapes.items()
        }
        self._resident: OrderedDict[str, int] = OrderedDict()  # adapter uid -> slot, least recently used first
        self.num_copies = 0  # adapters copied into a slot (a step's adapter that was not resident)

    @property
    def nbytes_per_slot(self) -> int:
        """Device bytes of one slot (every module's A and B at ``max_k``)."""
        return sum(a[0].nbytes + b[0].nbytes for a, b in self.stacks.values())

    def resident(self) -> dict[str, int]:
        """Adapter uid -> slot, least recently used first."""
        return dict(self._resident)

    def assign(self, adapters: Sequence[LoraAdapter]) -> dict[str, int]:
        """Make ``adapters`` (a step's, repeats allowed) resident; returns adapter uid -> slot.
        LoraError when they are more than the slots (the scheduler never lets a step hold more)."""
        step = {adapter.uid: adapter for adapter in adapters}
        if len(step) > self.num_slots:
            raise LoraError(f"a step holds {len(step)} LoRA adapters, --max-loras is {self.num_slots}")
        for uid in step:
            if uid in self._resident:
                self._resident.move_to_end(uid)  # the step's own go last: never evicted for each other
        for uid, adapter in step.items():
            if uid in self._resident:
                continue
            if len(self._resident) < self.num_slots:
                slot = len(self._resident)
            else:
                _, slot = self._resident.popitem(last=False)
            self._copy(adapter, slot)
            self._resident[uid] = slot
        return {uid: self._resident[uid] for uid in step}

    def _copy(self, adapter: LoraAdapter, slot: int) -> None:
        for key, (a_stack, b_stack) in self.stacks.items():
            pair = adapter.weights.get(key)
            if pair is None:
                a_stack[slot].zero_()
                b_stack[slot].zero_()
                continue
            a, b = pair
            k = a.shape[0]
            a_stack[slot, :k].copy_(a, non_blocking=True)
            a_stack[slot, k:].zero_()
            b_stack[slot, :, :k].copy_(b, non_blocking=True)
            b_stack[slot, :, k:].zero_()
        self.num_copies += 1
