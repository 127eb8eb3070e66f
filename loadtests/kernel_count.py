"""Kernels launched per decode step and per decoder layer, counted by
dispatch: every ATen operator that does device work (views and bare
allocations are not counted) plus every Triton launch, over one batch-1
decode step of the overlapped runner with the Triton backend, run eagerly
(an eager step is what a CUDA graph captures, so this is also the graph's
size). On CUDA the kernels run for real; on a CPU through the Triton
interpreter in float32: the count does not depend on the device.

    python -m agentgate.loadtests.kernel_count                 # the default model's shapes
    python -m agentgate.loadtests.kernel_count --model qwen3    # Qwen3-0.6B's shapes

One ATen operator is one launch for everything a decode step uses except a
few library calls (a sort, a top-k), which may launch more than one. On a
CPU the step's input preparation and post-update run their torch references
(about 20 operators) where CUDA runs three Triton kernels.
"""

from __future__ import annotations

import argparse
import os
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

if not torch.cuda.is_available():  # before any Triton kernel is defined
    os.environ.setdefault("TRITON_INTERPRET", "1")

CONFIGS = Path(__file__).parent / "configs"
# tiny: 2 layers, for gpu_check.sh's CPU smoke.
MODELS = {"smollm2-dummy": CONFIGS / "smollm2-135m", "qwen3": CONFIGS / "qwen3-0.6b", "tiny": CONFIGS / "tiny-llama"}
# Operators that allocate or relabel memory without launching anything.
NO_LAUNCH = {
    "empty",
    "empty_like",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
    "resize_",
    "record_stream",
    "detach",
    "lift_fresh",
    "set_",
    "alias",
}


class DispatchCounter(TorchDispatchMode):
    """Counts ATen operators that launch work, and (through `triton_launches`)
    Triton kernel launches; ATen calls made inside a Triton launch (the
    interpreter's own) are not counted."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.by_name: Counter[str] = Counter()
        self.in_triton = 0

    def add(self, name: str) -> None:
        self.count += 1
        self.by_name[name] += 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if not self.in_triton and not func.is_view and name not in NO_LAUNCH:
            self.add(name)
        return func(*args, **(kwargs or {}))


@contextmanager
def triton_launches(counter: DispatchCounter):
    """Count every Triton kernel launch (compiled or interpreted) into ``counter``."""
    from triton.runtime.jit import JITFunction

    classes = [JITFunction]
    try:
        from triton.runtime.interpreter import InterpretedFunction

        classes.append(InterpretedFunction)
    except ImportError:
        pass
    saved = {cls: cls.run for cls in classes}

    def counting(original):
        def run(self, *args, **kwargs):
            if not kwargs.get("warmup", False):
                counter.add(f"triton:{getattr(self, '__name__', None) or self.fn.__name__}")
            counter.in_triton += 1
            try:
                return original(self, *args, **kwargs)
            finally:
                counter.in_triton -= 1

        return run

    for cls, original in saved.items():
        cls.run = counting(original)
    try:
        yield
    finally:
        for cls, original in saved.items():
            cls.run = original


def make_core(model: str):
    """An engine core whose overlapped runner has the Triton backend, eager."""
    from agentgate.engine.attention.triton import TritonAttentionBackend
    from agentgate.engine.config import EngineConfig
    from agentgate.engine.core import EngineCore
    from agentgate.engine.loaders import LoadedModel, load_model
    from agentgate.engine.models.llama import build_model
    from agentgate.engine.runner.overlap import OverlapRunner

    cuda = torch.cuda.is_available()
    config = EngineConfig(
        model=str(MODELS[model]),
        load_format="dummy",
        runner="overlap",
        enforce_eager=True,
        dtype="bfloat16" if cuda else "float32",
        max_num_seqs=4,
        num_kv_blocks=64,
    )
    device = config.resolved_device()
    plain = load_model(config.model, dtype=config.dtype, device=device, load_format="dummy")
    model = build_model(
        plain.config, TritonAttentionBackend(), dict(plain.model.state_dict()), device, source=config.model
    )
    runner = OverlapRunner(config, LoadedModel(model, plain.config, plain.path))
    return EngineCore(config, runner)


def count(model: str) -> dict[str, object]:
    """Launches of one steady batch-1 decode step: for the model's first
    decoder layer, for the whole forward pass, and for the engine step."""
    from agentgate.engine.sampling_params import SamplingParams

    core = make_core(model)
    core.add_request("probe", list(range(10, 26)), SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True))
    for _ in range(4):  # admit, prefill, settle into decode
        core.step()
    runner = core.runner
    counter = DispatchCounter()
    marks: dict[str, int] = {}

    def mark(name: str):
        def hook(*_args) -> None:
            marks[name] = counter.count

        return hook

    layer = runner.model.layers[0]
    hooks = [
        layer.register_forward_pre_hook(mark("layer_start")),
        layer.register_forward_hook(mark("layer_end")),
        runner.model.register_forward_pre_hook(mark("forward_start")),
        runner.model.register_forward_hook(mark("forward_end")),
    ]
    try:
        with triton_launches(counter), counter:
            core.step()
    finally:
        for handle in hooks:
            handle.remove()
    core.shutdown()
    return {
        "layers": len(runner.model.layers),
        "per_layer": marks["layer_end"] - marks["layer_start"],
        "forward": marks["forward_end"] - marks["forward_start"],
        "step": counter.count,
        "by_name": counter.by_name,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-dummy", choices=sorted(MODELS))
    args = parser.parse_args()
    where = "cuda" if torch.cuda.is_available() else "cpu (Triton interpreter)"
    result = count(args.model)
    print(f"model={args.model} device={where} backend=triton, batch-1 decode step, eager")
    print(f"kernels per decoder layer: {result['per_layer']}")
    print(f"kernels per forward pass ({result['layers']} layers): {result['forward']}")
    print(
        f"kernels per engine step (input preparation, forward, logits, sampling, post-update, copy out): "
        f"{result['step']}"
    )
    print("launches by operator: " + ", ".join(f"{n} {c}" for n, c in result["by_name"].most_common()))
    print(f"FIGURE kernels per layer, {args.model}: {result['per_layer']} (target <= 15)")
    print(f"FIGURE kernels per decode step, {args.model}: {result['step']}")


if __name__ == "__main__":
    main()
