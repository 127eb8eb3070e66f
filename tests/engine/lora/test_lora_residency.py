"""Stored versus resident LoRA adapters on the real default model (dense float32, adapters written
by the tests): five adapters stored (``--max-cpu-loras 5``), one or two resident in a step
(``--max-loras``); a batch that mixes four of them and the base model gives each request what it
gets alone (the scheduler holds what does not fit a step), in the CPU's segmented form and in the
kernel form over resident slots (CUDA's; here through the kernel's torch reference), and through
an adapter equals the merged-weights reference. Loading past ``--max-cpu-loras`` is refused
naming it."""

from __future__ import annotations

import pytest

from agentgate.engine import LLM, SamplingParams
from agentgate.engine.errors import LoraError
from agentgate.engine.kernels.lora import add_lora_reference
from tests.support.lora_adapters import merge_into, write_adapter

GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
PROMPTS = ["The capital of France is", "Write a haiku about the sea.", "Hello!", "def fibonacci(n):", "Colours:"]
LORAS = ["a", "b", "", "c", "d"]  # four adapters and the base model in one batch


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    root = tmp_path_factory.mktemp("stored")
    return {
        "a": write_adapter(root / "a", seed=1),
        "b": write_adapter(root / "b", seed=2, rank=4, targets=("q_proj", "v_proj", "down_proj")),
        "c": write_adapter(root / "c", seed=3, rank=2, targets=("gate_proj", "o_proj")),
        "d": write_adapter(root / "d", seed=4, rank=16, alpha=8),
        "zero": write_adapter(root / "zero", zero=True),
    }


def make_llm(adapters: dict, max_loras: int) -> LLM:
    modules = tuple(f"{name}={path}" for name, path in adapters.items())
    return LLM(
        dtype="float32",
        quantization="none",
        lora_modules=modules,
        max_loras=max_loras,
        max_cpu_loras=5,
        num_kv_blocks=256,
    )


@pytest.fixture(scope="module")
def segmented(adapters):
    """One adapter resident per step, the CPU's segmented form."""
    return make_llm(adapters, 1)


@pytest.fixture(scope="module")
def slotted(adapters):
    """Two resident slots and the kernel form (what CUDA runs), through the kernel's torch reference."""
    llm = make_llm(adapters, 2)
    llm.core.runner.lora.use_slots(add_lora_reference)
    return llm


def tokens(llm: LLM, prompts: list[str], lora: str | list[str] = "") -> list[list[int]]:
    return [out.token_ids for out in llm.generate(prompts, GREEDY, lora=lora)]


@pytest.mark.parametrize("form", ["segmented", "slotted"])
def test_four_stored_adapters_in_one_batch_give_each_request_what_it_gets_alone(request, adapters, form):
    llm = request.getfixturevalue(form)
    held = llm.core.stats().num_lora_held_steps
    batch = tokens(llm, PROMPTS, lora=LORAS)
    assert llm.core.stats().num_lora_held_steps > held  # four adapters, one or two slots: some waited
    alone = [tokens(llm, [prompt], lora=name)[0] for prompt, name in zip(PROMPTS, LORAS)]
    assert batch == alone
    assert tokens(llm, [PROMPTS[2]], lora="a") != alone[2]  # each adapter matters
    reference = LLM(dtype="float32", quantization="none", num_kv_blocks=64, enable_prefix_caching=False)
    merge_into(reference.core.runner.model, adapters["a"], scale=16.0 / 8)
    assert tokens(reference, PROMPTS[:1]) == alone[:1]


def test_the_slots_hold_the_steps_adapters_and_a_zero_adapter_is_bit_identical(slotted):
    slots = slotted.core.runner.lora.slots
    copies = slots.num_copies
    tokens(slotted, PROMPTS, lora=LORAS)
    assert slots.num_copies >= copies + 2 and len(slots.resident()) == 2  # adapters came and went
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, logprobs=3)
    [base] = slotted.generate([PROMPTS[1]], params)
    [zero] = slotted.generate([PROMPTS[1]], params, lora="zero")
    assert zero.token_ids == base.token_ids
    assert [(e.logprob, e.top_logprobs) for e in zero.logprobs] == [(e.logprob, e.top_logprobs) for e in base.logprobs]


def test_loading_past_max_cpu_loras_is_refused_naming_it(segmented, tmp_path):
    extra = write_adapter(tmp_path / "extra", seed=9, rank=2, layers=1)
    with pytest.raises(LoraError, match="'extra': 5 adapters are loaded, --max-cpu-loras is 5"):
        segmented.core.load_lora("extra", str(extra))
    segmented.core.unload_lora("zero")
    segmented.core.load_lora("extra", str(extra))
    assert segmented.core.lora_names() == ["a", "b", "c", "d", "extra"]
