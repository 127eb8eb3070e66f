"""The offline API on the real default model."""

import pytest

from engine import LLM, SamplingParams
from engine.errors import InvalidRequestError, ModelLoadError


@pytest.fixture(scope="module")
def llm():
    return LLM()  # the default model, default (overlapped) runner, dtype auto


def test_greedy_chat_answers_paris(llm):
    [out] = llm.chat([{"role": "user", "content": "What is the capital of France?"}], SamplingParams(temperature=0, max_tokens=24))
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
    mixed = llm_fp32.generate(["Hello", "Tell me a story.", "Goodbye"], [SamplingParams(max_tokens=5), params, SamplingParams(temperature=0.5, max_tokens=9)])
    assert mixed[1].token_ids == alone.token_ids


def test_bad_inputs_give_one_clear_error(llm, tmp_path):
    with pytest.raises(InvalidRequestError, match="top_p"):
        llm.generate(["hi"], SamplingParams(top_p=2.0))
    with pytest.raises(ModelLoadError, match="does not exist"):
        LLM(tmp_path / "nope.gguf")
    [ok] = llm.generate(["hi"], SamplingParams(max_tokens=2))
    assert len(ok.token_ids) == 2
