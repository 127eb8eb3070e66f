"""What Inductor gives the CPU decode step: ``python -m agentgate.loadtests.compile_probe``.

Issue 52 asks whether compiling the decode step pays on a CPU before the engine is built around
it. This probe answers on the machine it runs on, side by side in one process:

- each layer's attention (RoPE, the KV-cache write, paged attention: the backend's own code) runs
  as one opaque custom op, ``agentgate_probe::attention``, that finds the step's metadata and the
  layer's caches in the step, not among its arguments. So Inductor neither functionalizes nor
  copies the caches. Handing them to the op as mutated arguments (``mutates_args``) made Inductor
  copy their whole allocation on every call (the caches are views of one tensor), 5 s a step;
- the model's forward, everything around those ops, is compiled by ``torch.compile`` (Inductor's
  C++ backend, ``dynamic=False``) for pure-decode steps; other steps stay eager;
- it fills the engine with decoding requests at each batch size, then times eager and compiled
  steps alternately, several rounds, and prints the medians, their ratio and the seconds of the
  first compiled steps (Dynamo tracing and Inductor's compile; a warm Inductor cache under
  ``$TORCHINDUCTOR_CACHE_DIR`` shortens them); where compiling fails, why.

What it found on a 2-core Xeon (AVX-512, no native bf16), docs/cpu-performance.md: float32,
1.13x at batch 1 and 1.07x at 16; on the bf16 path the linears chosen by rows break the graph
(one recompile per layer) and Inductor cannot lower oneDNN's packed linear.

The probe changes nothing in the engine: it wraps one engine's model while it runs.

    python -m agentgate.loadtests.compile_probe
    python -m agentgate.loadtests.compile_probe --dtype float32 --quantization none --batch 1 --batch 16
"""

from __future__ import annotations

import argparse
import statistics
import time
import types
from collections.abc import Callable
from typing import Any

import torch

from agentgate.engine import LLM
from agentgate.engine.attention.base import AttentionMetadata
from agentgate.engine.models.llama import Attention
from agentgate.loadtests.step_profile import drain, fill, run_steps


class _Step:
    """What the attention op reads of the step running now: set by the wrapped forward before the
    model runs, read by the op's body (eager and compiled alike)."""

    backend: Any = None
    meta: AttentionMetadata | None = None
    caches: list[tuple[torch.Tensor, torch.Tensor]] = []


@torch.library.custom_op("agentgate_probe::attention", mutates_args=())
def _attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    layer: int,
    scale: float,
) -> torch.Tensor:
    """RoPE, the cache write and paged attention of layer ``layer``, through the engine's backend.
    It writes the layer's caches, which are no argument of the graph: nothing for Inductor to copy."""
    k_cache, v_cache = _Step.caches[layer]
    meta = _Step.meta
    query = _Step.backend.rotary_write_kv(query, key, value, cos, sin, k_cache, v_cache, meta)
    return _Step.backend.paged_attention(query, k_cache, v_cache, meta, scale)


@_attention.register_fake
def _(query, key, value, cos, sin, layer, scale):
    return torch.empty_like(query)


def _through_op(layer: int) -> Callable[..., torch.Tensor]:
    """`Attention.forward` with the backend's two calls replaced by the op (no q/k norm: Llama,
    SmolLM2, Mistral, Qwen2)."""

    def forward(self: Attention, x, cos, sin, meta, k_cache, v_cache) -> torch.Tensor:
        num_tokens = x.shape[0]
        heads = self.qkv_proj(x).view(num_tokens, -1, self.head_dim)
        q, k, v = heads.split([self.num_heads, self.num_kv_heads, self.num_kv_heads], dim=1)
        out = torch.ops.agentgate_probe.attention(q, k, v, cos, sin, layer, self.scale)
        return self.o_proj(out.reshape(num_tokens, self.q_size))

    return forward


class CompiledDecode:
    """The model of ``llm`` with every layer's attention through the op, and a switch: ``on``, its
    pure-decode steps run the compiled forward."""

    def __init__(self, llm: LLM) -> None:
        runner = llm.core.runner
        model = runner.model
        if any(layer.self_attn.q_norm is not None for layer in model.layers):
            raise SystemExit("the probe's attention op takes no q/k norm (Qwen3): pick another model")
        for index, layer in enumerate(model.layers):
            layer.self_attn.forward = types.MethodType(_through_op(index), layer.self_attn)
        _Step.backend, _Step.caches = model.attention, runner.kv_caches
        eager = model.forward
        no_caches = [(None, None)] * len(model.layers)
        compiled = torch.compile(lambda ids, positions: eager(ids, positions, None, no_caches), dynamic=False)
        self.on = False

        def forward(input_ids, positions, meta, kv_caches):
            _Step.meta = meta
            if self.on and meta.is_pure_decode:
                return compiled(input_ids, positions)
            return eager(input_ids, positions, meta, kv_caches)

        model.forward = forward


def measure(llm: LLM, probe: CompiledDecode, batch: int, steps: int, rounds: int) -> dict[str, float]:
    """Median ms per decode step, eager and compiled, alternating; and the first compiled steps' seconds."""
    fill(llm, batch, steps * rounds * 2 + 8)
    times: dict[str, list[float]] = {"eager": [], "compiled": []}
    probe.on = True
    started = time.perf_counter()
    run_steps(llm, 2)  # the first compiled steps: tracing and compiling for this batch size
    compile_s = time.perf_counter() - started
    for _ in range(rounds):
        for mode in ("eager", "compiled"):
            probe.on = mode == "compiled"
            run_steps(llm, 2)
            times[mode].append(run_steps(llm, steps) / steps * 1e3)
    probe.on = False
    drain(llm)
    eager, compiled = statistics.median(times["eager"]), statistics.median(times["compiled"])
    return {"eager_ms": eager, "compiled_ms": compiled, "speedup": eager / compiled, "compile_s": compile_s}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="a .gguf file or an HF directory (default: the default model)")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--quantization", default="auto", help="none: dense weights, as the tool tests' servers")
    parser.add_argument("--runner", default="overlap", choices=["overlap", "sync"])
    parser.add_argument("--batch", type=int, action="append", help="batch sizes (repeatable; default 1 and 16)")
    parser.add_argument("--steps", type=int, default=15, help="decode steps timed per round and mode")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of eager and compiled")
    args = parser.parse_args(argv)
    llm = LLM(args.model, dtype=args.dtype, quantization=args.quantization, runner=args.runner, speculative="off")
    probe = CompiledDecode(llm)
    print(f"compile probe: {llm.core.runner.weights} | runner {args.runner} | torch {torch.__version__}", flush=True)
    for batch in args.batch or [1, 16]:
        try:
            m = measure(llm, probe, batch, args.steps, args.rounds)
        except Exception as exc:  # Dynamo's and Inductor's errors: the finding itself, then the next size
            probe.on = False
            drain(llm)
            reason = str(exc).strip().splitlines()
            print(f"batch {batch}: the compiled step failed: {type(exc).__name__}: {reason[:1]}", flush=True)
            continue
        print(
            f"batch {batch}: eager {m['eager_ms']:.2f} ms per step, compiled {m['compiled_ms']:.2f} ms "
            f"(eager / compiled {m['speedup']:.2f}); first compiled steps {m['compile_s']:.1f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
