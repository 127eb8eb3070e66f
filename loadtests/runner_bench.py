"""Four runners side by side in one process: sync and overlap, each eager and
with decode CUDA graphs (same buckets). The headline is overlap+graphs over
sync+graphs: both replay graphs, so the ratio measures the overlap alone.

Same model and workload for all (decode-heavy short completions: a short
prompt, then ``--output-len`` tokens, greedy, ignore_eos) at each batch
size; prints output tokens/s of each runner and the ratios. Every core gets
the same, explicitly sized KV cache (sizing from free memory would let the
first core take the device). Runs rotate between the runners and the best
of ``--repeats`` is kept, after one untimed run per batch size that compiles
whatever that size needs. On a CPU only the eager rows run. Each batch
size's ratio is printed as a FIGURE line as soon as it is measured, so a run
stopped at a time limit keeps the sizes it finished.

On CUDA it then measures, for each runner at batch 1, the device's idle
share between decode steps with CUDA events (`step_timing`), and the batch-1
step time against back-to-back replays of the same graph.

    python -m agentgate.loadtests.runner_bench --model smollm2-dummy   # the default model's shapes, random weights
    python -m agentgate.loadtests.runner_bench --model qwen3            # Qwen3-0.6B's shapes
    python -m agentgate.loadtests.runner_bench --model tiny             # 2 layers: gpu_check.sh's CPU smoke
    python -m agentgate.loadtests.runner_bench                          # the default model
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path

import torch

from agentgate.engine.config import EngineConfig
from agentgate.engine.core import EngineCore
from agentgate.engine.sampling_params import SamplingParams

CONFIGS = Path(__file__).parent / "configs"
# Random weights of real shapes: the same work per step as the real model.
DUMMY_MODELS = {
    "qwen3": CONFIGS / "qwen3-0.6b",
    "smollm2-dummy": CONFIGS / "smollm2-135m",
    "tiny": CONFIGS / "tiny-llama",
}
# (runner, CUDA graphs): sync+graphs is the headline's denominator.
VARIANTS = (("sync", False), ("sync", True), ("overlap", False), ("overlap", True))
BLOCK_SIZE = 16
GAP_STEPS = 60


def label(runner: str, graphs: bool) -> str:
    return f"{runner}+{'graphs' if graphs else 'eager'}"


def kv_blocks(max_batch: int, prompt_len: int, output_len: int) -> int:
    """One KV size for every core: a full batch of requests at their longest,
    plus the step-gap probe (a batch-1 request that decodes longer)."""
    per_request = -(-(prompt_len + output_len + 1) // BLOCK_SIZE)
    probe = -(-(16 + 2 * GAP_STEPS + 16) // BLOCK_SIZE)
    return max_batch * per_request + probe + 2


def make_core(
    model: str,
    runner: str,
    graphs: bool,
    dtype: str,
    max_batch: int,
    num_kv_blocks: int,
    quantization: str = "auto",
    steps_in_flight: int | None = None,
) -> EngineCore:
    options = dict(
        runner=runner,
        dtype=dtype,
        max_num_seqs=max_batch,
        max_num_batched_tokens=max(2048, max_batch * 64),
        block_size=BLOCK_SIZE,
        num_kv_blocks=num_kv_blocks,
        enforce_eager=not graphs,
        quantization=quantization,
        steps_in_flight=steps_in_flight if runner == "overlap" else None,
    )
    if model in DUMMY_MODELS:
        options.update(model=str(DUMMY_MODELS[model]), load_format="dummy")
    elif model != "default":
        options.update(model=model)
    return EngineCore(EngineConfig(**options))


def run_batch(core: EngineCore, batch: int, prompt_len: int, output_len: int, tag: str) -> float:
    """Output tokens/s for ``batch`` requests decoding ``output_len`` tokens each."""
    params = SamplingParams(temperature=0.0, max_tokens=output_len, ignore_eos=True)
    for i in range(batch):
        prompt = [(17 * i + 31 * j) % 1000 + 100 for j in range(prompt_len)]
        core.add_request(f"{tag}-{i}", prompt, params)
    produced = 0
    start = time.perf_counter()
    while core.has_work:
        produced += sum(len(out.new_token_ids) for out in core.step())
    if core.runner.device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    assert produced == batch * output_len, (produced, batch * output_len)
    return produced / elapsed


def step_gaps(core: EngineCore, name: str) -> None:
    """Batch-1 decode in a loop with CUDA events: the idle share between
    steps, and (with graphs) the step time against graph replays."""
    from agentgate.loadtests.step_timing import StepEvents, replay_ms

    params = SamplingParams(temperature=0.0, max_tokens=2 * GAP_STEPS + 16, ignore_eos=True)
    core.add_request(f"gap-{name}", list(range(100, 116)), params)
    for _ in range(8):  # admit, prefill, settle into decode
        core.step()
    with StepEvents(core.runner, GAP_STEPS) as events:
        for _ in range(GAP_STEPS + 1):
            core.step()
    gaps = events.gaps()
    core.abort_requests(None)
    while core.has_work:
        core.step()
    print(
        f"{name:15s} batch 1: step {gaps.step_ms:.3f} ms, device idle between steps "
        f"{gaps.gap_ms:.3f} ms = {100 * gaps.gap_share:.1f}% of the time"
    )
    print(f"FIGURE step gap {name} b1: {100 * gaps.gap_share:.1f}% (target < 3% for overlap+graphs)")
    graphs = core.runner.graphs
    if graphs is not None:
        replay = replay_ms(lambda: graphs.replay(1, 1))
        ratio = gaps.step_ms / replay
        print(f"{name:15s} batch 1: graph replay {replay:.3f} ms, step / replay {ratio:.3f}")
        print(f"FIGURE b1 step / graph replay {name}: {ratio:.3f} (target <= 1.10 for overlap+graphs)")


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model",
        default="default",
        help="'default', 'qwen3', 'smollm2-dummy' (random weights of real shapes), 'tiny' or a path",
    )
    parser.add_argument("--batch-sizes", default="1,4,16,64")
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dtype", default="auto", help="auto = bfloat16 on CUDA, float32 on CPU")
    parser.add_argument("--quantization", default="auto", help="auto, none, int8 or int4 (CPU weights)")
    parser.add_argument("--steps-in-flight", type=int, default=None, help="overlap runner's depth (default per device)")
    args = parser.parse_args()
    batches = [int(b) for b in args.batch_sizes.split(",")]
    cuda = torch.cuda.is_available()
    dtype = "bfloat16" if args.dtype == "auto" and cuda else args.dtype
    variants = [v for v in VARIANTS if cuda or not v[1]]
    blocks = kv_blocks(max(batches), args.prompt_len, args.output_len)
    cores = {
        v: make_core(args.model, *v, dtype, max(batches), blocks, args.quantization, args.steps_in_flight)
        for v in variants
    }
    any_runner = next(iter(cores.values())).runner
    depth = cores[("overlap", False)].runner.max_steps_in_flight
    print(
        f"model={args.model} device={any_runner.device} dtype={any_runner.dtype} prompt={args.prompt_len} "
        f"output={args.output_len} kv_blocks={blocks} (every core) runners={', '.join(label(*v) for v in variants)} "
        f"quantization={any_runner.quantization} ({any_runner.weight_bytes_per_step / 1e6:.0f} MB of weights "
        f"per step) overlap steps in flight={depth}"
    )
    rates: dict[tuple[str, bool], list[float]] = {v: [] for v in variants}
    for batch in batches:
        for v, core in cores.items():  # compile and settle what this batch size needs
            run_batch(core, batch, args.prompt_len, 8, f"warm{batch}")
        best = dict.fromkeys(variants, 0.0)
        for repeat in range(args.repeats):
            shift = repeat % len(variants)
            for v in variants[shift:] + variants[:shift]:
                rate = run_batch(cores[v], batch, args.prompt_len, args.output_len, f"b{batch}r{repeat}")
                best[v] = max(best[v], rate)
        for v in variants:
            rates[v].append(best[v])
        row = "  ".join(f"{label(*v)} {best[v]:9.1f}" for v in variants)
        top, bottom = (("overlap", True), ("sync", True)) if cuda else (("overlap", False), ("sync", False))
        ratio = best[top] / best[bottom]
        print(f"batch {batch:3d} tok/s: {row}  overlap/sync {ratio:.3f}")
        print(f"FIGURE {label(*top)} / {label(*bottom)}, {args.model} b{batch}: {ratio:.3f} ({best[top]:.1f} tok/s)")
    print()
    pairs = [(("overlap", False), ("sync", False), "overlap+eager / sync+eager")]
    if cuda:
        pairs = [
            (("overlap", True), ("sync", True), "overlap+graphs / sync+graphs (headline)"),
            *pairs,
            (("sync", True), ("sync", False), "sync+graphs / sync+eager"),
            (("overlap", True), ("overlap", False), "overlap+graphs / overlap+eager"),
        ]
    for top, bottom, name in pairs:
        ratios = [a / b for a, b in zip(rates[top], rates[bottom])]
        per_batch = ", ".join(f"b{b} {r:.3f}" for b, r in zip(batches, ratios))
        print(f"{name}: {per_batch}; geomean {geomean(ratios):.3f}")
        print(f"FIGURE {name.removesuffix(' (headline)')}, {args.model}: {per_batch} (geomean {geomean(ratios):.3f})")
    if cuda:
        print()
        for v, core in cores.items():
            step_gaps(core, label(*v))


if __name__ == "__main__":
    main()
