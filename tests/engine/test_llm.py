"""The offline API on the real default model."""

import pytest

from agentgate.engine import LLM, SamplingParams
from agentgate.engine.errors import InvalidRequestError, ModelLoadError
from tests.support.answers import CAPITAL_CHAT, engine_top_two, require_margin


@pytest.fixture(scope="module")
def llm():
    return LLM()  # the default model, default (overlapped) runner, dtype auto


def test_greedy_chat_answers_paris(llm):
    [out] = llm.chat(CAPITAL_CHAT, SamplingParams(temperature=0, max_tokens=24, logprobs=2))
    require_margin(engine_top_two(out.logprobs))
    assert all(entry.logprob == entry.top_logprobs[0] for entry in out.logprobs)  # greedy took the best token
    assert "Paris" in out.text
    assert out.finish_reason == "stop"  # ended on <|im_end|>, which is not in the text
    assert "<|im_end|>" not in out.text and out.token_ids[-1] in llm.tokenizer.eos_token_ids


def test_generate_takes_text_or_token_ids_and_batches(llm):
    prompts = ["The capital of Italy is", llm.tokenizer.encode("The capital of Italy is")]
    a, b = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=8))
    assert a.token_ids == b.token_ids and a.text == b.text and len(a.token_ids) == 8
    assert a.finish_reason == "length"


def test_stop_string_ends_the_text_and_the_request(llm):
    [free] = llm.generate(["1, 2, 3, 4, 5,"], SamplingParams(temperature=0, max_tokens=12))
    stop = free.text.split(",")[2]  # e.g. " 8": the third number the model writes
    [cut] = llm.generate(["1, 2, 3, 4, 5,"], SamplingParams(temperature=0, max_tokens=12, stop=[stop]))
    assert cut.finish_reason == "stop"
    assert cut.text == free.text[: free.text.index(stop)]


@pytest.fixture(scope="module")
def llm_fp32():
    return LLM(dtype="float32")


def test_seeded_sampling_is_reproducible_across_batches(llm_fp32):
    """The noise depends only on (seed, position). In float32 the logits of a
    row barely depend on the batch around it; in bfloat16 the matmul kernels'
    blocking changes with the batch shape, enough to flip near-ties."""
    params = SamplingParams(temperature=1.0, seed=1234, max_tokens=16, ignore_eos=True)
    [alone] = llm_fp32.generate(["Tell me a story."], params)
    mixed = llm_fp32.generate(
        ["Hello", "Tell me a story.", "Goodbye"],
        [SamplingParams(max_tokens=5), params, SamplingParams(temperature=0.5, max_tokens=9)],
    )
    assert mixed[1].token_ids == alone.token_ids


def test_bad_inputs_give_one_clear_error(llm, tmp_path):
    with pytest.raises(InvalidRequestError, match="top_p"):
        llm.generate(["hi"], SamplingParams(top_p=2.0))
    with pytest.raises(ModelLoadError, match="does not exist"):
        LLM(tmp_path / "nope.gguf")
    [ok] = llm.generate(["hi"], SamplingParams(max_tokens=2))
    assert len(ok.token_ids) == 2


def test_a_shared_1000_token_prefix_is_computed_once_and_changes_nothing(llm_fp32):
    """The real model through the paged cache: the second request computes
    only its suffix (the stats say so) and answers as with the cache off."""
    words = ("agent tool call result cache block token prefix engine gateway " * 120).split()
    prefix = llm_fp32.tokenizer.encode(" ".join(words))[:1000]
    first = prefix + llm_fp32.tokenizer.encode(" First question: what is a cache?")
    second = prefix + llm_fp32.tokenizer.encode(" Second question: what is a token?")
    greedy = SamplingParams(temperature=0, max_tokens=12)
    llm_fp32.generate([first], greedy)
    hits_before = llm_fp32.core.stats().prefix_hits_tokens
    [cached] = llm_fp32.generate([second], greedy)
    block = llm_fp32.config.block_size
    assert cached.num_cached_tokens == 1000 // block * block  # every full block of the shared prefix
    assert llm_fp32.core.stats().prefix_hits_tokens - hits_before == cached.num_cached_tokens
    [uncached] = LLM(dtype="float32", enable_prefix_caching=False).generate([second], greedy)
    assert uncached.num_cached_tokens == 0
    assert cached.token_ids == uncached.token_ids


@pytest.fixture(scope="module")
def llm_fp32_torch_attention():
    return LLM(dtype="float32", cpu_attention="torch")


@pytest.mark.parametrize("cpu_attention", ["torch", "auto"])
def test_agents_sharing_a_prompt_prefix_decode_together_as_they_would_apart(request, cpu_attention, monkeypatch):
    """Six requests admitted together share a 600-token prefix: the prefix
    cache holds it once. On the torch path (--cpu-attention torch) their decode
    steps score it once for all rows (cascade attention; steps of at most 4
    decoding requests do not, as a lone request's does not: `engine.step_rows`);
    the compiled kernel (auto) reads it per row from the CPU's cache. Either way
    their tokens equal those of runs with the cache off, where no two rows share
    a block."""
    from agentgate.engine.attention import torch as reference

    llm = request.getfixturevalue("llm_fp32_torch_attention" if cpu_attention == "torch" else "llm_fp32")
    assert (llm.core.runner.model.attention.native is None) == (cpu_attention == "torch")
    seen = []
    original = reference._decode_attention

    def recording(*args, plan):
        seen.append(plan.prefix_len)  # tokens scored once for all rows
        return original(*args, plan=plan)

    monkeypatch.setattr(reference, "_decode_attention", recording)
    words = ("tools: search(query) returns documents; calculator(expression) returns a number. " * 60).split()
    prefix = llm.tokenizer.encode(" ".join(words))[:600]
    prompts = [prefix + llm.tokenizer.encode(f" Question {i}: what is {i} plus {i}?") for i in range(6)]
    greedy = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
    shared = llm.generate(prompts, greedy)
    block = llm.config.block_size
    if cpu_attention == "torch":
        assert max(seen) == 600 // block * block, "the decode steps read the shared prefix once"
    else:
        assert not seen, "the compiled kernel, not the torch path, decodes"
    monkeypatch.setattr(reference, "_decode_attention", original)
    apart = LLM(dtype="float32", enable_prefix_caching=False, cpu_attention=cpu_attention).generate(prompts, greedy)
    assert [out.token_ids for out in shared] == [out.token_ids for out in apart]
