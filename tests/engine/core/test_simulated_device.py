"""The engine loop overlaps host and device: with a runner whose "device" is
a worker thread taking D per step and host work H per step, the overlapped
loop's step approaches max(H, D) while the sync loop's is H + D.
(`pytest -k simulated_device` selects these.)"""

import pytest

from agentgate.loadtests.simulated_device import step_time

MS = 1e-3


# Long enough steps that a loaded machine's wake-up delays (a few ms) stay small beside them.
@pytest.mark.parametrize("host_ms,device_ms", [(30, 45), (45, 30)], ids=["device-bound", "host-bound"])
def test_simulated_device_overlapped_step_approaches_max_of_host_and_device(host_ms, device_ms):
    host, device = host_ms * MS, device_ms * MS
    # The best of three: a loaded machine only ever adds time. Sleeps never
    # run short, so H + D is a floor for the sync loop; the margins above it
    # absorb scheduling delays.
    sync = min(step_time(host, device, overlapped=False, steps=15) for _ in range(3))
    overlapped = min(step_time(host, device, overlapped=True, steps=15) for _ in range(3))
    assert sync >= 0.97 * (host + device), sync
    assert overlapped < max(host, device) + 0.4 * min(host, device), (overlapped, sync)
    assert sync / overlapped > 1.25, (sync, overlapped)


def test_simulated_device_runner_waits_for_its_device():
    """The device really takes D: a sync step cannot be shorter."""
    assert step_time(1 * MS, 20 * MS, overlapped=False, steps=10) >= 0.97 * 21 * MS
