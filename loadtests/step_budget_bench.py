"""The step budget in time (``--max-step-ms``, `engine.scheduling.step_budget`) on vs off, in one process.

    python -m agentgate.loadtests.step_budget_bench [--concurrency 16] [--requests 24] [--rounds 2]

AIPerf's shape: ``--concurrency`` requests at a time (each one that ends is replaced, up to
``--requests`` per run) of about ``--prompt-tokens`` random token ids (a fixed seed; fresh prompts
in each run, so no run hits another's prefix cache) and ``--output-tokens`` out, greedy. One engine
(the default model unless ``--model``) runs every run, with its step budget on (``--max-step-ms``,
default auto) and off, alternating on/off, off/on, ... for ``--rounds`` rounds after one short
warm-up run; the budget keeps its fitted costs from one "on" run to the next. Prints, per run and
as medians per variant: ITL p50/p99 as AIPerf reports it (per request, the time from its first
token to its last over the tokens between; stalls behind other prompts count), the gaps between
two tokens (p50/p99), TTFT p50, output tokens/s, and the prompt tokens the steps that decoded
carried (the largest and the mean); then the on/off ratios and the costs the budget fitted. Run
it alone, under the exclusive CPU lock.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from agentgate.engine.config import EngineConfig
from agentgate.engine.core import EngineCore
from agentgate.engine.sampling_params import SamplingParams
from agentgate.engine.scheduling.scheduler_output import SchedulerOutput
from agentgate.engine.scheduling.step_budget import StepBudget
from agentgate.loadtests.metrics import percentile

VARIANTS = ("on", "off")


@dataclass
class RunFigures:
    itl_ms: list[float] = field(default_factory=list)  # per request, as AIPerf: decode time / (tokens - 1)
    gaps_ms: list[float] = field(default_factory=list)  # every gap between two tokens of a request
    ttft_ms: list[float] = field(default_factory=list)
    output_tokens: int = 0
    seconds: float = 0.0
    # Prompt tokens of each step that also carried decoding rows.
    prompt_beside_decodes: list[int] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        beside = self.prompt_beside_decodes or [0]
        return {
            "itl_p50": percentile(self.itl_ms, 50) or 0.0,
            "itl_p99": percentile(self.itl_ms, 99) or 0.0,
            "gap_p50": percentile(self.gaps_ms, 50) or 0.0,
            "gap_p99": percentile(self.gaps_ms, 99) or 0.0,
            "ttft_p50": percentile(self.ttft_ms, 50) or 0.0,
            "tok_s": self.output_tokens / self.seconds if self.seconds else 0.0,
            "chunk_max": float(max(beside)),
            "chunk_mean": statistics.fmean(beside),
        }


def record_steps(core: EngineCore, into: Callable[[SchedulerOutput], None]) -> None:
    """Hand every step the engine launches to ``into`` before the runner takes it."""
    execute = core.runner.execute

    def recording(step: SchedulerOutput):
        into(step)
        return execute(step)

    core.runner.execute = recording


def prompts(seed: int, count: int, length: int, vocab_size: int) -> list[list[int]]:
    """``count`` prompts of random token ids, within 10% of ``length`` tokens each."""
    rng = random.Random(seed)
    low, high = max(1, length - length // 10), length + length // 10
    return [[rng.randrange(100, vocab_size) for _ in range(rng.randint(low, high))] for _ in range(count)]


def run(core: EngineCore, batch: Sequence[list[int]], concurrency: int, output_tokens: int, tag: str) -> RunFigures:
    """Keep ``concurrency`` of ``batch``'s prompts in the engine until all have answered."""
    figures = RunFigures()
    params = SamplingParams(temperature=0.0, max_tokens=output_tokens, ignore_eos=True)
    queue = list(enumerate(batch))
    added: dict[str, float] = {}
    first: dict[str, tuple[float, int]] = {}  # first token's time, tokens since
    last: dict[str, float] = {}
    active = 0
    start = time.perf_counter()
    while queue or core.has_work:
        while queue and active < concurrency:
            i, prompt = queue.pop(0)
            request_id = f"{tag}-{i}"
            core.add_request(request_id, prompt, params)
            added[request_id] = time.perf_counter()
            active += 1
        outputs = core.step()
        now = time.perf_counter()
        for out in outputs:
            if out.new_token_ids:
                previous = last.get(out.request_id)
                if previous is None:
                    figures.ttft_ms.append(1000.0 * (now - added[out.request_id]))
                    first[out.request_id] = (now, 0)
                else:
                    figures.gaps_ms.append(1000.0 * (now - previous) / len(out.new_token_ids))
                    started, count = first[out.request_id]
                    first[out.request_id] = (started, count + len(out.new_token_ids))
                last[out.request_id] = now
                figures.output_tokens += len(out.new_token_ids)
            if out.finish_reason is not None:
                active -= 1
                started, count = first.get(out.request_id, (now, 0))
                if count:
                    figures.itl_ms.append(1000.0 * (last[out.request_id] - started) / count)
    figures.seconds = time.perf_counter() - start
    return figures


def describe(name: str, s: dict[str, float]) -> str:
    return (
        f"{name:3s}: ITL p50 {s['itl_p50']:.1f} ms, p99 {s['itl_p99']:.1f} ms (token gaps p50 {s['gap_p50']:.1f}, "
        f"p99 {s['gap_p99']:.1f}); TTFT p50 {s['ttft_p50']:.0f} ms; "
        f"{s['tok_s']:.1f} output tok/s; prompt tokens beside decodes max {s['chunk_max']:.0f}, "
        f"mean {s['chunk_mean']:.1f}"
    )


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m agentgate.loadtests.step_budget_bench", description=__doc__)
    p.add_argument("--model", default=None, help="a .gguf file or an HF directory (default: the default model)")
    p.add_argument("--load-format", default="auto", help="dummy: random weights of the model's shapes")
    p.add_argument("--max-step-ms", default="auto", help="the 'on' variant's budget")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--requests", type=int, default=24, help="requests per run (24: ~3 minutes on 2 cores)")
    p.add_argument("--prompt-tokens", type=int, default=400)
    p.add_argument("--output-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=2, help="runs of each variant (at least 2)")
    p.add_argument("--seed", type=int, default=0, help="at least 0")
    args = p.parse_args(argv)
    if args.rounds < 2 or args.seed < 0:
        p.error("--rounds must be at least 2 and --seed at least 0")
    core = EngineCore(EngineConfig(model=args.model, load_format=args.load_format, max_step_ms=args.max_step_ms))
    budget: StepBudget | None = core.scheduler.step_budget
    if budget is None:
        p.error(f"--max-step-ms {args.max_step_ms} gives no budget on this engine")
    steps: list[SchedulerOutput] = []
    record_steps(core, steps.append)
    vocab = core.vocab_size
    print(
        f"model={args.model or 'default'} budget={budget.max_step_ms:g} ms concurrency={args.concurrency} "
        f"requests={args.requests} prompt~{args.prompt_tokens} output={args.output_tokens} rounds={args.rounds}",
        flush=True,
    )
    # Each run's prompts from a seed of its own (random.Random(-n) is random.Random(n): none below 0).
    warm = prompts(1000 * args.seed, args.concurrency, args.prompt_tokens, vocab)
    run(core, warm, args.concurrency, min(8, args.output_tokens), "warm")
    results: dict[str, list[dict[str, float]]] = {name: [] for name in VARIANTS}
    for round_ in range(args.rounds):
        order = VARIANTS if round_ % 2 == 0 else tuple(reversed(VARIANTS))
        for name in order:
            core.scheduler.step_budget = budget if name == "on" else None
            steps.clear()
            seed = 1000 * args.seed + 1 + 2 * round_ + (name == "off")
            batch = prompts(seed, args.requests, args.prompt_tokens, vocab)
            figures = run(core, batch, args.concurrency, args.output_tokens, f"r{round_}{name}")
            figures.prompt_beside_decodes = [
                s.total_num_tokens - s.num_decode_tokens
                for s in steps
                if s.num_decode_tokens and s.total_num_tokens > s.num_decode_tokens
            ]
            results[name].append(figures.summary())
            print(f"round {round_} {describe(name, results[name][-1])}", flush=True)
    core.scheduler.step_budget = budget
    medians = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in results.items()}
    print(f"medians of {args.rounds} runs each:")
    for name in VARIANTS:
        print(describe(name, medians[name]))
    on, off = medians["on"], medians["off"]

    def ratio(key: str) -> str:
        return f"{on[key] / off[key]:.2f}x" if off[key] else "n/a"

    print(
        f"on/off: ITL p50 {ratio('itl_p50')}, ITL p99 {ratio('itl_p99')}, token gaps p99 {ratio('gap_p99')}, "
        f"TTFT p50 {ratio('ttft_p50')}, "
        f"output tok/s {ratio('tok_s')}"
    )
    fixed, per_row, per_token, prompt_fixed = budget.costs
    print(
        f"fitted step costs: {fixed:.1f} ms + {per_row:.2f} ms per decode row + {per_token:.3f} ms per prompt "
        f"token + {prompt_fixed:.1f} ms with prompt rows ({budget.num_observed} steps observed; "
        f"{torch.get_num_threads()} threads now)"
    )
    core.shutdown()


if __name__ == "__main__":
    main()
