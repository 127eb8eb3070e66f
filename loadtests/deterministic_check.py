"""What ``--deterministic`` buys and costs on a real model, side by side.

For each mode (off, on) loads the model and runs the chat prompts of
`quant_check.PROMPTS` greedily, all together and then each alone (prefix
cache off, so nothing computed in the batch is reused alone), and prints how
many answers agree token for token and bit for bit in their logprobs, and
the seconds each run took (the cost of the mode, batched and alone).

    python -m agentgate.loadtests.deterministic_check                    # the default model
    python -m agentgate.loadtests.deterministic_check --dtype float32 --quantization none
"""

from __future__ import annotations

import argparse
import time

from agentgate.engine import LLM, SamplingParams
from agentgate.loadtests.quant_check import PROMPTS


def answers(llm: LLM, prompts: list[str], params: SamplingParams) -> tuple[list[tuple[list[int], list[float]]], float]:
    start = time.perf_counter()
    outs = llm.chat([[{"role": "user", "content": p}] for p in prompts], params)
    return [(o.token_ids, [entry.logprob for entry in o.logprobs or []]) for o in outs], time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--quantization", default="auto")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()
    prompts = PROMPTS[: args.prompts]
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True, logprobs=1)
    rows = []
    for deterministic in (False, True):
        llm = LLM(
            args.model,
            dtype=args.dtype,
            quantization=args.quantization,
            deterministic=deterministic,
            enable_prefix_caching=False,
        )
        batched, batched_s = answers(llm, prompts, params)
        alone, alone_s = [], 0.0
        for prompt in prompts:
            [answer], seconds = answers(llm, [prompt], params)
            alone.append(answer)
            alone_s += seconds
        tokens = sum(a[0] == b[0] for a, b in zip(batched, alone))
        bitwise = sum(a == b for a, b in zip(batched, alone))
        rows.append((deterministic, tokens, bitwise, batched_s, alone_s))
        print(
            f"deterministic={'on ' if deterministic else 'off'} ({llm.core.runner.weights}): "
            f"{tokens}/{len(prompts)} equal tokens, {bitwise}/{len(prompts)} bitwise logprobs; "
            f"batched {batched_s:.1f} s, alone {alone_s:.1f} s",
            flush=True,
        )
    (_, _, _, off_b, off_a), (_, _, _, on_b, on_a) = rows
    print(f"cost of --deterministic: batched x{on_b / off_b:.2f}, alone x{on_a / off_a:.2f}")


if __name__ == "__main__":
    main()
