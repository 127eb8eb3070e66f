"""LoRA adapters per request on the real default model (SmolLM2-135M-Instruct), with adapters
written by the tests: through an adapter equals the merged-weights reference, a zero adapter is
bit-identical to the base model, a mixed batch gives each row what it gets alone, the prefix cache
shares no KV across adapters, adapters load and unload at run time, and every refusal names what
it refuses."""

from __future__ import annotations

import math

import pytest

from agentgate.engine import LLM, SamplingParams
from agentgate.engine.errors import InvalidRequestError, LoraError
from agentgate.engine.lora.adapter import load_adapter
from tests.support.lora_adapters import SMOL, merge_into, write_adapter

GREEDY = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
PROMPTS = ["The capital of France is", "Write a haiku about the sea.", "def fibonacci(n):", "List three colours:"]


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    return {
        "rand": write_adapter(root / "rand", seed=1),
        "rand2": write_adapter(root / "rand2", seed=2, rank=4, targets=("q_proj", "v_proj", "down_proj")),
        "zero": write_adapter(root / "zero", zero=True),
    }


@pytest.fixture(scope="module")
def llm(adapters):
    """Dense float32: a row's logits barely depend on the batch around it (see test_llm)."""
    modules = tuple(f"{name}={path}" for name, path in adapters.items())
    return LLM(dtype="float32", quantization="none", lora_modules=modules, max_loras=5, num_kv_blocks=256)


def tokens(llm, prompts, lora=""):
    return [out.token_ids for out in llm.generate(prompts, GREEDY, lora=lora)]


def test_an_adapter_changes_the_output_and_equals_the_merged_weights(llm, adapters):
    base = tokens(llm, PROMPTS[:2])
    adapted = tokens(llm, PROMPTS[:2], lora="rand")
    assert adapted != base  # the random adapter matters
    reference = LLM(dtype="float32", quantization="none", num_kv_blocks=64, enable_prefix_caching=False)
    merge_into(reference.core.runner.model, adapters["rand"], scale=16.0 / 8)
    assert tokens(reference, PROMPTS[:2]) == adapted


def test_a_zero_adapter_is_bit_identical_to_the_base_model(adapters):
    llm = LLM(lora_modules=(f"zero={adapters['zero']}",), num_kv_blocks=64)  # bf16, the default dtype
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, logprobs=3)
    [base] = llm.generate([PROMPTS[1]], params)
    [zero] = llm.generate([PROMPTS[1]], params, lora="zero")
    assert zero.token_ids == base.token_ids
    assert [(e.logprob, e.top_logprobs) for e in zero.logprobs] == [(e.logprob, e.top_logprobs) for e in base.logprobs]


def test_a_mixed_batch_gives_each_row_what_it_gets_alone(llm):
    loras = ["rand", "", "rand2", "rand"]  # rand's rows are not contiguous: the grouped (indexed) path
    alone = [tokens(llm, [p], lora=name)[0] for p, name in zip(PROMPTS, loras)]
    assert tokens(llm, PROMPTS, lora=loras) == alone
    assert len({tuple(t) for t in alone}) == 4


def test_the_prefix_cache_shares_no_kv_across_adapters(llm):
    prompt = "You are a helpful assistant. " * 12 + "Say hi."
    params = SamplingParams(temperature=0, max_tokens=2)
    [first] = llm.generate([prompt], params)
    [again] = llm.generate([prompt], params)
    assert first.num_cached_tokens == 0 and again.num_cached_tokens > 0  # the base model shares with itself
    [zero] = llm.generate([prompt], params, lora="zero")
    [rand] = llm.generate([prompt], params, lora="rand")
    [zero_again] = llm.generate([prompt], params, lora="zero")
    assert zero.num_cached_tokens == 0 and rand.num_cached_tokens == 0
    assert zero_again.num_cached_tokens > 0


def test_adapters_load_and_unload_at_run_time(llm, tmp_path):
    path = write_adapter(tmp_path / "late", seed=7, rank=2)
    with pytest.raises(LoraError, match="'late' is not loaded"):
        llm.generate(PROMPTS[:1], GREEDY, lora="late")
    llm.core.load_lora("late", str(path))
    assert "late" in llm.core.lora_names()
    expected = tokens(llm, PROMPTS[:1], lora="late")
    assert expected != tokens(llm, PROMPTS[:1])
    # Unloaded while a request runs: the request finishes through it; new requests are refused.
    core = llm.core
    core.add_request("in-flight", llm.tokenizer.encode(PROMPTS[0]), GREEDY, lora="late")
    got: list[int] = []
    for out in core.step():
        got += out.new_token_ids
    core.unload_lora("late")
    assert "late" not in core.lora_names()
    finished = False
    while not finished:
        for out in core.step():
            got += out.new_token_ids
            finished = finished or out.finish_reason is not None
    assert [got] == expected
    with pytest.raises(LoraError, match="'late' is not loaded"):
        core.add_request("after", [1, 2, 3], GREEDY, lora="late")
    with pytest.raises(LoraError, match="'late' is not loaded"):
        core.unload_lora("late")


def test_refusals_name_the_adapter_and_the_module(llm, adapters, tmp_path):
    with pytest.raises(LoraError, match="'rand' is already loaded"):
        llm.core.load_lora("rand", str(adapters["rand"]))
    (tmp_path / "empty").mkdir()
    with pytest.raises(LoraError, match="not a PEFT adapter directory: no adapter_config.json"):
        llm.core.load_lora("empty", str(tmp_path / "empty"))
    with pytest.raises(LoraError, match="is not a directory"):
        llm.core.load_lora("missing", str(tmp_path / "missing"))
    big = write_adapter(tmp_path / "big", rank=32, layers=1)
    with pytest.raises(LoraError, match="'big': rank 32 is above --max-lora-rank 16"):
        llm.core.load_lora("big", str(big))
    other = write_adapter(
        tmp_path / "other", dims={**SMOL, "hidden": 960, "q": 960, "kv": 320}, layers=1, targets=("q_proj",)
    )
    with pytest.raises(LoraError, match=r"'other': layers.0.self_attn.q_proj has lora_A \(8, 960\).*another base"):
        llm.core.load_lora("other", str(other))
    deep = write_adapter(tmp_path / "deep", dims={**SMOL, "layers": 32}, targets=("o_proj",))
    with pytest.raises(LoraError, match="'deep': .*layers.30.self_attn.o_proj.* the base model has 30 layers"):
        llm.core.load_lora("deep", str(deep))
    assert "big" not in llm.core.lora_names() and "other" not in llm.core.lora_names()


def test_a_bad_adapter_is_refused_at_start(tmp_path):
    (tmp_path / "nope").mkdir()
    with pytest.raises(LoraError, match="'bad'.*no adapter_config.json"):
        LLM(lora_modules=(f"bad={tmp_path / 'nope'}",), num_kv_blocks=16)
    with pytest.raises(InvalidRequestError, match="NAME=PATH"):
        LLM(lora_modules=("nopath",), num_kv_blocks=16)


def test_scaling_is_alpha_over_r_or_over_sqrt_r_with_rslora(llm, tmp_path):
    config = llm.core.runner.model_config
    plain = write_adapter(tmp_path / "plain", rank=4, alpha=8, layers=1)
    rs = write_adapter(tmp_path / "rs", rank=4, alpha=8, layers=1, rslora=True)
    load = dict(max_rank=16, dtype=llm.core.runner.dtype, device=llm.core.runner.device)
    assert load_adapter("p", plain, config, **load).scale == 2.0
    assert load_adapter("r", rs, config, **load).scale == 8 / math.sqrt(4)


def test_the_engine_without_lora_refuses_an_adapter_name():
    llm = LLM(runner="sync", num_kv_blocks=16)
    with pytest.raises(LoraError, match="started without LoRA"):
        llm.generate(["hi"], GREEDY, lora="any")


def test_suffix_drafts_come_only_from_the_same_adapters_outputs():
    """The speculator keys the suffix proposer by tenant and adapter: an adapter's replies never
    draft for the base model's requests nor another adapter's, and do for its own."""
    from agentgate.engine.lora.adapter import LoraAdapter
    from agentgate.engine.request import Request
    from agentgate.engine.speculative.proposers import SuffixProposer
    from agentgate.engine.speculative.speculator import Speculator

    proposer = SuffixProposer()
    speculator = Speculator(proposer)
    one, two = (LoraAdapter(n, "", 1, 1.0, {}, uid=f"{n}#1") for n in ("one", "two"))

    def start(rid, prompt, lora):
        request = Request(rid, prompt, SamplingParams(), seed=0, eos_token_ids=frozenset(), max_model_len=99, lora=lora)
        speculator.start(request)

    reply = [60, 61, 62, 63, 64]
    start("first", [1, 2, 10, 11], one)
    proposer.extend("first", reply)
    proposer.finish("first")
    start("base", [7, 8, 10, 11], None)
    start("other", [7, 8, 10, 11], two)
    start("same", [5, 6, 10, 11], one)
    assert proposer.propose("base", [7, 8, 10, 11], 4) == []
    assert proposer.propose("other", [7, 8, 10, 11], 4) == []
    assert proposer.propose("same", [5, 6, 10, 11], 4) == reply[:4]


def test_the_null_runner_refuses_lora():
    from agentgate.engine.config import EngineConfig

    with pytest.raises(InvalidRequestError, match="need a model"):
        EngineConfig(runner="null", enable_lora=True)
    with pytest.raises(InvalidRequestError, match="2 lora_modules given, --max-cpu-loras is 1"):
        EngineConfig(lora_modules=("a=/x", "b=/y"), max_loras=1)
    with pytest.raises(InvalidRequestError, match="--max-cpu-loras 1 is below --max-loras 2"):
        EngineConfig(max_loras=2, max_cpu_loras=1)
    assert EngineConfig(lora_modules=("a=/x", "b=/y"), max_loras=1, max_cpu_loras=2).stored_loras == 2
