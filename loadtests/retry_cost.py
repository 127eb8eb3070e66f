"""What a retried greedy request repeating itself costs (issue 35), side by side in one process.

A retry, or an agent's next turn, finds its history in the prefix cache and computes only a
short suffix. Since issue 35 those prompt rows compute the same numbers however many of them
run (`engine.step_rows`): the dense row-invariant form of every linear, and attention in
tiles aligned to positions. Before, a few rows went through the int4 kernel and one SDPA call
per sequence, cheaper for few rows but rounding otherwise than the whole prompt had.

Two engines on the default model, alternating rounds: ``invariant`` (as built) and ``by count``
(the rule before: every row chosen by the pass's row count, one SDPA call per sequence). Per
round and engine, for each suffix length: a fresh ``--history``-token prompt is prefilled (not
timed), then the same history plus a suffix of that many new tokens is sent and the seconds
to its first token are timed. Prints medians of ``--rounds`` and the ratio invariant / by count.

    python -m agentgate.loadtests.retry_cost
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from agentgate.engine.attention import torch as torch_attention
from agentgate.engine.attention.torch_prompt import gather_context
from agentgate.engine.config import EngineConfig
from agentgate.engine.core import EngineCore
from agentgate.engine.runner import overlap
from agentgate.engine.sampling_params import SamplingParams

VARIANTS = ("invariant", "by count")


def one_call_attention(query, k_cache, v_cache, block_table, seq_len, scale, group) -> torch.Tensor:
    """The prompt attention before issue 35: one SDPA call over the sequence's context."""
    q_len = query.shape[0]
    q = query.transpose(0, 1)[None]
    k = gather_context(k_cache, block_table, seq_len).transpose(0, 1).repeat_interleave(group, 0)
    v = gather_context(v_cache, block_table, seq_len).transpose(0, 1).repeat_interleave(group, 0)
    q_pos = torch.arange(seq_len - q_len, seq_len)
    mask = torch.zeros(q_len, seq_len, dtype=k.dtype)
    mask.masked_fill_(torch.arange(seq_len)[None, :] > q_pos[:, None], float("-inf"))
    out = F.scaled_dot_product_attention(q.to(k.dtype), k[None], v[None], attn_mask=mask, scale=scale)
    return out[0].transpose(0, 1)


@contextlib.contextmanager
def by_count() -> Iterator[None]:
    """The rule before issue 35, while the block runs: no rows described as prompt rows."""
    saved = overlap.decode_rows, torch_attention.prompt_attention
    overlap.decode_rows, torch_attention.prompt_attention = lambda *_: contextlib.nullcontext(), one_call_attention
    try:
        yield
    finally:
        overlap.decode_rows, torch_attention.prompt_attention = saved


def tokens(seed: int, length: int) -> list[int]:
    """Distinct tokens per seed (no prefix-cache hits between rounds)."""
    return [100 + (seed * 7919 + j * 31) % 20000 for j in range(length)]


def run(core: EngineCore, request_id: str, prompt: list[int]) -> float:
    start = time.perf_counter()
    core.add_request(request_id, prompt, SamplingParams(temperature=0, max_tokens=1, ignore_eos=True))
    while core.has_work:
        core.step()
    return time.perf_counter() - start


def suffix_seconds(core: EngineCore, seed: int, history: int, suffix: int, tag: str) -> float:
    prompt = tokens(seed, history)
    run(core, f"{tag}-history", prompt)
    return run(core, f"{tag}-suffix", prompt + tokens(seed + 1, suffix))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--history", type=int, default=1024)
    parser.add_argument("--suffixes", type=int, nargs="+", default=[16, 48, 128])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    cores = {v: EngineCore(EngineConfig(num_kv_blocks=2048, max_model_len=4096)) for v in VARIANTS}
    print(f"{cores['invariant'].runner.weights}", flush=True)
    results: dict[tuple[str, int], list[float]] = {(v, s): [] for v in VARIANTS for s in args.suffixes}
    for r in range(args.rounds + 1):  # the first round warms up and is not counted
        for v in VARIANTS if r % 2 else tuple(reversed(VARIANTS)):
            for s in args.suffixes:
                with by_count() if v == "by count" else contextlib.nullcontext():
                    seconds = suffix_seconds(cores[v], 1000 * r + s, args.history, s, f"{v}-{r}-{s}")
                if r:
                    results[v, s].append(seconds)
                print(f"round {r} {v:9} suffix {s:4}: {1000 * seconds:7.1f} ms", flush=True)
    print(f"\nmedians of {args.rounds} rounds, {args.history}-token cached history:")
    for s in args.suffixes:
        inv, old = (statistics.median(results[v, s]) for v in VARIANTS)
        print(f"  suffix {s:4}: invariant {1000 * inv:7.1f} ms  by count {1000 * old:7.1f} ms  x{inv / old:.2f}")
    for core in cores.values():
        core.shutdown()


if __name__ == "__main__":
    main()
