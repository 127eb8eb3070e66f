"""The output projection in int4 against Q8_0 as stored: ``python -m agentgate.loadtests.lm_head_quant``.

The default model ties its LM head to the token embedding, stored as Q8_0
over a 49,152-token vocabulary; every other weight is Q4_1. The engine runs
Q8_0 as two 4-bit groups per 32 inputs (`engine.layers.quantized`), so the
head reads twice the codes of an int4 one and does twice the kernel's work.
``--quantization int4`` already requantizes it at load into Q4-style groups
of 32 (`quantize_int4`; the token lookup reads the same int4 values,
dequantized), and on this model changes nothing else. This loads the model
four ways:

- ``dense``: every weight dequantized (``--quantization none``): the reference;
- ``Q8_0 head (stored)``: the file's blocks as stored (``auto``, the default);
- ``int4 head``: the head and embedding requantized (``int4``);
- ``int4 head, Q8_0 lookup``: the same head, the token lookup reading the
  stored Q8_0 table's values (no flag serves this; it tells which of the two
  uses of the table the int4 rounding hurts);

all with ``--batched-matmul quantized``, so the 200 prompts batched here run
the same kernels a lone request does. It prints per form the weight bytes a
decode step reads and the head's share, the head's matmul at one row, the
step time at batch 1 (medians over alternating rounds), and the greedy
replies (chat prompts, ``--max-tokens`` each, cut after the first end of
sequence; decoded with ``ignore_eos`` so that every form runs exactly the
same batches): how many differ from the reference, and where each first
diverges (tokens after it are not comparable).

The bar: the int4 head could be the default only if it changes no more
replies against the Q8_0 head than the int4 weights as stored already change
against dense, and only if it pays in step time.

    python -m agentgate.loadtests.lm_head_quant                          # 200 prompts x 32 tokens (~3 min)
    python -m agentgate.loadtests.lm_head_quant --prompts 50 --max-tokens 16

Measured (2026-12-04) on a shared 2-core Xeon (AVX-512 BF16, AMX), 2
threads, the default command:

    form                     weights/step MB LM head MB head ms (1 row) step ms (batch 1)
    dense                             269.03      56.62           1.154             27.90
    Q8_0 head (stored)                101.81      35.39           1.378             17.19
    int4 head                          84.12      17.69           0.696             16.17
    int4 head, Q8_0 lookup             84.12      17.69           0.702             16.24
    int4 weights as stored vs dense (the bar)   95 of 200 replies differ (first divergence: median token 12)
    int4 head vs Q8_0 head                     193 of 200 replies differ (median token 6; 57 within tokens 0-3)
    int4 head, Q8_0 lookup vs Q8_0 head        192 of 200 replies differ (median token 7)

Verdict: it pays little and changes far more than the bar, so ``auto``
(the head as stored) stays the default. The head's 17.7 MB fewer bytes
and half the kernel work save ~0.7 ms of its 1.4 ms, ~1 ms (6%) of a
17 ms step: at one row the step is bound by compute and per-op overhead,
not by its bytes (`loadtests.step_profile`'s memory floor). But int4
rounding of the head changes 193 of 200 greedy replies against the Q8_0
head, twice as many as the int4 weights as stored change against dense
(95), and mostly within the first 8 tokens; giving the lookup back its
Q8_0 values changes nothing to that (192), so it is the head's rounding
(the 49,152 logits it ranks), not the embedding's (``quant_check
--quantization int4 --dtype bfloat16``: over a 37-token chat prompt, whose
other matmuls run as with ``auto``, the logits move by 1.84 RMS against a
reference RMS of 8.58, top-1 agreement 0.838, mean KL 0.10; ``auto``: 0).
Who wants the bytes
anyway has them: on this model ``--quantization int4`` requantizes exactly
this table and nothing else.
"""

from __future__ import annotations

import argparse
import statistics
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch import nn

from agentgate.engine import LLM, SamplingParams
from agentgate.engine.kernel_choice.row_choice import fastest_seconds
from agentgate.engine.layers.cpu_linear import PackedLinear
from agentgate.engine.layers.quant_linear import QuantLinear, tensor_bytes
from agentgate.loadtests.step_profile import drain, fill, run_steps

# (label, --quantization) of each form, the reference first.
FORMS: tuple[tuple[str, str], ...] = (
    ("dense", "none"),
    ("Q8_0 head (stored)", "auto"),
    ("int4 head", "int4"),
    ("int4 head, Q8_0 lookup", "int4"),  # the token lookup given back the stored table's values
)
TOPICS = (
    "the moon",
    "photosynthesis",
    "a bicycle",
    "the French revolution",
    "prime numbers",
    "coffee",
    "volcanoes",
    "the internet",
    "honeybees",
    "a lighthouse",
    "chess",
    "rainbows",
    "the stock market",
    "penguins",
    "electricity",
    "the Roman empire",
    "recycling",
    "jazz music",
    "black holes",
    "baking bread",
)
TASKS = (
    "Explain {} to a child.",
    "Write one sentence about {}.",
    "List three facts about {}.",
    "What is the most surprising thing about {}?",
    "Write a short poem about {}.",
    "Give a one-line definition of {}.",
    "Why do people care about {}?",
    "Describe {} in five words.",
    "Ask me a quiz question about {}.",
    "Summarize the history of {} briefly.",
)
# Buckets of the first position where a reply differs (token index, from 0).
BUCKETS = ((0, 3), (4, 7), (8, 15), (16, 31), (32, 1 << 30))


def user_messages(count: int) -> list[str]:
    """``count`` fixed chat prompts (every task over every topic, in order; 200 distinct)."""
    texts = [task.format(topic) for topic in TOPICS for task in TASKS]
    return [texts[i % len(texts)] for i in range(count)]


def prompt_ids(llm: LLM, count: int) -> list[list[int]]:
    """The prompts as the chat template renders them; token ids of the same lengths for a model
    loaded without a tokenizer (``--load-format dummy``)."""
    if llm.tokenizer is None:
        vocab = llm.core.vocab_size
        return [[(i * 31 + j * 7) % vocab for j in range(12 + i % 8)] for i in range(count)]
    return [
        llm.tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
        )
        for text in user_messages(count)
    ]


def head_bytes(head: nn.Module) -> int:
    """Bytes one call of the LM head reads of its weights."""
    if isinstance(head, QuantLinear):
        return head.nbytes
    if isinstance(head, PackedLinear):  # bfloat16, in oneDNN's layout
        return 2 * head.out_features * head.in_features
    return tensor_bytes(head.weight)


@dataclass
class Form:
    """One way of holding the weights, loaded, and what was measured on it."""

    label: str
    llm: LLM
    head: nn.Module
    step_ms: list[float] = field(default_factory=list)
    threads: list[int] = field(default_factory=list)  # torch's threads during each timing
    replies: list[list[int]] = field(default_factory=list)

    @property
    def weight_bytes(self) -> int:
        return self.llm.core.runner.weight_bytes_per_step

    def head_ms(self, repeat: int) -> float:
        """The LM head at one row (fastest of ``repeat`` calls), in milliseconds."""
        x = torch.randn(1, self.head.in_features).to(self.llm.core.runner.dtype)
        with torch.inference_mode():
            return fastest_seconds(lambda: self.head(x), repeat) * 1e3


def load(model: str | None, load_format: str, quantization: str, max_num_seqs: int) -> LLM:
    return LLM(
        model,
        load_format=load_format,
        quantization=quantization,
        batched_matmul="quantized",
        max_num_seqs=max_num_seqs,
        kv_cache_bytes=256 << 20,
    )


def time_batch_one(form: Form, steps: int) -> None:
    """One decode step's time at batch 1, averaged over ``steps`` steps, added to ``form.step_ms``."""
    fill(form.llm, 1, steps)
    form.step_ms.append(run_steps(form.llm, steps) / steps * 1e3)
    form.threads.append(torch.get_num_threads())
    drain(form.llm)


def greedy_replies(llm: LLM, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    """Every prompt's greedy reply, all batched, cut after its first end of sequence."""
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    eos = llm.tokenizer.eos_token_ids if llm.tokenizer else frozenset()
    replies = []
    for out in llm.generate(prompts, params):
        ids = out.token_ids
        end = next((i + 1 for i, token in enumerate(ids) if token in eos), len(ids))
        replies.append(ids[:end])
    return replies


def first_divergence(reply: list[int], reference: list[int]) -> int | None:
    """The first token index where the replies differ (one ending earlier differs there); None if equal."""
    if reply == reference:
        return None
    return next((i for i, (a, b) in enumerate(zip(reply, reference)) if a != b), min(len(reply), len(reference)))


def divergence_line(name: str, replies: list[list[int]], reference: list[list[int]]) -> str:
    """How many replies differ from the reference, and where they first diverge."""
    positions = [p for a, b in zip(replies, reference, strict=True) if (p := first_divergence(a, b)) is not None]
    counts = Counter(next(f"{lo}-{hi}" for lo, hi in BUCKETS if lo <= p <= hi) for p in positions)
    buckets = ", ".join(f"{lo}-{hi}: {counts[f'{lo}-{hi}']}" for lo, hi in BUCKETS[:-1])
    median = f"median {statistics.median(positions):.0f}" if positions else "none"
    return (
        f"  {name:<44} {len(positions):>3} of {len(reference)} replies differ; "
        f"first divergence at token {buckets} ({median})"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="a .gguf file or an HF directory (default: the default model)")
    parser.add_argument("--load-format", default="auto")
    parser.add_argument("--prompts", type=int, default=200, help="chat prompts, batched through each form")
    parser.add_argument("--max-tokens", type=int, default=32, help="greedy tokens per reply")
    parser.add_argument("--max-num-seqs", type=int, default=64, help="requests decoding together")
    parser.add_argument("--steps", type=int, default=32, help="decode steps per batch-1 timing")
    parser.add_argument("--rounds", type=int, default=3, help="alternating batch-1 timings per form")
    args = parser.parse_args(argv)
    forms = []
    for label, quantization in FORMS:
        llm = load(args.model, args.load_format, quantization, args.max_num_seqs)
        if label == FORMS[3][0]:
            llm.core.runner.model.embed_tokens.weight = forms[1].llm.core.runner.model.embed_tokens.weight
        forms.append(Form(label, llm, llm.core.runner.model.head_linear()))
        print(f"{label}: {llm.core.runner.weights}", flush=True)
    for _ in range(args.rounds):  # alternating, so a neighbour's load falls on every form alike
        for form in forms:
            time_batch_one(form, args.steps)
    prompts = prompt_ids(forms[0].llm, args.prompts)
    for form in forms:
        form.replies = greedy_replies(form.llm, prompts, args.max_tokens)
    print(
        f"{'form':<24} {'weights/step MB':>15} {'LM head MB':>10} {'head ms (1 row)':>15} {'step ms (batch 1)':>17} "
        f"{'threads':>7}"
    )
    for form in forms:
        print(
            f"{form.label:<24} {form.weight_bytes / 1e6:>15.2f} {head_bytes(form.head) / 1e6:>10.2f} "
            f"{form.head_ms(20):>15.3f} {statistics.median(form.step_ms):>17.2f} {'/'.join(map(str, form.threads)):>7}"
        )
    dense, stored, *int4 = forms
    print(f"greedy replies ({args.prompts} chat prompts x {args.max_tokens} tokens, batched):")
    print(divergence_line("int4 weights as stored vs dense (the bar)", stored.replies, dense.replies))
    for form in int4:
        print(divergence_line(f"{form.label} vs Q8_0 head", form.replies, stored.replies))
        print(divergence_line(f"{form.label} vs dense", form.replies, dense.replies))


if __name__ == "__main__":
    main()
