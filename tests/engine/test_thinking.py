"""Thinking the engine enforces (engine.structured.thinking) on the real default model, under a
generation prompt that opens ``<think>\\n``: this model never closes the block by itself (it thinks on,
or ends its turn inside it), so an answer exists only where the engine closes the thinking."""

import json

import jsonschema
import pytest

from agentgate.engine import LLM, SamplingParams
from agentgate.engine.errors import InvalidRequestError
from agentgate.engine.front.protocol import ThinkingSpec
from agentgate.engine.sampling_params import StructuredOutput

WEATHER = "What is the weather in Paris?"  # it thinks on past 24 tokens
CAPITAL = "What is the capital of France?"  # it answers and ends its turn inside the block
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}, "temp": {"type": "integer"}},
    "required": ["city", "temp"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def llm():
    return LLM()  # the default model, default runner (as tests/engine/test_llm.py)


def _prompt(llm, text):
    tok = llm.tokenizer
    chat = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
    return chat + tok.encode("<think>\n", add_special_tokens=False)


def _spec(llm, budget):
    tok = llm.tokenizer
    start, end = (tok.encode(s, add_special_tokens=False) for s in ("<think>", "</think>"))
    return ThinkingSpec(start, end, prompt_opened=True, budget=budget)


def _split(out, end):
    """(thinking tokens, answer tokens) of a reply whose block the prompt opened: around the end sequence."""
    ids = out.token_ids
    at = next(i for i in range(len(ids)) if ids[i : i + len(end)] == end)
    return ids[:at], ids[at + len(end) :]


def test_the_budget_closes_the_thinking_and_the_model_answers(llm):
    specs = [_spec(llm, 8), _spec(llm, 24)]
    closed_before = llm.core.stats().num_thinking_budget_closed
    outs = llm.generate([_prompt(llm, WEATHER)] * 2, SamplingParams(temperature=0, max_tokens=40), thinking=specs)
    for spec, out in zip(specs, outs):
        thinking, answer = _split(out, spec.end_token_ids)
        assert len(thinking) == spec.budget  # it would have thought on: the engine closed it at the budget
        assert out.reasoning_tokens == spec.budget + len(spec.end_token_ids)
        assert llm.tokenizer.decode(answer, skip_special_tokens=True).strip()  # then an answer
    assert llm.core.stats().num_thinking_budget_closed == closed_before + 2


def test_an_end_of_turn_inside_the_thinking_closes_it_and_the_model_answers(llm):
    spec = _spec(llm, None)
    params = SamplingParams(temperature=0, max_tokens=32)
    # Without the engine's block: it ends its turn inside the thinking. With it: the block closes there.
    plain, out = llm.generate([_prompt(llm, CAPITAL)] * 2, params, thinking=[None, spec])
    assert plain.finish_reason == "stop" and "</think>" not in plain.text
    assert plain.token_ids[-1] in llm.tokenizer.eos_token_ids
    thinking, answer = _split(out, spec.end_token_ids)
    assert thinking == plain.token_ids[:-1]  # the same thinking, up to where it ended its turn
    assert llm.tokenizer.decode(answer, skip_special_tokens=True).strip()  # the block closed, an answer came
    assert out.reasoning_tokens == len(thinking) + len(spec.end_token_ids)


def test_the_grammar_starts_after_the_thinking(llm):
    schema = json.dumps(SCHEMA)
    budgeted = SamplingParams(
        temperature=0, max_tokens=64, structured=StructuredOutput(json_schema=schema, max_tokens=64)
    )
    tight = SamplingParams(temperature=0, max_tokens=36, structured=StructuredOutput(json_schema=schema, max_tokens=36))
    specs = [_spec(llm, 16), _spec(llm, None)]  # the second: max_tokens alone bounds the thinking
    outs = llm.generate([_prompt(llm, "The weather in Paris, as JSON.")] * 2, [budgeted, tight], thinking=specs)
    for spec, out, params in zip(specs, outs, (budgeted, tight)):
        thinking, answer = _split(out, spec.end_token_ids)
        # The thinking was free, not the grammar's (it does not open the object)...
        assert not llm.tokenizer.decode(thinking).lstrip().startswith('{"city"')
        # ...and what follows the block is the grammar's, whole, within max_tokens.
        jsonschema.validate(json.loads(llm.tokenizer.decode(answer, skip_special_tokens=True)), SCHEMA)
        assert len(out.token_ids) <= params.max_tokens
    assert len(_split(outs[0], specs[0].end_token_ids)[0]) == 16
    assert outs[0].finish_reason == "stop"


def test_specs_the_engine_cannot_keep_are_refused(llm):
    prompt = _prompt(llm, WEATHER)
    good = _spec(llm, 8)
    with pytest.raises(InvalidRequestError, match="budget"):
        llm.generate([prompt], SamplingParams(max_tokens=8), thinking=ThinkingSpec([], good.end_token_ids, True, -1))
    with pytest.raises(InvalidRequestError, match="end sequence"):
        llm.generate([prompt], SamplingParams(max_tokens=8), thinking=ThinkingSpec(good.start_token_ids, []))
    with pytest.raises(InvalidRequestError) as refused:
        llm.generate([prompt], SamplingParams(max_tokens=3), thinking=good)
    assert refused.value.param == "max_tokens"
