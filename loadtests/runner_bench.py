"""The overlapped runner against the sync runner, side by side in one process.

Same model, same workload (decode-heavy short completions: a short prompt,
then ``--output-len`` tokens, ignore_eos) at each batch size; prints output
tokens/s of each runner and their ratio, then the geometric mean as the last
line: ``overlap/sync throughput ratio: <x>``. Runs alternate between the two
runners and the best of ``--repeats`` is kept, so machine noise hits both.

On CUDA it also reports, for batch 1, the decode step time against
back-to-back replays of the same CUDA graph, and the fraction of time the GPU
sits idle between consecutive decode steps (from the profiler's kernel trace).

    python -m agentgate.loadtests.runner_bench                       # default model
    python -m agentgate.loadtests.runner_bench --model qwen3          # dummy Qwen3-0.6B shapes
    python -m agentgate.loadtests.runner_bench --model smollm2-dummy  # the default model's shapes, random weights
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
DUMMY_MODELS = {"qwen3": CONFIGS / "qwen3-0.6b", "smollm2-dummy": CONFIGS / "smollm2-135m"}


def make_core(model: str, runner: str, dtype: str, max_batch: int) -> EngineCore:
    options = dict(runner=runner, dtype=dtype, max_num_seqs=max_batch, max_num_batched_tokens=max(2048, max_batch * 64))
    if model in DUMMY_MODELS:
        options.update(model=str(DUMMY_MODELS[model]), load_format="dummy")
    elif model != "default":
        options.update(model=model)
    if not torch.cuda.is_available():
        options.update(kv_cache_bytes=1 << 30)
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


def graph_replay_vs_step(core: EngineCore, output_len: int) -> None:
    """Batch-1 decode step time against back-to-back replays of its graph,
    and the GPU's idle share between consecutive decode steps."""
    runner = core.runner
    graphs = getattr(runner, "graphs", None)
    if graphs is None:
        print("cuda graphs off: skipping the replay comparison")
        return
    graph, _ = graphs._graphs[1]
    for _ in range(10):
        graph.replay()
    torch.cuda.synchronize()
    start = time.perf_counter()
    replays = 200
    for _ in range(replays):
        graph.replay()
    torch.cuda.synchronize()
    replay_s = (time.perf_counter() - start) / replays

    probe = SamplingParams(temperature=0.0, max_tokens=output_len + 64, ignore_eos=True)
    core.add_request("step-probe", list(range(100, 116)), probe)
    for _ in range(8):  # admit, prefill, settle into decode
        core.step()
    from torch.profiler import ProfilerActivity, profile

    steps = 40
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            core.step()
        torch.cuda.synchronize()
        step_s = (time.perf_counter() - start) / steps
    kernels = sorted(
        (e.time_range.start, e.time_range.end)
        for e in prof.events()
        if e.device_type == torch.autograd.DeviceType.CUDA
    )
    busy, span_start, span_end, last_end = 0.0, kernels[0][0], kernels[-1][1], kernels[0][0]
    for begin, end in kernels:
        begin = max(begin, last_end)
        if end > begin:
            busy += end - begin
        last_end = max(last_end, end)
    idle = 1.0 - busy / (span_end - span_start)
    core.abort_requests(["step-probe"])
    while core.has_work:
        core.step()
    print(f"batch-1 decode step {step_s * 1e3:.3f} ms vs graph replay {replay_s * 1e3:.3f} ms: "
          f"ratio {step_s / replay_s:.3f} (target <= 1.15)")
    print(f"GPU idle between decode steps: {100 * idle:.1f}% of the time (target < 5%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="default",
                        help="'default', 'qwen3', 'smollm2-dummy' (random weights of real shapes) or a path")
    parser.add_argument("--batch-sizes", default="1,4,16,64")
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dtype", default="auto", help="auto = bfloat16 on CUDA, float32 on CPU")
    args = parser.parse_args()
    batches = [int(b) for b in args.batch_sizes.split(",")]
    dtype = args.dtype
    if dtype == "auto" and torch.cuda.is_available():
        dtype = "bfloat16"
    cores = {runner: make_core(args.model, runner, dtype, max(batches)) for runner in ("sync", "overlap")}
    device = cores["overlap"].runner.device
    print(f"model={args.model} device={device} dtype={cores['overlap'].runner.dtype} "
          f"prompt={args.prompt_len} output={args.output_len}")
    for core in cores.values():  # warm up: kernels, allocator, graphs
        run_batch(core, 2, args.prompt_len, 8, "warm")
    ratios = []
    for batch in batches:
        best = {"sync": 0.0, "overlap": 0.0}
        for repeat in range(args.repeats):
            for runner in ("sync", "overlap") if repeat % 2 == 0 else ("overlap", "sync"):
                rate = run_batch(cores[runner], batch, args.prompt_len, args.output_len, f"b{batch}r{repeat}")
                best[runner] = max(best[runner], rate)
        ratio = best["overlap"] / best["sync"]
        ratios.append(ratio)
        print(f"batch {batch:3d}: sync {best['sync']:9.1f} tok/s  overlap {best['overlap']:9.1f} tok/s  "
              f"ratio {ratio:.3f}")
    if device.type == "cuda":
        graph_replay_vs_step(cores["overlap"], args.output_len)
    geomean = math.exp(statistics.fmean(math.log(r) for r in ratios))
    print(f"overlap/sync throughput ratio: {geomean:.3f}")


if __name__ == "__main__":
    main()
