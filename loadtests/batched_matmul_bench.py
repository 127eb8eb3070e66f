"""``--batched-matmul auto`` against ``quantized``, side by side in one process (the CPU, quantized weights).

Two engines on the default model, the same KV size, alternating rounds; per
round and engine:

- **prefill**: ``--agents`` prompts of ``--prompt-len`` tokens admitted
  together, the seconds until every one has its first token (the engine steps
  in chunks of ``max_num_batched_tokens``: what agents waiting on a first
  token see);
- **decode at batch 1 and ``--agents``**: output tokens/s over ``--decode``
  greedy tokens per request after the prompts are in.

Prints the medians of ``--rounds`` and the ratios auto / quantized.

    python -m agentgate.loadtests.batched_matmul_bench
"""

from __future__ import annotations

import argparse
import statistics
import time

from agentgate.engine.config import EngineConfig
from agentgate.engine.core import EngineCore
from agentgate.engine.sampling_params import SamplingParams

VARIANTS = ("auto", "quantized")


def prompt(i: int, length: int) -> list[int]:
    """A distinct prompt per request and round (no prefix-cache hits between them)."""
    return [100 + (i * 7919 + j * 31) % 20000 for j in range(length)]


def prefill_seconds(core: EngineCore, agents: int, length: int, tag: str) -> float:
    params = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
    start = time.perf_counter()
    for i in range(agents):
        core.add_request(f"{tag}-{i}", prompt(hash(tag) % 1000 + i, length), params)
    while core.has_work:
        core.step()
    return time.perf_counter() - start


def decode_tokens_per_second(core: EngineCore, batch: int, tokens: int, tag: str) -> float:
    params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
    for i in range(batch):
        core.add_request(f"{tag}-{i}", prompt(hash(tag) % 1000 + i, 32), params)
    while any(r.num_computed_tokens < r.num_prompt_tokens for r in core.scheduler.requests.values()):
        core.step()
    produced, start = 0, time.perf_counter()
    while core.has_work:
        produced += sum(len(out.new_token_ids) for out in core.step())
    return produced / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--prompt-len", type=int, default=460)
    parser.add_argument("--decode", type=int, default=48, help="tokens decoded per request")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    cores = {v: EngineCore(EngineConfig(batched_matmul=v, num_kv_blocks=2048, max_model_len=2048)) for v in VARIANTS}
    for v, core in cores.items():
        print(f"{v}: {core.runner.weights}", flush=True)
    results: dict[str, dict[str, list[float]]] = {
        v: {"prefill_s": [], "tok/s b1": [], "tok/s bN": []} for v in VARIANTS
    }
    for r in range(args.rounds + 1):  # the first round warms up and is not counted
        for v in VARIANTS if r % 2 else reversed(VARIANTS):
            core, tag = cores[v], f"{v}-{r}"
            figures = {
                "prefill_s": prefill_seconds(core, args.agents, args.prompt_len, f"{tag}-p"),
                "tok/s b1": decode_tokens_per_second(core, 1, args.decode, f"{tag}-d1"),
                "tok/s bN": decode_tokens_per_second(core, args.agents, args.decode, f"{tag}-dn"),
            }
            if r:
                for name, value in figures.items():
                    results[v][name].append(value)
            print(f"round {r} {v}: " + ", ".join(f"{k} {x:.2f}" for k, x in figures.items()), flush=True)
    print(f"\nmedians of {args.rounds} rounds ({args.agents} agents, {args.prompt_len}-token prompts):")
    for name in ("prefill_s", "tok/s b1", "tok/s bN"):
        auto, quantized = (statistics.median(results[v][name]) for v in VARIANTS)
        print(f"  {name:<10} auto {auto:8.2f}  quantized {quantized:8.2f}  auto/quantized x{auto / quantized:.2f}")
    for core in cores.values():
        core.shutdown()


if __name__ == "__main__":
    main()
