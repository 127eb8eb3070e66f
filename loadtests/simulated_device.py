"""Does the engine loop overlap host and device? A runner whose "device" is
a worker thread that spends a fixed time on each step, driven by the real
EngineCore loop: with host work H and device time D per step, the
overlapped loop's step time should approach max(H, D), the sync loop's is
H + D.

    python -m agentgate.loadtests.simulated_device --host-ms 10 --device-ms 15
"""

from __future__ import annotations

import argparse
import queue
import threading
import time

from agentgate.engine.config import EngineConfig
from agentgate.engine.core import EngineCore
from agentgate.engine.runner.null import NullRunner
from agentgate.engine.sampling_params import SamplingParams
from agentgate.engine.scheduling.scheduler_output import ModelRunnerOutput, SchedulerOutput


class SimulatedDeviceRunner(NullRunner):
    """The null runner's bookkeeping, plus ``host_s`` of host work per
    ``execute`` (the time a real runner spends building and enqueuing a
    step) and a device: a worker thread that runs the enqueued steps in
    order, ``device_s`` each. ``execute`` returns at once after enqueuing;
    ``wait`` blocks until the device has finished the step."""

    def __init__(self, host_s: float, device_s: float, max_steps_in_flight: int) -> None:
        super().__init__(num_blocks=1024, max_steps_in_flight=max_steps_in_flight)
        self.host_s, self.device_s = host_s, device_s
        self._queue: queue.Queue[threading.Event | None] = queue.Queue()
        self._device = threading.Thread(target=self._run_device, name="simulated-device", daemon=True)
        self._device.start()

    def _run_device(self) -> None:
        while (done := self._queue.get()) is not None:
            time.sleep(self.device_s)
            done.set()

    def execute(self, step: SchedulerOutput) -> tuple[threading.Event, ModelRunnerOutput]:
        time.sleep(self.host_s)
        output = super().execute(step)
        done = threading.Event()
        self._queue.put(done)
        return done, output

    def wait(self, handle: tuple[threading.Event, ModelRunnerOutput]) -> ModelRunnerOutput:
        done, output = handle
        done.wait()
        return output

    def shutdown(self) -> None:
        self._queue.put(None)
        self._device.join()


def step_time(host_s: float, device_s: float, overlapped: bool, steps: int = 40) -> float:
    """Seconds per decode step of one request decoding ``steps`` tokens."""
    runner = SimulatedDeviceRunner(host_s, device_s, max_steps_in_flight=2 if overlapped else 1)
    core = EngineCore(EngineConfig(runner="null", max_num_seqs=4), runner)
    try:
        core.add_request("r", [5, 6, 7], SamplingParams(temperature=0.0, max_tokens=steps + 1, ignore_eos=True))
        core.step()  # the prefill: launched, and resolved by the sync loop
        while runner.num_steps < 2:
            core.step()
        start, first = time.perf_counter(), runner.num_steps
        while core.has_work:
            core.step()
        return (time.perf_counter() - start) / (runner.num_steps - first)
    finally:
        core.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host-ms", type=float, default=10.0)
    parser.add_argument("--device-ms", type=float, default=15.0)
    args = parser.parse_args()
    host, device = args.host_ms / 1e3, args.device_ms / 1e3
    sync, overlap = step_time(host, device, False), step_time(host, device, True)
    print(
        f"H={args.host_ms} ms D={args.device_ms} ms: sync step {sync * 1e3:.2f} ms (H + D = "
        f"{(host + device) * 1e3:.1f}), overlapped step {overlap * 1e3:.2f} ms (max(H, D) = "
        f"{max(host, device) * 1e3:.1f})"
    )
    print(f"sync / overlapped step time: {sync / overlap:.3f} (ideal {(host + device) / max(host, device):.3f})")


if __name__ == "__main__":
    main()
