"""StepStaging: every staged array lands intact and starts on a 16-byte
boundary (Triton specialises kernels on pointer alignment), whatever the
lengths before it; the ring grows when a step needs more room."""

import numpy as np
import torch

from agentgate.engine.runner.staging import RING_DEPTH, StepStaging


def test_views_hold_the_arrays_and_start_16_byte_aligned():
    staging = StepStaging(torch.device("cpu"), capacity=64)
    for lengths in ([3, 5, 0, 7], [1, 1, 1], [4, 9, 2, 0, 13]):
        arrays = [list(range(100 * i, 100 * i + n)) for i, n in enumerate(lengths)]
        views = staging.stage(arrays)
        for array, view in zip(arrays, views):
            assert view.tolist() == array and view.dtype == torch.int32
            assert view.data_ptr() % 16 == 0


def test_the_ring_grows_for_a_large_step_and_keeps_staging():
    staging = StepStaging(torch.device("cpu"), capacity=8)
    big = np.arange(50, dtype=np.int32)
    for _ in range(RING_DEPTH + 1):
        small, large = staging.stage([[7, 8], big])
        assert small.tolist() == [7, 8] and torch.equal(large, torch.from_numpy(big))
    assert staging.capacity >= 52
