"""Decoding on a busy machine: each thread setting quiet and beside a
competing busy process that this benchmark starts itself.

For the default (`engine.cpu_threads.ThreadGovernor`), ``--cpu-threads`` =
every core, and ``--cpu-threads 1``: batch-``--batch`` decode tokens/s on
a quiet machine, then with ``--competitors`` processes spinning, and the
ratio busy/quiet (the aim: at least 0.4 with one of two cores taken). Each
figure is the median of ``--repeats`` timed windows of ``--seconds``, after
a warm-up long enough for the governor to look at the machine.

    python -m agentgate.loadtests.threads_bench
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time

import torch

from agentgate.engine.config import EngineConfig
from agentgate.engine.core import EngineCore
from agentgate.engine.sampling_params import SamplingParams


def spin(stop) -> None:
    """A busy program: burns one core until told to stop."""
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def tokens_per_second(core: EngineCore, batch: int, seconds: float) -> float:
    params = SamplingParams(temperature=0.0, max_tokens=1 << 20, ignore_eos=True)
    for i in range(batch):
        core.add_request(f"r{time.monotonic_ns()}-{i}", [100 + i + j for j in range(32)], params)
    while any(r.num_computed_tokens < r.num_prompt_tokens for r in core.scheduler.requests.values()):
        core.step()
    produced, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        produced += sum(len(out.new_token_ids) for out in core.step())
    elapsed = time.perf_counter() - start
    core.abort_requests(None)
    while core.has_work:
        core.step()
    return produced / elapsed


def measure(core: EngineCore, args: argparse.Namespace) -> float:
    tokens_per_second(core, args.batch, args.warmup)  # the governor looks at the machine meanwhile
    return statistics.median(tokens_per_second(core, args.batch, args.seconds) for _ in range(args.repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--competitors", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quantization", default="auto")
    args = parser.parse_args()
    cores = torch.get_num_threads()
    settings = {"default (governor)": None, f"--cpu-threads {cores}": cores, "--cpu-threads 1": 1}
    context = multiprocessing.get_context("spawn")
    print(
        f"{os.cpu_count()} cores, batch {args.batch}, {args.competitors} competing process(es), "
        f"quantization {args.quantization}"
    )
    for name, threads in settings.items():
        torch.set_num_threads(cores)
        core = EngineCore(
            EngineConfig(
                runner="sync",
                cpu_threads=threads,
                quantization=args.quantization,
                kv_cache_bytes=1 << 28,
                max_num_seqs=max(args.batch, 1),
            )
        )
        quiet = measure(core, args)
        stop = context.Event()
        competitors = [context.Process(target=spin, args=(stop,), daemon=True) for _ in range(args.competitors)]
        for process in competitors:
            process.start()
        try:
            busy = measure(core, args)
        finally:
            stop.set()
            for process in competitors:
                process.join(10)
        print(
            f"{name:>20}: quiet {quiet:7.1f} tok/s, busy {busy:7.1f} tok/s, busy/quiet {busy / quiet:.2f}, "
            f"threads at the end {torch.get_num_threads()}",
            flush=True,
        )
        core.shutdown()


if __name__ == "__main__":
    main()
