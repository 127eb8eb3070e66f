"""Rotating host buffers for the few bytes each step sends to the device.

The host never writes memory that an in-flight copy may still read: each
step snapshots its arrays into the next buffer of a ring (pinned on CUDA),
one per step that can be in flight plus one, and copies it with a single
non-blocking transfer into a device buffer. A buffer comes round again only
after the step that used it has been waited for.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

RING_DEPTH = 3


class StepStaging:
    """Stages int32 arrays for one step: ``stage([a, b, c])`` returns device
    views holding ``a``, ``b`` and ``c``."""

    def __init__(self, device: torch.device, capacity: int = 4096, dtype: torch.dtype = torch.int32) -> None:
        self.device = device
        self.dtype = dtype
        self._pinned = device.type == "cuda"
        self._next = 0
        self._allocate(capacity)

    def _allocate(self, capacity: int) -> None:
        self.capacity = capacity
        self._host = [
            torch.empty(capacity, dtype=self.dtype, pin_memory=self._pinned) for _ in range(RING_DEPTH)
        ]
        self._host_np = [h.numpy() for h in self._host]
        self._device_buf = torch.empty(capacity, dtype=self.dtype, device=self.device)

    def stage(self, arrays: Sequence[Sequence[int] | np.ndarray]) -> list[torch.Tensor]:
        sizes = [len(a) for a in arrays]
        total = sum(sizes)
        if total > self.capacity:
            # Old buffers stay alive while queued copies read them (the
            # caching host allocator waits for those copies before reuse).
            self._allocate(max(total, 2 * self.capacity))
        slot = self._next
        self._next = (self._next + 1) % RING_DEPTH
        host_np = self._host_np[slot]
        offset = 0
        for array, size in zip(arrays, sizes):
            host_np[offset : offset + size] = array
            offset += size
        device_buf = self._device_buf
        device_buf[:total].copy_(self._host[slot][:total], non_blocking=True)
        views, offset = [], 0
        for size in sizes:
            views.append(device_buf[offset : offset + size])
            offset += size
        return views
