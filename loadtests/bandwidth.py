"""How fast this machine streams memory: ``python -m agentgate.loadtests.bandwidth``.

A decode step at small batch reads every weight once, so bytes per step
divided by this figure is the step's floor: no kernel can run it faster.
The figure is a streaming read at the engine's thread count (torch's
intra-op threads): a float32 tensor far larger than the caches (512 MB by
default), summed a few times, the fastest run kept (the least disturbed by
neighbours). Allocating and filling the tensor costs ~0.2 s and each read
~15 ms at 35 GB/s, so the whole measurement stays well under two seconds.

    python -m agentgate.loadtests.bandwidth                 # torch's thread count, 512 MB, 5 reads
    python -m agentgate.loadtests.bandwidth --threads 1 --megabytes 256
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Bandwidth:
    """A streaming read's speed: bytes read per second at ``threads`` threads."""

    bytes_per_second: float
    threads: int
    megabytes: int

    @property
    def gb_per_s(self) -> float:
        return self.bytes_per_second / 1e9

    def floor_ms(self, nbytes: int) -> float:
        """The least time reading ``nbytes`` once can take, in milliseconds."""
        return nbytes / self.bytes_per_second * 1e3

    def line(self) -> str:
        return (
            f"memory: {self.gb_per_s:.1f} GB/s streaming read ({self.megabytes} MB tensor summed at "
            f"{self.threads} threads, fastest of runs)"
        )


def measure(threads: int | None = None, megabytes: int = 512, repeat: int = 5) -> Bandwidth:
    """The fastest of ``repeat`` sums of a ``megabytes`` float32 tensor at ``threads`` threads
    (None: torch's current count; the count is put back afterwards)."""
    previous = torch.get_num_threads()
    threads = threads or previous
    torch.set_num_threads(threads)
    try:
        data = torch.ones(megabytes * 10**6 // 4)  # filled, so every page is mapped before timing
        data.sum()  # a first read warms the threads
        best = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            data.sum()
            best = min(best, time.perf_counter() - start)
    finally:
        torch.set_num_threads(previous)
    return Bandwidth(data.numel() * data.element_size() / best, threads, megabytes)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=None, help="threads to read with (default: torch's count)")
    parser.add_argument("--megabytes", type=int, default=512, help="size of the tensor read")
    parser.add_argument("--repeat", type=int, default=5, help="timed reads (the fastest is kept)")
    args = parser.parse_args(argv)
    print(measure(args.threads, args.megabytes, args.repeat).line(), flush=True)


if __name__ == "__main__":
    main()
