"""Where the device waits for the host: CUDA events at each step's first
enqueue and after its last kernel, timed in a plain loop (no profiler).

`StepEvents` wraps a runner's ``execute``: one event is recorded on the
compute stream just before the step enqueues anything, one just after
``execute`` returns, i.e. after the step's last kernel (the post-update; the
copy of its tokens to the host runs on another stream). Both events of step
N+1 are queued behind step N's kernels, so ``start(N+1) - end(N)`` is
exactly the time the device sat idle waiting for the host to enqueue step
N+1: zero when the host is ahead.

The events are created once and reused; recording one costs a few
microseconds of host time, the same for every runner measured.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class StepGaps:
    steps: int
    step_ms: float  # mean device time from one step's start to the next step's start
    gap_ms: float  # mean idle time between one step's end and the next step's start
    gap_share: float  # idle time over the whole span, 0..1


class StepEvents:
    """Records start/end events around the next ``capacity`` executes of ``runner``."""

    def __init__(self, runner, capacity: int) -> None:
        self.runner = runner
        self.starts = [torch.cuda.Event(enable_timing=True) for _ in range(capacity)]
        self.ends = [torch.cuda.Event(enable_timing=True) for _ in range(capacity)]
        self.recorded = 0
        self._original = None

    def __enter__(self) -> StepEvents:
        original = self._original = self.runner.execute

        def execute(step):
            if self.recorded >= len(self.starts):
                return original(step)
            index = self.recorded
            self.starts[index].record()
            handle = original(step)
            self.ends[index].record()
            self.recorded += 1
            return handle

        self.runner.execute = execute
        return self

    def __exit__(self, *exc) -> None:
        self.runner.execute = self._original

    def gaps(self) -> StepGaps:
        """Summarise the recorded steps (synchronizes with the device)."""
        n = self.recorded
        if n < 2:
            raise ValueError("at least two steps are needed to measure a gap")
        self.ends[n - 1].synchronize()
        idle = sum(self.ends[i].elapsed_time(self.starts[i + 1]) for i in range(n - 1))
        span = self.starts[0].elapsed_time(self.ends[n - 1])
        step_ms = self.starts[0].elapsed_time(self.starts[n - 1]) / (n - 1)
        return StepGaps(n, step_ms, idle / (n - 1), idle / span if span > 0 else 0.0)


def replay_ms(graph_replay, repeats: int = 200) -> float:
    """Mean device time of ``graph_replay()`` run back to back, measured with
    events as the steps are."""
    for _ in range(10):
        graph_replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        graph_replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / repeats
