"""The compiled CPU decode attention against the torch path, side by side on the same batches:
``python -m agentgate.loadtests.cpu_attention_bench``.

One decode layer's attention (9 query / 3 KV heads of 64, SmolLM2-135M's shape; 16-token blocks in
shuffled order) for each case: batch 1, 16 and 50 rows, contexts of their own, and 48 rows sharing a
400-token prefix (agents with one system prompt: the torch path's cascade reads it once). The two
paths alternate call by call, ``--rounds`` rounds of ``--calls`` calls each; it prints each path's
median time per call, the ratio torch / compiled (above 1: the kernel is faster) and the largest
difference between their outputs. ``--dtype bfloat16`` for a bf16 cache.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from agentgate.engine.attention.cpu_native import load_native_attention
from agentgate.engine.attention.torch import _decode_attention, _DecodePlan

BLOCK = 16
HEADS, KV_HEADS, HEAD_DIM = 9, 3, 64
CASES = (  # name, rows, context, shared prefix tokens
    ("1 row, 460 tokens", 1, 460, 0),
    ("16 rows, 460 tokens each", 16, 460, 0),
    ("50 rows, 400 tokens each", 50, 400, 0),
    ("48 rows sharing a 400-token prefix, 30 of their own", 48, 430, 400),
)


def _batch(rows: int, context: int, shared: int, dtype: torch.dtype, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    blocks = -(-context // BLOCK)
    shared_blocks = shared // BLOCK
    total = shared_blocks + rows * (blocks - shared_blocks) + 2
    k_cache = torch.randn(total, BLOCK, KV_HEADS, HEAD_DIM, generator=generator).to(dtype)
    v_cache = torch.randn(total, BLOCK, KV_HEADS, HEAD_DIM, generator=generator).to(dtype)
    order = torch.randperm(total, generator=generator).int()
    tables = torch.empty(rows, blocks, dtype=torch.int32)
    tables[:, :shared_blocks] = order[:shared_blocks]
    tables[:, shared_blocks:] = order[shared_blocks : shared_blocks + rows * (blocks - shared_blocks)].view(rows, -1)
    lens = torch.full((rows,), context, dtype=torch.int32)
    query = torch.randn(rows, HEADS, HEAD_DIM, generator=generator).to(dtype)
    return query, k_cache, v_cache, tables, lens, shared_blocks


def _median_ms(calls: Callable[[], object], rounds: list[float], n: int) -> None:
    started = time.perf_counter()
    for _ in range(n):
        calls()
    rounds.append((time.perf_counter() - started) / n * 1e3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per case")
    parser.add_argument("--calls", type=int, default=20, help="calls per path per round")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    args = parser.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    with tempfile.TemporaryDirectory() as directory:
        native = load_native_attention(Path(directory))
    if native is None:
        print("the compiled kernel did not build here (see the log line above): nothing to compare")
        return 1
    print(
        f"decode attention, one layer, {args.dtype}, {torch.get_num_threads()} threads; medians of {args.rounds} rounds"
    )
    for name, rows, context, shared in CASES:
        query, k_cache, v_cache, tables, lens, shared_blocks = _batch(rows, context, shared, dtype)
        plan = _DecodePlan.build(query, k_cache, tables, lens, context, shared_blocks)

        def torch_path(plan=plan, query=query, k_cache=k_cache, v_cache=v_cache):
            return _decode_attention(query, k_cache, v_cache, 0.125, plan=plan)

        def compiled(query=query, k_cache=k_cache, v_cache=v_cache, tables=tables, lens=lens, context=context):
            return native(query, k_cache, v_cache, tables, lens, context, 0.125)

        difference = (torch_path().float() - compiled().float()).abs().max().item()
        torch_ms: list[float] = []
        compiled_ms: list[float] = []
        for _ in range(args.rounds):
            _median_ms(torch_path, torch_ms, args.calls)
            _median_ms(compiled, compiled_ms, args.calls)
        a, b = statistics.median(torch_ms), statistics.median(compiled_ms)
        print(
            f"  {name}: torch {a:.3f} ms, compiled {b:.3f} ms, torch / compiled x{a / b:.2f}, max diff {difference:.2e}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
