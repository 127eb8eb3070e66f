"""A synthetic agent trace in the Mooncake format (multi-turn, as AIPerf reads it), at a real
deployment's scale: the repository's ``loadtests/traces/agent_sessions.jsonl`` is this module's
output with its defaults.

    python -m agentgate.loadtests.synthetic_trace [--sessions 16] [--seed 0] > trace.jsonl

Each session is one coding agent: every session shares the harness's system prompt and tools
(``--shared-blocks`` blocks of 512 tokens), then has a task of its own (1-2 blocks); each turn
but the last calls a tool (a reply of 64-256 tokens) and the next turn adds the tool's result
(256-2,048 tokens, log-uniform) after the tool ran for ``delay`` ms (log-normal, median 1.5 s,
sigma 0.8, cut at 20 s); the last turn answers in 256-768 tokens. Sessions arrive as a Poisson
process, ``--mean-gap`` seconds apart on average, with 3-6 turns each.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Iterator

from agentgate.loadtests.mooncake_trace import BLOCK_TOKENS


def synthetic_rows(
    sessions: int = 16, seed: int = 0, shared_blocks: int = 6, mean_gap_s: float = 2.0
) -> Iterator[dict[str, object]]:
    """The trace's lines: every session's turns, sessions in order of arrival."""
    rng = random.Random(seed)
    next_id = shared_blocks  # ids 0 .. shared_blocks-1 are the shared system prompt
    start_ms = 0.0
    for number in range(sessions):
        start_ms += rng.expovariate(1 / mean_gap_s) * 1000 if number else 0.0
        task_blocks = rng.randint(1, 2)
        hash_ids = list(range(shared_blocks)) + list(range(next_id, next_id + task_blocks))
        next_id += task_blocks
        input_length = shared_blocks * BLOCK_TOKENS + task_blocks * BLOCK_TOKENS - rng.randrange(BLOCK_TOKENS // 2)
        turns = rng.randint(3, 6)
        for turn in range(turns):
            last = turn == turns - 1
            output_length = rng.randint(256, 768) if last else rng.randint(64, 256)
            row: dict[str, object] = {"session_id": f"agent-{number}"}
            if turn == 0:
                row["timestamp"] = round(start_ms)
            else:
                row["delay"] = round(min(20_000.0, rng.lognormvariate(math.log(1500), 0.8)))
            row.update(input_length=input_length, output_length=output_length, hash_ids=list(hash_ids))
            yield row
            # The next turn: this reply and the tool's result follow the prompt.
            grown = input_length + output_length + round(math.exp(rng.uniform(math.log(256), math.log(2048))))
            blocks = math.ceil(grown / BLOCK_TOKENS)
            # The last block was partly filled: it is a new block once more text is in it.
            kept = (input_length // BLOCK_TOKENS) if input_length % BLOCK_TOKENS else len(hash_ids)
            fresh = blocks - kept
            hash_ids = hash_ids[:kept] + list(range(next_id, next_id + fresh))
            next_id += fresh
            input_length = grown


def main() -> None:
    p = argparse.ArgumentParser(
        prog="python -m agentgate.loadtests.synthetic_trace", description=__doc__.split("\n")[0]
    )
    p.add_argument("--sessions", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shared-blocks", type=int, default=6, help="the shared system prompt's 512-token blocks")
    p.add_argument("--mean-gap", type=float, default=2.0, help="mean seconds between sessions' arrivals")
    args = p.parse_args()
    for row in synthetic_rows(args.sessions, args.seed, args.shared_blocks, args.mean_gap):
        sys.stdout.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
