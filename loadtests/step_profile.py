"""Where a decode step's time goes on the CPU: ``python -m agentgate.loadtests.step_profile``.

For each batch size (default 1 and 16) on the model (default: the default
model, as the engine serves it), it fills the batch with decoding requests
and prints:

- **aten calls per decode step**, counted by ``torch.profiler`` (every ATen
  operator, nested ones included: an ``aten::to`` that copies counts with its
  ``aten::_to_copy``, ``aten::empty_strided`` and ``aten::copy_``), and the
  operators called most;
- **wall time per step**, timed without the profiler, split by the profiled
  run's shares into matmuls (the weight-only int4/int8 kernels, oneDNN/MKL
  linears), attention (writing the step's keys and values and reading the
  paged cache), the sampler, and everything else on the host (norms, RoPE
  tables, casts, input preparation, the scheduler, Python);
- **threads**: torch's intra-op threads and how much of their time the step
  kept busy (CPU seconds of the process over wall seconds x threads; the
  rest is time the threads waited, on each other or on the host);
- **per layer**: the mean time of one decoder layer and the sum over layers;
- **the memory floor**: the weight bytes a decode step of that batch reads
  (at batch 1 what the engine's start-up line states; from the row count
  where the linears take their dense bf16 copies, those copies) over this
  machine's streaming read speed at the engine's thread count
  (`loadtests.bandwidth`), and the step's time as a multiple of that floor
  (near 1: bound by memory; far above: by compute and per-op overhead).

    python -m agentgate.loadtests.step_profile
    python -m agentgate.loadtests.step_profile --batch 1 --steps 32 --quantization none --dtype bfloat16
    python -m agentgate.loadtests.step_profile --cpu-attention torch   # the torch path's decode attention
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity, profile

from agentgate.engine import LLM, SamplingParams
from agentgate.engine.kernel_choice.row_choice import RowChosenLinear
from agentgate.engine.loaders.quantization import describe
from agentgate.engine.runner import overlap, sync
from agentgate.loadtests import bandwidth

# Operators that are matrix products: the weight-only CPU kernels, dense GEMMs, oneDNN's packed linears.
MATMULS = frozenset(
    {
        "aten::_weight_int4pack_mm_for_cpu",
        "aten::_weight_int8pack_mm",
        "aten::mm",
        "aten::addmm",
        "aten::bmm",
        "aten::matmul",
        "aten::linear",
        "mkldnn::_linear_pointwise",
    }
)
PROMPT = "Write a long story about a lighthouse keeper and the ships she guides home at night."


@dataclass(frozen=True)
class StepProfile:
    """One batch size's decode step: operators called, and where the wall time went (milliseconds)."""

    batch: int
    aten_calls: float
    top_ops: list[tuple[str, float]]
    step_ms: float
    linear_ms: float  # every linear module's forward: its matmul kernel, casts and reshapes
    kernel_ms: float  # of which the matmul kernels themselves
    attention_ms: float
    sampler_ms: float
    layer_ms: float
    layers: int
    threads: int
    thread_busy: float
    weight_bytes: int  # read by each decode step of this batch (at batch 1: what the engine's start-up line says)
    memory: bandwidth.Bandwidth  # measured right after the step times, at the thread count they ran at

    @property
    def floor_ms(self) -> float:
        return self.memory.floor_ms(self.weight_bytes)

    @property
    def other_ms(self) -> float:
        return max(0.0, self.step_ms - self.linear_ms - self.attention_ms - self.sampler_ms)

    def lines(self) -> list[str]:
        top = ", ".join(f"{name.removeprefix('aten::')} {count:.0f}" for name, count in self.top_ops)
        return [
            f"batch {self.batch}: {self.aten_calls:,.0f} aten calls per decode step (most: {top})",
            f"  wall {self.step_ms:.2f} ms per step = linears {self.linear_ms:.2f} (matmul kernels "
            f"{self.kernel_ms:.2f}, casts and reshapes {self.linear_ms - self.kernel_ms:.2f}) + attention "
            f"{self.attention_ms:.2f} + sampler {self.sampler_ms:.2f} + other host work {self.other_ms:.2f} "
            "(norms, RoPE, residuals, input preparation, scheduler, Python)",
            f"  per layer {self.layer_ms:.3f} ms (x {self.layers} layers = {self.layer_ms * self.layers:.2f} ms); "
            f"threads {self.threads}, busy {self.thread_busy:.0%} of wall x threads (the rest: waiting)",
            f"  memory floor {self.floor_ms:.3g} ms per step ({self.weight_bytes / 1e6:.2f} MB of weights / "
            f"{self.memory.gb_per_s:.1f} GB/s streaming read at {self.memory.threads} threads); "
            f"step = {self.step_ms / self.floor_ms:.1f} x floor",
        ]


Wrapper = Callable[[Callable[..., Any], str], Callable[..., Any]]


@contextmanager
def wrapped(targets: list[tuple[Any, str, str]], wrap: Wrapper) -> Iterator[None]:
    """Each ``(obj, attribute, bucket)``: the function ``obj.attribute`` replaced by ``wrap(it, bucket)``
    while the block runs, then put back as it was."""
    # What each object held itself (a module's function; not a method its class provides).
    own = [(obj, attribute, vars(obj).get(attribute)) for obj, attribute, _ in targets]
    for obj, attribute, bucket in targets:
        setattr(obj, attribute, wrap(getattr(obj, attribute), bucket))
    try:
        yield
    finally:
        for obj, attribute, original in reversed(own):
            if original is None:
                delattr(obj, attribute)
            else:
                setattr(obj, attribute, original)


def timer(totals: Counter[str]) -> Wrapper:
    """A wrapper that adds each call's wall time to ``totals[bucket]`` (a perf_counter pair per call:
    well under a microsecond)."""

    def wrap(original: Callable[..., Any], bucket: str) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                totals[bucket] += time.perf_counter() - start

        return timed

    return wrap


def profiler_range(original: Callable[..., Any], bucket: str) -> Callable[..., Any]:
    """A wrapper that runs each call inside a profiler range named ``bucket``."""

    def ranged(*args: Any, **kwargs: Any) -> Any:
        with record_function(bucket):
            return original(*args, **kwargs)

    return ranged


def targets(model: torch.nn.Module) -> list[tuple[Any, str, str]]:
    """What `measure` times: every linear (any module with in/out features, the LM head included), attention's
    two calls, the sampler (as each runner calls it), and each decoder layer."""
    # A linear choosing its form by rows (engine.kernel_choice.row_choice) is timed once, not again inside.
    inner = {id(form) for m in model.modules() if isinstance(m, RowChosenLinear) for form in (m.quantized, m.dense)}
    linears = [
        m for m in model.modules() if hasattr(m, "in_features") and hasattr(m, "out_features") and id(m) not in inner
    ]
    return [
        *((m, "forward", "linears") for m in linears),
        (model.attention, "rotary_write_kv", "attention"),
        (model.attention, "paged_attention", "attention"),
        (sync, "sample", "sampler"),
        (overlap, "sample", "sampler"),
        *((layer, "forward", "layers") for layer in model.layers),
    ]


def fill(llm: LLM, batch: int, steps: int) -> None:
    """``batch`` requests decoding, each with room for ``steps`` more tokens after warm-up."""
    params = SamplingParams(temperature=0, max_tokens=steps * 3 + 64, ignore_eos=True)
    vocab = llm.core.vocab_size
    for i in range(batch):
        # A model loaded without a tokenizer (--load-format dummy) gets token ids of the same length.
        ids = llm.tokenizer.encode(f"{i}. {PROMPT}") if llm.tokenizer else [(i * 31 + j) % vocab for j in range(24)]
        llm.core.add_request(f"profile-{batch}-{i}", ids, params)
    scheduler = llm.core.scheduler
    while len(scheduler.waiting) or any(r.num_computed_tokens < r.num_prompt_tokens for r in scheduler.running):
        llm.core.step()
    for _ in range(4):  # a few decode steps to warm caches and allocators
        llm.core.step()


def run_steps(llm: LLM, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        llm.core.step()
    return time.perf_counter() - start


def drain(llm: LLM) -> None:
    """Abort every request and step until the engine holds none."""
    llm.core.abort_requests(None)
    while llm.core.has_work:
        llm.core.step()


def measure(llm: LLM, batch: int, steps: int) -> StepProfile:
    fill(llm, batch, steps)
    # Wall time and CPU time without the profiler: medians of a few short runs.
    walls, busy = [], []
    for _ in range(3):
        cpu = os.times()
        wall = run_steps(llm, max(1, steps // 3))
        after = os.times()
        walls.append(wall / max(1, steps // 3))
        busy.append((after.user + after.system - cpu.user - cpu.system) / (wall * torch.get_num_threads()))
    step_ms = statistics.median(walls) * 1e3
    memory = bandwidth.measure()  # at the engine's thread count now (its governor may have changed it)
    model = llm.core.runner.model
    # Operator counts, and the matmul kernels' share of the linears' time, from the profiler.
    linears = [target for target in targets(model) if target[2] == "linears"]
    with wrapped(linears, profiler_range), profile(activities=[ProfilerActivity.CPU]) as prof:
        run_steps(llm, steps)
    events = prof.key_averages()
    calls = Counter({e.key: e.count / steps for e in events if e.key.startswith("aten::")})
    kernels = sum(e.self_cpu_time_total for e in events if e.key in MATMULS)
    in_linears = next((e.cpu_time_total for e in events if e.key == "linears"), 0.0)
    kernel_share = min(1.0, kernels / in_linears) if in_linears else 0.0
    # Times by part, from timers around each (no profiler), scaled to the plain step.
    totals: Counter[str] = Counter()
    with wrapped(targets(model), timer(totals)):
        timed_step = run_steps(llm, steps) / steps
    part = {name: seconds / steps / timed_step * step_ms for name, seconds in totals.items()}
    drain(llm)
    kernel_ms = kernel_share * part.get("linears", 0.0)
    return StepProfile(
        batch=batch,
        aten_calls=sum(calls.values()),
        top_ops=calls.most_common(6),
        step_ms=step_ms,
        linear_ms=part.get("linears", 0.0),
        kernel_ms=min(kernel_ms, part.get("linears", 0.0)),
        attention_ms=part.get("attention", 0.0),
        sampler_ms=part.get("sampler", 0.0),
        layer_ms=part.get("layers", 0.0) / len(model.layers),
        layers=len(model.layers),
        threads=torch.get_num_threads(),
        thread_busy=statistics.median(busy),
        weight_bytes=describe(model, rows=batch)[1],
        memory=memory,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="a .gguf file or an HF directory (default: the default model)")
    parser.add_argument("--load-format", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--quantization", default="auto")
    parser.add_argument("--runner", default="overlap", choices=["overlap", "sync"])
    parser.add_argument("--cpu-attention", default="auto", choices=["auto", "torch"])
    parser.add_argument("--batch", type=int, action="append", help="batch sizes (repeatable; default 1 and 16)")
    parser.add_argument("--steps", type=int, default=24, help="decode steps profiled per batch size")
    args = parser.parse_args(argv)
    # Plain decode steps, one token per request: speculation (the CPU's default) would verify drafts in them.
    llm = LLM(
        args.model,
        load_format=args.load_format,
        dtype=args.dtype,
        quantization=args.quantization,
        runner=args.runner,
        cpu_attention=args.cpu_attention,
        speculative="off",
    )
    print(
        f"step profile: {llm.core.runner.weights} | runner {args.runner} | cpu attention {args.cpu_attention}",
        flush=True,
    )
    for batch in args.batch or [1, 16]:
        print("\n".join(measure(llm, batch, args.steps).lines()), flush=True)


if __name__ == "__main__":
    main()
