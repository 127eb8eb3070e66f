"""Rotating host buffers for the few bytes each step sends to the device.

The host never writes memory that an in-flight copy may still read: each
step snapshots its arrays into the next buffer of a ring (pinned on CUDA),
one per step that can be in flight plus one, and copies it with a single
non-blocking transfer into a device buffer. A buffer comes round again only
after the step that used it has been waited for.

Every staged array starts on a 16-byte boundary: Triton specialises pointer
arguments on 16-byte alignment, so views at arbitrary offsets would compile
each input-preparation kernel in several variants, lazily, inside timed runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

RING_DEPTH = 3
ALIGN_BYTES = 16


class StepStaging:
    """Stages int32 arrays for one step: ``stage([a, b, c])`` returns device
    views holding ``a``, ``b`` and ``c``."""

    def __init__(self, device: torch.device, capacity: int = 4096, dtype: torch.dtype = torch.int32) -> None:
        self.device = device
        self.dtype = dtype
        self._align = ALIGN_BYTES // torch.empty((), dtype=dtype).element_size()
        self._pinned = device.type == "cuda"
        self._next = 0
        self._allocate(capacity)

    def _allocate(self, capacity: int) -> None:
        self.capacity = capacity
        self._host = [torch.empty(capacity, dtype=self.dtype, pin_memory=self._pinned) for _ in range(RING_DEPTH)]
        self._host_np = [h.numpy() for h in self._host]
        self._device_buf = torch.empty(capacity, dtype=self.dtype, device=self.device)

    def stage(self, arrays: Sequence[Sequence[int] | np.ndarray]) -> list[torch.Tensor]:
        sizes = [len(a) for a in arrays]
        starts, total = [], 0
        for size in sizes:
            starts.append(total)
            total += -(-size // self._align) * self._align
        if total > self.capacity:
            # Old buffers stay alive while queued copies read them (the
            # caching host allocator waits for those copies before reuse).
            self._allocate(max(total, 2 * self.capacity))
        slot = self._next
        self._next = (self._next + 1) % RING_DEPTH
        host_np = self._host_np[slot]
        for array, start, size in zip(arrays, starts, sizes):
            host_np[start : start + size] = array
        device_buf = self._device_buf
        device_buf[:total].copy_(self._host[slot][:total], non_blocking=True)
        return [device_buf[start : start + size] for start, size in zip(starts, sizes)]
