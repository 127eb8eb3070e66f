"""Where a step's sampled tokens land on the host: preallocated pinned
buffers, one set per step that can be in flight plus one, each with an event
recorded again every time the set comes round.

Copying into a new pinned tensor and a new event per output per step costs
host time (pinned allocations, event creation) inside the loop that must stay
ahead of the device; the ring pays for them once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agentgate.engine.runner.sampling.batch import SamplerOutput
from agentgate.engine.sampling_params import MAX_LOGPROBS

RING_DEPTH = 3  # steps in flight (2) plus one


@dataclass
class HostOutput:
    """One step's results on the host (views into a ring slot on CUDA);
    readable once ``event`` (None on CPU) has completed."""

    tokens: torch.Tensor
    logprobs: torch.Tensor | None
    top_ids: torch.Tensor | None
    top_logprobs: torch.Tensor | None
    event: torch.cuda.Event | None
    overridden: torch.Tensor | None = None  # [N] bool (SamplerOutput.overridden)


class _Slot:
    def __init__(self, max_rows: int) -> None:
        def pinned(size: int, dtype: torch.dtype) -> torch.Tensor:
            return torch.empty(size, dtype=dtype, pin_memory=True)

        self.tokens = pinned(max_rows, torch.long)
        self.logprobs = pinned(max_rows, torch.float32)
        self.top_ids = pinned(max_rows * MAX_LOGPROBS, torch.long)
        self.top_logprobs = pinned(max_rows * MAX_LOGPROBS, torch.float32)
        self.overridden = pinned(max_rows, torch.bool)
        self.event = torch.cuda.Event()


class OutputRing:
    """Copies each step's `SamplerOutput` to the host on a separate stream,
    without blocking. A slot comes round again only after RING_DEPTH steps,
    by which time the engine has waited for (and read) its step."""

    def __init__(self, max_rows: int, device: torch.device) -> None:
        self.device = device
        self._cuda = device.type == "cuda"
        self._stream = torch.cuda.Stream(device) if self._cuda else None
        self._slots = [_Slot(max_rows) for _ in range(RING_DEPTH)] if self._cuda else []
        self._next = 0

    def copy_out(self, result: SamplerOutput) -> HostOutput:
        if not self._cuda:
            return HostOutput(
                result.token_ids, result.logprobs, result.top_token_ids, result.top_logprobs, None, result.overridden
            )
        slot = self._slots[self._next]
        self._next = (self._next + 1) % RING_DEPTH
        stream = self._stream
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            outs = []
            for tensor, buffer in (
                (result.token_ids, slot.tokens),
                (result.logprobs, slot.logprobs),
                (result.top_token_ids, slot.top_ids),
                (result.top_logprobs, slot.top_logprobs),
                (result.overridden, slot.overridden),
            ):
                if tensor is None:
                    outs.append(None)
                    continue
                tensor.record_stream(stream)  # the compute stream's allocator must not reuse it before the copy
                host = buffer[: tensor.numel()].view(tensor.shape)
                host.copy_(tensor, non_blocking=True)
                outs.append(host)
            slot.event.record(stream)
        tokens, logprobs, top_ids, top_logprobs, overridden = outs
        return HostOutput(tokens, logprobs, top_ids, top_logprobs, slot.event, overridden)
