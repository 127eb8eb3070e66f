"""Stop strings and held-back text, over the real default-model tokenizer."""

import pytest

from agentgate.engine.model_files.model_path import default_model_path
from agentgate.engine.sampling_params import SamplingParams
from agentgate.engine.text.output_processor import OutputProcessor
from agentgate.engine.text.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(default_model_path())


def stream(tokenizer, text, params, chunk=1):
    ids = tokenizer.encode(text, add_special_tokens=False)
    proc = OutputProcessor(tokenizer, params)
    out = []
    for i in range(0, len(ids), chunk):
        piece = ids[i : i + chunk]
        delta = proc.push(piece, finished=i + chunk >= len(ids))
        out.append(delta.text)
        if delta.stopped:
            return "".join(out), True
    return "".join(out), False


@pytest.mark.parametrize("chunk", [1, 2, 5, 100])
def test_stop_string_cuts_the_text_however_tokens_arrive(tokenizer, chunk):
    text = "The answer is 42. Observation: done"
    assert stream(tokenizer, text, SamplingParams(stop=["Observation:"]), chunk) == ("The answer is 42. ", True)
    assert stream(tokenizer, text, SamplingParams(stop=["Observation:"], include_stop_str_in_output=True), chunk) == (
        "The answer is 42. Observation:",
        True,
    )


@pytest.mark.parametrize("chunk", [1, 3])
def test_without_a_match_all_text_comes_out(tokenizer, chunk):
    text = "Obser vation is not a stop 🙂 at all"
    assert stream(tokenizer, text, SamplingParams(stop=["Observation:"]), chunk) == (text, False)
    assert stream(tokenizer, text, SamplingParams(), chunk) == (text, False)


def test_earliest_of_several_stop_strings_wins(tokenizer):
    assert stream(tokenizer, "a b c d", SamplingParams(stop=["c", " b"])) == ("a", True)
