"""An engine's first start on a machine against its second: what remembering row choice's measurements saves.

Each start is ``EngineCore(EngineConfig(...))`` in a fresh process (imports
apart: the clock runs around the constructor only), on the default model,
with one cache directory for the whole run: a **first** start measures
(``--remeasure``: the crossover and the prompt-row checks), a **second** one
starts next, under the cache's rule (`engine.kernel_choice.row_choice_cache`: the
prompt-row checks are remembered; a crossover measured noisily, as on a busy
machine, is measured again, up to 3 times). Alternating rounds; then, once
the crossover too is remembered, ``--rounds`` **remembered** starts. Prints
the medians and the ratios to the first start.

    python -m agentgate.loadtests.start_time
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile

from agentgate.engine.kernel_choice.row_choice_cache import NOISY_TRIES

CHILD = """
import sys, time
from agentgate.engine.config import EngineConfig
from agentgate.engine.core import EngineCore
config = EngineConfig(cache_dir=sys.argv[1], remeasure=sys.argv[2] == "first")
start = time.perf_counter()
core = EngineCore(config)
print(time.perf_counter() - start)
print(core.runner.weights)
core.shutdown()
"""
VARIANTS = ("first", "second")
SETTLING_STARTS = NOISY_TRIES  # starts after which a noisy crossover is kept


def start_seconds(cache_dir: str, variant: str) -> tuple[float, str]:
    """One start's seconds and its start-up line's weights, in a process of its own."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD, cache_dir, variant], capture_output=True, text=True, check=True, timeout=600
    )
    seconds, weights = done.stdout.strip().splitlines()[-2:]
    return float(seconds), weights


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    seconds: dict[str, list[float]] = {v: [] for v in (*VARIANTS, "remembered")}
    with tempfile.TemporaryDirectory(prefix="agentgate-start-time-") as cache_dir:
        for round_number in range(args.rounds):
            for variant in VARIANTS:
                took, weights = start_seconds(cache_dir, variant)
                seconds[variant].append(took)
                print(f"round {round_number + 1} {variant}: {took:.2f} s ({weights})", flush=True)
        for _ in range(SETTLING_STARTS):
            took, weights = start_seconds(cache_dir, "second")
            print(f"settling: {took:.2f} s ({weights})", flush=True)
            if "(remembered" in weights:
                break
        for round_number in range(args.rounds):
            took, weights = start_seconds(cache_dir, "second")
            seconds["remembered"].append(took)
            print(f"round {round_number + 1} remembered: {took:.2f} s ({weights})", flush=True)
    first, second, remembered = (statistics.median(seconds[v]) for v in seconds)
    print(
        f"median start: first {first:.2f} s, second {second:.2f} s (x{second / first:.2f}), "
        f"remembered {remembered:.2f} s (x{remembered / first:.2f})"
    )


if __name__ == "__main__":
    main()
