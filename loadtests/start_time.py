"""An engine's first start on a machine against its second: what remembering row choice's measurements saves.

Each start is ``EngineCore(EngineConfig(...))`` in a fresh process (imports
apart: the clock runs around the constructor only), on the default model,
with one cache directory for the whole run: a **first** start measures
(``--remeasure``: the crossover and the prompt-row checks), a **second** one
finds them remembered (`engine.layers.row_choice_cache`). Alternating rounds;
prints the medians of ``--rounds`` and the ratio second / first.

    python -m agentgate.loadtests.start_time
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile

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
    seconds: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="agentgate-start-time-") as cache_dir:
        for round_number in range(args.rounds):
            for variant in VARIANTS:
                took, weights = start_seconds(cache_dir, variant)
                seconds[variant].append(took)
                print(f"round {round_number + 1} {variant}: {took:.2f} s ({weights})", flush=True)
    first, second = (statistics.median(seconds[v]) for v in VARIANTS)
    print(f"median start: first {first:.2f} s, second {second:.2f} s, second/first x{second / first:.2f}")


if __name__ == "__main__":
    main()
