"""The cost of constrained decoding, on both runners, side by side in one process.

The same workload (``--batch`` concurrent requests, a short chat prompt,
greedy, ``--output-len`` tokens each) runs through an EngineCore of each
runner three ways: no grammar, every request under a grammar, and half of
them under one (the other half shares the constrained steps). The default
grammar is a JSON schema that cannot close within ``--output-len`` tokens (an
object holding an array of at least 512 integers), so every request makes
exactly ``--output-len`` tokens either way and tokens/s compare like for like;
``--grammar json_object`` uses OpenAI's json_object instead: every request
ignores EOS, so once its object is closed (the grammar then allows anything)
it carries on to ``--output-len`` tokens, still sampled the constrained way.

Prints output tokens/s per runner and mode, the constrained/unconstrained
ratio per runner, and the overlap/sync ratio per mode. Runs alternate between
runners and modes, the best of ``--repeats`` is kept; grammars are compiled
(and cached) before timing, so the figures are the per-step cost: filling
bitmasks, accepting tokens, and, with the overlapped runner, sampling a
constrained step only once its predecessor has resolved (see
``engine/core.py`` ``EngineCore.step``).

    python -m agentgate.loadtests.constrained_bench                    # the default model
    python -m agentgate.loadtests.constrained_bench --batch 16 --output-len 64 --grammar json_object

Grammars need the model's tokenizer: a real model (the default, a .gguf or an
HF directory), not the dummy configurations.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from agentgate.engine.core import EngineCore
from agentgate.engine.model_files.model_path import resolve_model_path
from agentgate.engine.sampling_params import SamplingParams, StructuredOutput
from agentgate.engine.text.tokenizer import load_tokenizer
from agentgate.loadtests.runner_bench import make_core

RUNNERS = ("sync", "overlap")
MODES = ("unconstrained", "constrained", "half")
LONG_ARRAY = {
    "type": "object",
    "properties": {"values": {"type": "array", "items": {"type": "integer"}, "minItems": 512}},
    "required": ["values"],
}


def grammar(kind: str) -> StructuredOutput:
    if kind == "json_object":
        return StructuredOutput(json_object=True)
    return StructuredOutput(json_schema=json.dumps(LONG_ARRAY))


def run(
    core: EngineCore, prompts: list[list[int]], params: list[SamplingParams], eos: frozenset[int], tag: str
) -> tuple[float, int]:
    """(output tokens/s, tokens) for the batch, from the first add to the last output."""
    start = time.perf_counter()
    for i, (prompt, p) in enumerate(zip(prompts, params)):
        core.add_request(f"{tag}-{i}", prompt, p, eos)
    produced = 0
    while core.has_work:
        for out in core.step():
            if out.error:
                raise RuntimeError(out.error)
            produced += len(out.new_token_ids)
    if core.runner.device.type == "cuda":
        torch.cuda.synchronize()
    return produced / (time.perf_counter() - start), produced


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="default", help="'default' or a path to a real model (it needs a tokenizer)")
    parser.add_argument("--batch", type=int, default=8, help="concurrent requests")
    parser.add_argument("--output-len", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--grammar", choices=("schema", "json_object"), default="schema")
    parser.add_argument("--dtype", default="auto", help="auto = bfloat16 on CUDA, float32 on CPU")
    args = parser.parse_args()
    dtype = "bfloat16" if args.dtype == "auto" and torch.cuda.is_available() else args.dtype
    if dtype == "auto":
        dtype = "float32"
    tokenizer = load_tokenizer(resolve_model_path(None if args.model == "default" else args.model))
    prompts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": f"Write a JSON object listing numbers, number {i}."}], tokenize=True
        )
        for i in range(args.batch)
    ]
    eos = tokenizer.eos_token_ids
    constrained = grammar(args.grammar)

    def params(mode: str) -> list[SamplingParams]:
        out = []
        for i in range(args.batch):
            on = mode == "constrained" or (mode == "half" and i % 2 == 0)
            out.append(
                SamplingParams(
                    temperature=0.0, max_tokens=args.output_len, ignore_eos=True, structured=constrained if on else None
                )
            )
        return out

    cores = {runner: make_core(args.model, runner, dtype, args.batch) for runner in RUNNERS}
    device = cores["overlap"].runner.device
    print(
        f"model={args.model} device={device} dtype={cores['overlap'].runner.dtype} batch={args.batch} "
        f"output={args.output_len} grammar={args.grammar} prompt~{len(prompts[0])} tokens"
    )
    for runner, core in cores.items():  # warm up: kernels, allocator, graphs, the grammar compiled and cached
        for mode in MODES:
            run(core, prompts[:2], params(mode)[:2], eos, f"warm-{mode}")
    best = {(r, m): 0.0 for r in RUNNERS for m in MODES}
    made = {}
    for repeat in range(args.repeats):
        order = [(r, m) for r in RUNNERS for m in MODES]
        for runner, mode in order if repeat % 2 == 0 else reversed(order):
            rate, tokens = run(cores[runner], prompts, params(mode), eos, f"r{repeat}-{runner}-{mode}")
            best[runner, mode] = max(best[runner, mode], rate)
            made[runner, mode] = tokens
    for runner in RUNNERS:
        line = "  ".join(f"{m} {best[runner, m]:8.1f} tok/s ({made[runner, m]} tok)" for m in MODES)
        print(f"{runner:8s} {line}")
    for runner in RUNNERS:
        base = best[runner, "unconstrained"]
        print(
            f"{runner:8s} constrained/unconstrained {best[runner, 'constrained'] / base:.3f}   "
            f"half/unconstrained {best[runner, 'half'] / base:.3f}"
        )
    for mode in MODES:
        print(f"overlap/sync {mode:13s} {best['overlap', mode] / best['sync', mode]:.3f}")


if __name__ == "__main__":
    main()
