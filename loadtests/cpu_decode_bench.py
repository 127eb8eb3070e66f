"""CPU decode attention over a shared prompt prefix, side by side.

    python -m agentgate.loadtests.cpu_decode_bench [--batch 16] [--shared 300] [--iters 50]

The agent workload's decode batch: ``batch`` sequences whose first
``--shared`` tokens (a system prompt of tool descriptions) sit in the same
prefix-cached blocks, followed by 50-300 tokens of their own, with the
default model's attention shape (9 query / 3 KV heads, dim 64, 16-token
blocks, shuffled block tables). It times one layer's decode attention of
the plain-torch backend reading every row's whole context
(``shared_prefix_blocks=0``) and reading the shared blocks once (cascade),
alternating the two, and prints both times, their ratio and the largest
difference between the outputs, per dtype.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import time

import torch

from agentgate.engine.attention.base import AttentionMetadata, count_shared_prefix_blocks
from agentgate.engine.attention.torch import paged_attention

BLOCK_SIZE = 16
NUM_HEADS, NUM_KV_HEADS, HEAD_DIM = 9, 3, 64


def _agent_batch(batch: int, shared: int, dtype: torch.dtype, seed: int = 0) -> tuple:
    rng = random.Random(seed)
    lens = [shared + rng.randint(50, 300) for _ in range(batch)]
    shared_blocks = shared // BLOCK_SIZE
    own_blocks = [-(-n // BLOCK_SIZE) - shared_blocks for n in lens]
    ids = list(range(shared_blocks + sum(own_blocks)))
    rng.shuffle(ids)
    prefix = [ids.pop() for _ in range(shared_blocks)]
    tables = [prefix + [ids.pop() for _ in range(n)] for n in own_blocks]
    width = max(len(t) for t in tables)
    k_cache = torch.randn(shared_blocks + sum(own_blocks), BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM).to(dtype)
    v_cache = torch.randn_like(k_cache)
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    qsl = torch.arange(batch + 1, dtype=torch.int32)
    meta = AttentionMetadata(
        slot_mapping=torch.full((batch,), -1),
        query_start_loc=qsl,
        seq_lens=seq_lens,
        block_tables=torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32),
        max_query_len=1,
        max_seq_len=max(lens),
        query_start_loc_cpu=qsl,
        seq_lens_cpu=seq_lens,
        shared_prefix_blocks=count_shared_prefix_blocks(tables),
    )
    query = torch.randn(batch, NUM_HEADS, HEAD_DIM).to(dtype)
    return meta, k_cache, v_cache, query


def _time(fn, iters: int) -> float:
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - start) / iters


def run(batch: int, shared: int, iters: int, dtype: torch.dtype) -> None:
    meta, k_cache, v_cache, query = _agent_batch(batch, shared, dtype)
    scale = HEAD_DIM**-0.5
    apart = dataclasses.replace(meta, shared_prefix_blocks=0)
    every_row = lambda: paged_attention(query, k_cache, v_cache, apart, scale)  # noqa: E731
    once = lambda: paged_attention(query, k_cache, v_cache, meta, scale)  # noqa: E731
    diff = (every_row().float() - once().float()).abs().max().item()
    times: dict[str, list[float]] = {"every row": [], "shared once": []}
    for _ in range(5):  # alternate, so both see the same machine
        times["every row"].append(_time(every_row, iters))
        times["shared once"].append(_time(once, iters))
    t_all, t_once = (statistics.median(v) * 1e6 for v in times.values())
    print(
        f"{str(dtype).removeprefix('torch.'):9s} batch {batch}, {shared} shared + own 50-300 tokens "
        f"({meta.shared_prefix_blocks} shared blocks): every row {t_all:7.0f} us, shared once {t_once:7.0f} us "
        f"per layer; every/once = {t_all / t_once:.2f}x (max diff {diff:.1e})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--shared", type=int, default=300, help="tokens of shared prompt prefix")
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()
    for dtype in (torch.bfloat16, torch.float32):
        run(args.batch, args.shared, args.iters, dtype)


if __name__ == "__main__":
    main()
