"""Speculative decoding on the real default model (dense fp32 weights), with
each runner verifying the drafts: the same tokens as the sync runner decoding
token by token, free text and under a grammar, where jump-forward drafts the
forced text."""

import json

import pytest

from agentgate.engine import LLM, SamplingParams
from agentgate.engine.sampling_params import StructuredOutput

pytestmark = pytest.mark.slow

CALL = {
    "type": "object",
    "properties": {
        "name": {"const": "get_weather"},
        "arguments": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "arguments"],
    "additionalProperties": False,
}
TOOL_PROMPT = [{"role": "user", "content": "What is the weather in Paris? Answer with a get_weather call as JSON."}]
ECHO_PROMPT = [
    {
        "role": "user",
        "content": "Repeat this list exactly: alpha beta gamma delta, alpha beta gamma delta, alpha beta gamma delta.",
    }
]


OPTIONS = dict(quantization="none", dtype="float32")


@pytest.fixture(scope="module")
def plain():
    return LLM(runner="sync", **OPTIONS)


@pytest.fixture(scope="module", params=["sync", "overlap"])
def pair(request, plain):
    return plain, LLM(runner=request.param, speculative="suffix", **OPTIONS)


def test_greedy_and_seeded_text_is_identical_with_drafts(pair):
    plain, spec = pair
    params = [
        SamplingParams(temperature=0, max_tokens=48),
        SamplingParams(temperature=0, max_tokens=40, stop_token_ids=[11]),
        SamplingParams(temperature=0.8, seed=5, max_tokens=40),
    ]
    prompts = [ECHO_PROMPT, ECHO_PROMPT, ECHO_PROMPT]
    want = plain.chat(prompts, params)
    # Twice: the second time, the suffix index holds the first time's outputs.
    for _ in range(2):
        got = spec.chat(prompts, params)
        for a, b in zip(want, got):
            assert b.token_ids == a.token_ids and b.text == a.text and b.finish_reason == a.finish_reason
    stats = spec.core.scheduler.stats()
    assert stats.num_accepted_tokens > 0 and stats.num_sampled_tokens > stats.num_sampling_steps


def test_jump_forward_text_equals_unforced_greedy_text(pair):
    plain, spec = pair
    params = SamplingParams(temperature=0, max_tokens=80, structured=StructuredOutput(json_schema=json.dumps(CALL)))
    speculator = spec.core.scheduler.speculator
    forced_before, accepted_before = speculator.num_forced_tokens, speculator.num_accepted_tokens
    [want] = plain.chat(TOOL_PROMPT, params)
    [got] = spec.chat(TOOL_PROMPT, params)
    assert got.token_ids == want.token_ids and got.text == want.text
    assert json.loads(got.text)["name"] == "get_weather"
    assert speculator.num_forced_tokens > forced_before, "the grammar forced no text"
    assert speculator.num_accepted_tokens > accepted_before
