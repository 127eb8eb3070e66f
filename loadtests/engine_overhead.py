"""Host time per engine step with the model taken out.

The null runner answers instantly, so what is timed is the engine core's own
work per step: draining aborts, scheduling (with its block allocation and
prefix-cache bookkeeping) and applying the step's sampled tokens. Printed per
batch size, for both pipelines (one step in flight, as with the sync runner,
and two, as with the overlapped runner).

    python -m agentgate.loadtests.engine_overhead
"""

from __future__ import annotations

import argparse
import statistics
import time

from agentgate.engine.config import EngineConfig
from agentgate.engine.core import EngineCore
from agentgate.engine.runner.null import NullRunner
from agentgate.engine.sampling_params import SamplingParams


def time_steps(batch: int, in_flight: int, prompt_len: int, steps: int) -> tuple[float, float]:
    """Median and p99 microseconds per decode step at ``batch`` running requests."""
    runner = NullRunner(num_blocks=1 << 16, block_size=16, max_steps_in_flight=in_flight)
    core = EngineCore(EngineConfig(max_num_seqs=batch, max_num_batched_tokens=max(8192, batch * prompt_len)), runner)
    params = SamplingParams(temperature=0.0, max_tokens=steps + 64, ignore_eos=True)
    for i in range(batch):
        core.add_request(f"r{i}", [(i * 7 + j) % 30000 + 10 for j in range(prompt_len)], params)
    for _ in range(4):  # admit and prefill everything
        core.step()
    samples = []
    for _ in range(steps):
        start = time.perf_counter_ns()
        core.step()
        samples.append((time.perf_counter_ns() - start) / 1e3)
    samples.sort()
    return statistics.median(samples), samples[int(0.99 * (len(samples) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-sizes", default="1,32,256")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--prompt-len", type=int, default=128)
    args = parser.parse_args()
    for batch in (int(b) for b in args.batch_sizes.split(",")):
        for in_flight in (1, 2):
            p50, p99 = time_steps(batch, in_flight, args.prompt_len, args.steps)
            print(
                f"batch {batch:4d}, {in_flight} step(s) in flight: {p50:8.1f} us/step median, "
                f"{p99:8.1f} us p99, {p50 / batch:6.2f} us per request"
            )


if __name__ == "__main__":
    main()
