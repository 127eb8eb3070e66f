"""The quantized weights against the dequantized reference, side by side.

Loads the model twice (``--quantization`` and ``none``) and prints

- what each holds and the weight bytes a decode step reads;
- how far the kernels' scale rounding moves a weight (`kernel_error`);
- logits over a chat prompt: largest and RMS difference, top-1 agreement,
  mean KL divergence of the quantized distribution from the reference;
- greedy chat answers over a fixed set of prompts (`PROMPTS`): how many of N
  agree token for token, and the mean length of the common prefix.

    python -m agentgate.loadtests.quant_check                      # the default model, auto
    python -m agentgate.loadtests.quant_check --quantization int4   # the LM head requantized too
"""

from __future__ import annotations

import argparse
import statistics

import torch

from agentgate.engine import LLM, SamplingParams

PROMPTS = [
    "What is the capital of France?",
    "Name three primary colors.",
    "Write a haiku about the sea.",
    "How many legs does a spider have?",
    "Explain what a CPU cache is in one sentence.",
    "Translate 'good morning' into Spanish.",
    "What is 12 times 12?",
    "Give me a tip for writing clean Python code.",
    "Who wrote Romeo and Juliet?",
    "What does HTTP stand for?",
    "Suggest a name for a grey cat.",
    "Why is the sky blue?",
    "List two uses of a paperclip.",
    "What is the boiling point of water in Celsius?",
    "Describe a rainy day in ten words.",
    "What is the largest planet in the solar system?",
]


def greedy_answers(llm: LLM, max_tokens: int) -> list[list[int]]:
    """One prompt at a time, so the answers do not depend on batching."""
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    return [llm.chat([{"role": "user", "content": p}], params)[0].token_ids for p in PROMPTS]


def agreement(ours: list[list[int]], reference: list[list[int]]) -> tuple[int, float]:
    """(answers equal token for token, mean share of the reference answer
    that the common prefix covers)."""
    equal = sum(a == b for a, b in zip(ours, reference))
    shares = []
    for a, b in zip(ours, reference):
        common = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        shares.append(common / max(len(b), 1))
    return equal, statistics.fmean(shares)


@torch.inference_mode()
def prompt_logits(llm: LLM, prompt: list[int]) -> torch.Tensor:
    """Logits of every prompt position, through the engine's own model in one
    prefill over a throwaway KV cache."""
    from agentgate.engine.attention import AttentionMetadata

    runner = llm.core.runner
    n, block = len(prompt), runner.kv_spec.block_size
    blocks = -(-n // block)
    caches = runner._allocate_kv_cache(blocks)
    lens = torch.tensor([n], dtype=torch.int32)
    qsl = torch.tensor([0, n], dtype=torch.int32)
    meta = AttentionMetadata(
        slot_mapping=torch.arange(n),
        query_start_loc=qsl,
        seq_lens=lens,
        block_tables=torch.arange(blocks, dtype=torch.int32)[None],
        max_query_len=n,
        max_seq_len=n,
        query_start_loc_cpu=qsl,
        seq_lens_cpu=lens,
    )
    hidden = runner.model(torch.tensor(prompt), torch.arange(n), meta, caches)
    return runner.model.compute_logits(hidden)


def print_scale_rounding(model: str | None) -> None:
    """How far rounding a GGUF file's scales to the kernel's dtype moves its
    weights, over every tensor the int4 path keeps."""
    from agentgate.engine.layers.quant_linear import kernel_error
    from agentgate.engine.loaders import gguf_blocks
    from agentgate.engine.model_files.gguf_file import read_gguf
    from agentgate.engine.model_files.model_path import resolve_model_path

    path = resolve_model_path(model)
    if path.suffix != ".gguf":
        return
    file = read_gguf(path)
    errors = [
        kernel_error(gguf_blocks.decode(file.raw(name), t.type, t.shape[0]))
        for name, t in file.tensors.items()
        if t.type in gguf_blocks.INT4_TYPES
    ]
    if errors:
        print(
            f"scale rounding over {len(errors)} tensors: largest weight change {max(e[0] for e in errors):.3f} "
            f"of its group's scale, RMS change up to {max(e[1] for e in errors):.2e} of the weights' RMS"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None)
    parser.add_argument("--quantization", default="auto")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()
    llms = {}
    for mode in (args.quantization, "none"):
        llm = LLM(args.model, runner="sync", dtype=args.dtype, quantization=mode, max_num_seqs=4)
        runner = llm.core.runner
        print(
            f"{mode:>5}: {runner.quantization} ({runner.weights}), "
            f"{runner.weight_bytes_per_step / 1e6:.1f} MB of weights read per decode step"
        )
        llms[mode] = llm
    quantized, reference = llms[args.quantization], llms["none"]
    print_scale_rounding(quantized.config.model)
    prompt = quantized.tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPTS[0]}], add_generation_prompt=True, tokenize=True
    )
    ours, ref = prompt_logits(quantized, prompt), prompt_logits(reference, prompt)
    diff = ours - ref
    kl = (ref.log_softmax(-1).exp() * (ref.log_softmax(-1) - ours.log_softmax(-1))).sum(-1)
    print(
        f"logits over {len(prompt)} positions: largest difference {diff.abs().max():.3f}, "
        f"RMS {diff.pow(2).mean().sqrt():.3f} (reference RMS {ref.pow(2).mean().sqrt():.3f}), "
        f"top-1 agreement {(ours.argmax(-1) == ref.argmax(-1)).float().mean():.3f}, "
        f"mean KL {kl.mean():.2e} (largest {kl.max():.2e})"
    )
    equal, share = agreement(greedy_answers(quantized, args.max_tokens), greedy_answers(reference, args.max_tokens))
    print(
        f"greedy chat answers ({args.max_tokens} tokens): {equal} of {len(PROMPTS)} agree token for token; "
        f"common prefix covers {100 * share:.0f}% of the reference answers"
    )


if __name__ == "__main__":
    main()
