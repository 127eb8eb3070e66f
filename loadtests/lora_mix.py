"""The cost of mixing LoRA adapters in one batch (issue 53, docs/lora.md), in one process.

    python -m agentgate.loadtests.lora_mix [--agents 16] [--output-tokens 32] [--rank 8] [--rounds 1]
        [--max-loras 4]

One engine (the default model unless ``--model``, started with ``--enable-lora``) loads four
random rank-``--rank`` adapters on every projection (written to a temporary directory) and runs
``--agents`` requests at once, greedy, ``--output-tokens`` each (EOS ignored), three ways: every
request on the base model (0 adapters), all through one adapter (1), spread over four (4). Each
way runs after a warm-up and ``--rounds`` times (prompts differ per run: no run hits another's
prefix cache). Prints output tokens/s per way (median over the rounds) and the ratios to the base
model, the memory one adapter holds, and the time one load took. The four adapters are stored
(``--max-cpu-loras 4``); ``--max-loras`` below 4 makes the four-adapter way hold the requests of
adapters past it a step (`engine.scheduling.adapter_slots`): the held steps are printed too. Run it
alone: it measures CPU time.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from agentgate.engine import LLM, SamplingParams
from agentgate.engine.lora.synthetic import model_dims, write_adapter

WAYS = {"0 adapters": 0, "1 adapter": 1, "4 adapters": 4}


def run(llm: LLM, agents: int, output_tokens: int, distinct: int, salt: str) -> float:
    """Output tokens/s of ``agents`` requests at once over ``distinct`` adapters (0: the base model)."""
    prompts = [f"{salt} agent {i}: write a short note about tool call {i}." for i in range(agents)]
    loras = [f"a{i % distinct}" if distinct else "" for i in range(agents)]
    params = SamplingParams(temperature=0, max_tokens=output_tokens, ignore_eos=True)
    start = time.perf_counter()
    outs = llm.generate(prompts, params, lora=loras)
    elapsed = time.perf_counter() - start
    return sum(len(o.token_ids) for o in outs) / elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--output-tokens", type=int, default=32)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--max-loras", type=int, default=4, help="adapters in one step (4 stored)")
    args = parser.parse_args(argv)
    llm = LLM(args.model, enable_lora=True, max_loras=args.max_loras, max_cpu_loras=4, max_lora_rank=max(16, args.rank))
    runner = llm.core.runner
    dims = model_dims(runner.model_config)
    with tempfile.TemporaryDirectory() as tmp:
        loads = []
        for i in range(4):
            path = write_adapter(Path(tmp) / f"a{i}", dims, rank=args.rank, seed=i)
            llm.core.load_lora(f"a{i}", str(path))
            loads.append(runner.lora.last_load_seconds)
    adapter = runner.lora.get("a0")
    print(f"model {runner.architecture}, {runner.weights}; {args.agents} agents x {args.output_tokens} tokens")
    print(f"--max-loras {args.max_loras}, 4 adapters stored")
    print(f"one adapter (rank {args.rank}, 7 projections x {dims['layers']} layers): {adapter.nbytes / 2**20:.2f} MiB")
    print(f"a load took {statistics.median(loads) * 1000:.0f} ms (median of 4; first {loads[0] * 1000:.0f} ms)")
    run(llm, args.agents, 4, 4, "warm-up")
    figures: dict[str, list[float]] = {way: [] for way in WAYS}
    for r in range(args.rounds):
        for way, distinct in WAYS.items():
            figures[way].append(run(llm, args.agents, args.output_tokens, distinct, f"round {r} {way}"))
    base = statistics.median(figures["0 adapters"])
    for way, values in figures.items():
        tps = statistics.median(values)
        print(f"{way:>11}: {tps:7.1f} output tokens/s ({tps / base:.2f} x the base model)")
    print(f"steps that held a request for its adapter: {llm.core.stats().num_lora_held_steps}")


if __name__ == "__main__":
    main()
