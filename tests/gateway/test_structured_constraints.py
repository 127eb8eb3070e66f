"""What the gateway asks the engine to enforce for tool calls and response_format: the JSON it
builds compiles in xgrammar (as the engine compiles it), accepts exactly the replies it should,
and the parser reads every accepted reply back as the calls it holds. No model, no server."""

from __future__ import annotations

import json
import random

import jsonschema
import pytest

from agentgate.engine.errors import InvalidRequestError
from agentgate.engine.model_files.model_path import default_model_path
from agentgate.engine.sampling_params import StructuredOutput
from agentgate.gateway.api_types.openai import ChatCompletionRequest, decode_body
from agentgate.gateway.prompts import tool_plan
from agentgate.gateway.replies import ReplyReader
from agentgate.gateway.tools import (
    HermesToolParser,
    Llama3JsonToolParser,
    ParsedOutput,
    ToolChoice,
    accumulate,
    validate_tools,
)
from agentgate.gateway.tools.constraints import parse_response_format, structured_output
from agentgate.gateway.tools.plan import ToolPlan
from tests.support.tool_schemas import random_tool

xgr = pytest.importorskip("xgrammar")

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
PARIS = '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}'
CALL = f"<tool_call>\n{PARIS}\n</tool_call>"
TIME_CALL = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'


@pytest.fixture(scope="module")
def compiler():
    from agentgate.engine.structured.structured_output import GrammarCompiler

    try:
        path = default_model_path()
    except Exception as e:  # noqa: BLE001 - no default model here
        pytest.skip(str(e))
    from agentgate.engine.text.tokenizer import load_tokenizer

    return GrammarCompiler(path, load_tokenizer(path).vocab_size)


def accepts(compiler, spec: StructuredOutput, text: str) -> bool:
    """Whether the grammar accepts ``text`` as a whole reply (it may end right after it)."""
    matcher = xgr.GrammarMatcher(compiler.submit(spec).result())
    return matcher.accept_string(text) and matcher.is_completed()


def enforce(tools, choice, response_format=None, *, parser="hermes", parallel=True) -> StructuredOutput:
    spec = structured_output(validate_tools(tools), choice, response_format, parser=parser, parallel=parallel)
    assert spec is not None
    return spec


def test_required_one_call_and_nothing_else(compiler):
    spec = enforce([WEATHER, TIME], ToolChoice("required"), parallel=False)
    assert accepts(compiler, spec, CALL)
    assert accepts(compiler, spec, TIME_CALL)
    assert not accepts(compiler, spec, "")  # a call is required
    assert not accepts(compiler, spec, "Sure! " + CALL)  # no text around it
    assert not accepts(compiler, spec, CALL + "\n" + TIME_CALL)  # one call only
    assert not accepts(compiler, spec, CALL.replace('"celsius"', '"kelvin"'))  # enum
    assert not accepts(compiler, spec, CALL.replace('"name": "get_weather"', '"name": "get_wind"'))
    assert not accepts(
        compiler, spec, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    )


def test_required_parallel_calls(compiler):
    spec = enforce([WEATHER, TIME], ToolChoice("required"), parallel=True)
    both = CALL + "\n" + TIME_CALL
    assert accepts(compiler, spec, CALL) and accepts(compiler, spec, both)
    parsed = HermesToolParser.parse(both)
    assert [c.name for c in parsed.tool_calls] == ["get_weather", "get_time"] and parsed.content is None


def test_required_parallel_calls_are_bounded_by_max_calls(compiler):
    spec = structured_output(
        validate_tools([WEATHER, TIME]), ToolChoice("required"), None, parser="hermes", parallel=True, max_calls=3
    )
    three = "\n".join([CALL, TIME_CALL, CALL])
    assert accepts(compiler, spec, CALL) and accepts(compiler, spec, three)
    assert not accepts(compiler, spec, three + "\n" + TIME_CALL)  # a fourth call cannot start
    assert not accepts(compiler, spec, "")


def test_a_call_cut_by_max_tokens_is_dropped_streamed_or_not():
    """The reader sends a call whole (its header with its arguments): the call max_tokens cut
    is never returned, nor is its markup, whatever the chunking; finish_reason stays length."""
    plan = ToolPlan(HermesToolParser, 4)
    text = CALL + "\n" + '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par'
    parsed, finish = ReplyReader(plan).whole(text, "length")
    assert (
        finish == "length"
        and parsed.content is None
        and [c.arguments for c in parsed.tool_calls] == ['{"city": "Paris", "unit": "celsius"}']
    )
    for size in (1, 3, 7):
        reader = ReplyReader(plan)
        pieces = [reader.read(text[i : i + size], None) for i in range(0, len(text), size)]
        pieces.append(reader.read("", "length"))
        deltas = [d for piece in pieces for d in piece.deltas]
        assert all(t.id is None or t.function.arguments for d in deltas for t in d.tool_calls)  # header + arguments
        streamed = accumulate(deltas)
        assert streamed.content is None and [c.arguments for c in streamed.tool_calls] == [
            parsed.tool_calls[0].arguments
        ]
        assert pieces[-1].finish_reason == "length"
    assert ReplyReader(plan).whole('Sure. <tool_call>\n{"na', "length") == (ParsedOutput("Sure."), "length")
    assert ReplyReader(plan).whole("Sure. <tool_", "length") == (ParsedOutput("Sure."), "length")


@pytest.mark.parametrize("calls_before", [0, 1], ids=["one-call", "after-a-whole-call"])
def test_a_reply_cut_inside_a_closing_tag_leaks_no_markup(calls_before):
    """Issue 28: max_tokens cut the reply right after a whole call, inside its closing tag
    ("...}\n</tool_call"): the call is whole and returned, the piece of tag is markup and
    never content, at every cut point and whatever the chunking, streamed or not."""
    plan = ToolPlan(HermesToolParser, 4)
    whole = "\n".join([CALL] * calls_before + [CALL])
    expected = ['{"city": "Paris", "unit": "celsius"}'] * (calls_before + 1)
    for cut in range(len(whole) - len("\n</tool_call>"), len(whole) + 1):
        text = whole[:cut]
        parsed, finish = ReplyReader(plan).whole(text, "length")
        assert parsed.content is None and [c.arguments for c in parsed.tool_calls] == expected, (text, parsed)
        assert finish == "length"
        for size in (1, 2, 3, 5):
            reader = ReplyReader(plan)
            pieces = [reader.read(text[i : i + size], None) for i in range(0, len(text), size)]
            pieces.append(reader.read("", "length"))
            streamed = accumulate([d for piece in pieces for d in piece.deltas])
            assert streamed.content is None and [c.arguments for c in streamed.tool_calls] == expected, (text, size)
    # A reply that ended there otherwise (a stop string) keeps the piece of tag: the parser loses no text.
    assert HermesToolParser.parse(whole[:-3]).content == "</tool_ca"


def test_named_forces_that_function_once(compiler):
    spec = enforce([WEATHER, TIME], ToolChoice("named", "get_time"), parallel=True)
    assert accepts(compiler, spec, TIME_CALL)
    assert not accepts(compiler, spec, CALL)
    assert not accepts(compiler, spec, TIME_CALL + "\n" + TIME_CALL)


def test_whitespace_inside_arguments_is_bounded(compiler):
    spec = enforce([WEATHER], ToolChoice("required"), parallel=False)
    pretty = (
        '<tool_call>\n{"name": "get_weather", "arguments": {\n    "city": "Paris",\n'
        '    "unit": "celsius"\n}}\n</tool_call>'
    )
    assert accepts(compiler, spec, pretty)
    assert not accepts(compiler, spec, pretty.replace("{\n", "{\n" + " " * 40))


def test_llama3_json_format(compiler):
    spec = enforce([WEATHER, TIME], ToolChoice("required"), parser="llama3_json", parallel=True)
    one = '{"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}'
    two = one + '; {"name": "get_time", "parameters": {}}'
    assert accepts(compiler, spec, one) and accepts(compiler, spec, two)
    assert not accepts(compiler, spec, "<tool_call>\n" + one)
    parsed = Llama3JsonToolParser.parse(two)
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [
        ("get_weather", {"city": "Paris", "unit": "celsius"}),
        ("get_time", {}),
    ]


def test_auto_with_a_strict_tool_checks_the_calls_it_makes(compiler):
    strict = {**WEATHER, "function": {**WEATHER["function"], "strict": True}}
    spec = enforce([strict], ToolChoice("auto"), parallel=True)
    assert accepts(compiler, spec, "Hello! No call needed.")
    assert accepts(compiler, spec, "Let me look.\n" + CALL)
    assert not accepts(compiler, spec, "Let me look.\n" + CALL.replace('"celsius"', '"kelvin"'))
    assert (
        structured_output(validate_tools([WEATHER]), ToolChoice("auto"), None, parser="hermes", parallel=True) is None
    )


def test_auto_with_response_format_answers_or_calls(compiler):
    rf = parse_response_format(
        {
            "type": "json_schema",
            "json_schema": {
                "name": "a",
                "schema": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
            },
        }
    )
    spec = enforce([WEATHER], ToolChoice("auto"), rf)
    assert accepts(compiler, spec, '{"answer": "sunny"}')
    assert accepts(compiler, spec, CALL)
    assert not accepts(compiler, spec, "It is sunny.")


def test_response_format_alone():
    rf = parse_response_format({"type": "json_object"})
    assert structured_output(None, ToolChoice("none"), rf, parser="hermes", parallel=True) == StructuredOutput(
        json_object=True
    )
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    rf = parse_response_format({"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}})
    spec = structured_output(None, ToolChoice("none"), rf, parser="hermes", parallel=True)
    assert json.loads(spec.json_schema) == schema
    assert parse_response_format({"type": "text"}) is None and parse_response_format(None) is None


@pytest.mark.parametrize(
    ("response_format", "needle"),
    [
        ({"type": "xml"}, "response_format.type"),
        ({"type": "json_schema"}, "response_format.json_schema must be an object"),
        ({"type": "json_schema", "json_schema": {"name": "x"}}, "schema is missing"),
        (
            {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "strnig"}}},
            "not a valid JSON Schema",
        ),
        (
            {"type": "json_schema", "json_schema": {"name": "x", "schema": {}, "strict": "yes"}},
            "strict must be a boolean",
        ),
    ],
)
def test_bad_response_formats_name_the_problem(response_format, needle):
    with pytest.raises(InvalidRequestError, match=needle) as info:
        parse_response_format(response_format)
    assert info.value.param == "response_format"


@pytest.mark.parametrize("seed", range(50))
def test_random_schemas_compile_and_accept_a_valid_call(compiler, seed):
    """Each random tool's structural tag compiles, and a call with arguments drawn to fit the
    schema is accepted and parsed back to the same arguments."""
    tool = random_tool(seed)
    spec = enforce([tool], ToolChoice("required"), parallel=False)
    arguments = _instance(tool["function"]["parameters"], random.Random(seed))
    jsonschema.validate(arguments, tool["function"]["parameters"])
    text = f'<tool_call>\n{{"name": "{tool["function"]["name"]}", "arguments": {json.dumps(arguments)}}}\n</tool_call>'
    assert accepts(compiler, spec, text), text
    [call] = HermesToolParser.parse(text).tool_calls
    assert json.loads(call.arguments) == arguments


def _instance(schema, rng):
    """A value valid against the generator's schemas (all properties written, in order)."""
    if "enum" in schema:
        return rng.choice(schema["enum"])
    kind = schema["type"]
    if kind == "object":
        return {k: _instance(v, rng) for k, v in schema["properties"].items()}
    if kind == "array":
        return [_instance(schema["items"], rng) for _ in range(rng.randint(1, 3))]
    if kind == "string":
        return "abc"[: schema.get("maxLength", 3)]
    if kind == "integer":
        return rng.randint(schema.get("minimum", 0), schema.get("maximum", 9))
    if kind == "number":
        return 2.5
    return True


# --- the plan a request gets ----------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer():
    from agentgate.engine.text.tokenizer import load_tokenizer

    try:
        return load_tokenizer(default_model_path())
    except Exception as e:  # noqa: BLE001
        pytest.skip(str(e))


def _request(**fields) -> ChatCompletionRequest:
    body = {"messages": [{"role": "user", "content": "hi"}], **fields}
    return decode_body(json.dumps(body).encode(), ChatCompletionRequest)


def test_tool_plan(tokenizer):
    plain = tool_plan(tokenizer, _request())
    assert plain.parser is None and plain.structured is None
    auto = tool_plan(tokenizer, _request(tools=[WEATHER]))
    assert auto.parser is HermesToolParser and auto.structured is None and auto.max_calls is None
    none = tool_plan(tokenizer, _request(tools=[WEATHER], tool_choice="none"))  # plain content, no call may open
    assert none.parser is None and not none.forced and none.constraint_param == "tool_choice"
    assert json.loads(none.structured.structural_tag)["format"] == {"type": "any_text", "excludes": ["<tool_call>"]}
    assert tool_plan(tokenizer, _request(tool_choice="none")).structured is None  # no tools: nothing to exclude
    required = tool_plan(tokenizer, _request(tools=[WEATHER], tool_choice="required", parallel_tool_calls=False))
    assert required.structured.structural_tag is not None and required.max_calls == 1
    assert required.constraint_param == "tools"
    named = tool_plan(
        tokenizer, _request(tools=[WEATHER, TIME], tool_choice={"type": "function", "function": {"name": "get_time"}})
    )
    tag = json.loads(named.structured.structural_tag)["format"]
    assert tag["type"] == "tag" and '"get_time"' in tag["begin"]
    rf = tool_plan(tokenizer, _request(response_format={"type": "json_object"}))
    assert rf.structured == StructuredOutput(json_object=True) and rf.constraint_param == "response_format"
    assert tool_plan(tokenizer, _request(tools=[WEATHER]), "llama3_json").parser is Llama3JsonToolParser


def test_stop_strings_and_ids_reach_the_engine_except_under_a_forced_call(tokenizer):
    """Issue 50: they end text, never a call; a forced reply is nothing but its calls."""
    from agentgate.engine.sampling_params import SamplingParams
    from agentgate.gateway.tools.plan import stops_outside_calls

    params = SamplingParams(stop=['"'], stop_token_ids=[42])
    forced = tool_plan(tokenizer, _request(tools=[WEATHER], tool_choice="required"))
    unforced = [
        tool_plan(tokenizer, _request(tools=[WEATHER])),
        tool_plan(tokenizer, _request(response_format={"type": "json_object"})),  # forced, but no call to cut
    ]
    stripped = stops_outside_calls(params, forced)
    assert forced.forced and (stripped.stop, stripped.stop_token_ids) == ([], [])
    assert all(stops_outside_calls(params, plan) is params for plan in unforced)


def test_parallel_false_keeps_the_first_call_only():
    text = "Checking.\n" + CALL + "\n" + TIME_CALL + "\nDone."
    reader = ReplyReader(ToolPlan(HermesToolParser, max_calls=1))
    deltas = [d for ch in text for d in reader.feed(ch)] + reader.finish()
    parsed = accumulate(deltas)
    assert [c.name for c in parsed.tool_calls] == ["get_weather"] and reader.num_calls == 1
    assert parsed.content == "Checking.Done."
    assert accumulate(ReplyReader(ToolPlan(HermesToolParser)).feed(text)).tool_calls[1].name == "get_time"


def test_tool_call_parser_setting(monkeypatch):
    from agentgate.gateway.command.cli import build_parser, settings_from_args
    from agentgate.gateway.config.settings import Settings

    monkeypatch.delenv("AGENTGATE_TOOL_CALL_PARSER", raising=False)
    args = build_parser().parse_args(["serve", "--tool-call-parser", "llama3_json"])
    assert settings_from_args(args).tool_call_parser == "llama3_json"
    monkeypatch.setenv("AGENTGATE_TOOL_CALL_PARSER", "hermes")
    assert settings_from_args(build_parser().parse_args(["serve"])).tool_call_parser == "hermes"
    assert Settings().tool_call_parser is None
    with pytest.raises(ValueError, match="tool_call_parser must be one of"):
        Settings(tool_call_parser="mistral")


# --- replies that fit their budget (issue 28) ------------------------------------------


def _allowed(bitmask, row: int, vocab_size: int) -> list[int]:
    import torch

    words = bitmask[row].to(torch.int64) & 0xFFFFFFFF
    bits = (words[:, None] >> torch.arange(32)) & 1
    return [t for t in bits.flatten().nonzero().flatten().tolist() if t < vocab_size]


def _budgeted(compiler, tool, budget: int, *, parallel: bool = False):
    import msgspec

    spec = enforce([tool], ToolChoice("required"), parallel=parallel)
    return compiler.submit(msgspec.structs.replace(spec, max_tokens=budget))


def _decode(compiler, grammar, rng: random.Random, prefer: str = "") -> tuple[list[int], bool]:
    """A reply written by a 'model' that takes any token the bitmask allows, at random (strings
    that never end, containers opened wherever they may be), a token starting with ``prefer``
    whenever one is allowed: (tokens, ended on an end token)."""
    from agentgate.engine.structured.structured_output import new_bitmask

    tokens: list[int] = []
    stop = set(grammar.matcher.stop_token_ids)
    while len(tokens) < grammar.budget:
        bitmask = new_bitmask(1, compiler.vocab_size, pinned=False)
        grammar.fill(bitmask, 0)
        allowed = _allowed(bitmask, 0, compiler.vocab_size)
        assert allowed, "an empty bitmask row"
        preferred = [t for t in allowed if prefer and grammar.closer.texts[t].startswith(prefer)]
        token = rng.choice(preferred or allowed)
        assert grammar.accept(token)
        tokens.append(token)
        if token in stop:
            return tokens, True
    return tokens, False


@pytest.mark.parametrize("seed", range(50))
def test_a_budgeted_reply_always_ends_whole_within_its_budget(compiler, seed):
    """Under the tightest budget the grammar admits, and a little above it, a writer that
    takes any allowed token at random still ends with a whole call that validates, on an
    end token, within max_tokens; a budget below the shortest call is refused."""
    from agentgate.engine.sampling_params import parse_budget_error
    from agentgate.engine.structured.structured_output import RequestGrammar
    from agentgate.engine.text.tokenizer import load_tokenizer

    tool = random_tool(seed)
    tokenizer = load_tokenizer(default_model_path())
    minimum = _budgeted(compiler, tool, 400).result().minimum
    assert 20 < minimum < 64
    with pytest.raises(InvalidRequestError) as info:
        _budgeted(compiler, tool, minimum - 1).result()
    assert parse_budget_error(str(info.value)) == (minimum - 1, minimum)
    rng = random.Random(seed)
    for budget in (minimum, minimum + 7, 64):
        grammar = RequestGrammar(_budgeted(compiler, tool, budget).result())
        tokens, ended = _decode(compiler, grammar, rng)
        assert ended and len(tokens) <= budget, (budget, tokenizer.decode(tokens))
        _check_calls(tokenizer.decode(tokens[:-1]), tool, 1)


def _check_calls(text: str, tool: dict, most: int) -> None:
    parsed = HermesToolParser.parse(text)
    assert parsed.content is None and 1 <= len(parsed.tool_calls) <= most, text
    for call in parsed.tool_calls:
        assert call.name == tool["function"]["name"]
        jsonschema.validate(json.loads(call.arguments), tool["function"]["parameters"])


@pytest.mark.parametrize("seed", range(50))
def test_parallel_calls_never_start_one_they_cannot_close(compiler, seed):
    """With parallel calls, after a whole call the grammar offers the end or another call; the
    random writer takes another whenever it may, and the reply still ends whole, on an end token."""
    import msgspec

    from agentgate.engine.structured.structured_output import RequestGrammar
    from agentgate.engine.text.tokenizer import load_tokenizer

    tool = random_tool(seed)
    tokenizer = load_tokenizer(default_model_path())
    spec = structured_output(
        validate_tools([tool]), ToolChoice("required"), None, parser="hermes", parallel=True, max_calls=4
    )
    for budget in (64, 100):
        grammar = RequestGrammar(compiler.submit(msgspec.structs.replace(spec, max_tokens=budget)).result())
        tokens, ended = _decode(compiler, grammar, random.Random(seed), prefer="\n")
        assert ended and len(tokens) <= budget, (budget, tokenizer.decode(tokens))
        _check_calls(tokenizer.decode(tokens[:-1]), tool, 4)


def test_a_forced_reply_holds_each_call_once():
    """Issue 28: a small model repeats its forced call until the grammar's bound; the reader keeps
    one of each (name, arguments), renumbered, streamed or not; an auto reply keeps them all."""
    text = "\n".join([CALL, CALL, TIME_CALL, CALL])
    forced = ToolPlan(HermesToolParser, 4, forced=True)
    parsed, finish = ReplyReader(forced).whole(text, "stop")
    assert [c.name for c in parsed.tool_calls] == ["get_weather", "get_time"] and finish == "tool_calls"
    for size in (1, 4, 9):
        reader = ReplyReader(forced)
        pieces = [reader.read(text[i : i + size], None) for i in range(0, len(text), size)] + [reader.read("", "stop")]
        deltas = [d for piece in pieces for d in piece.deltas]
        assert [t.index for d in deltas for t in d.tool_calls] == [0, 1]
        streamed = accumulate(deltas)
        pairs = [(c.name, c.arguments) for c in streamed.tool_calls]
        assert pairs == [(c.name, c.arguments) for c in parsed.tool_calls]
        assert streamed.content is None and reader.num_calls == 2
    assert len(ReplyReader(ToolPlan(HermesToolParser, 4)).whole(text, "stop")[0].tool_calls) == 4


@pytest.mark.parametrize("seed", range(10))
def test_a_budgeted_response_format_ends_as_valid_json(compiler, seed):
    """response_format json_schema under a budget: the random writer's reply is JSON that validates,
    ended on an end token within max_tokens."""
    import msgspec

    from agentgate.engine.structured.structured_output import RequestGrammar
    from agentgate.engine.text.tokenizer import load_tokenizer

    schema = random_tool(seed)["function"]["parameters"]
    rf = parse_response_format({"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    spec = structured_output(None, ToolChoice("none"), rf, parser="hermes", parallel=True)
    tokenizer = load_tokenizer(default_model_path())
    for budget in (24, 48):
        grammar = RequestGrammar(compiler.submit(msgspec.structs.replace(spec, max_tokens=budget)).result())
        tokens, ended = _decode(compiler, grammar, random.Random(seed))
        assert ended and len(tokens) <= budget, (budget, tokenizer.decode(tokens))
        jsonschema.validate(json.loads(tokenizer.decode(tokens[:-1]), strict=False), schema)  # as the parsers read


def test_the_closing_is_offered_as_drafts_and_each_draft_row_allows_its_next_token(compiler):
    """Speculation: once a budgeted reply writes its closing, jump-forward drafts it whole, and the
    bitmask rows of those drafts allow exactly the closing's next tokens (so several arrive a step)."""
    from agentgate.engine.structured.structured_output import RequestGrammar, new_bitmask

    budgeted = _budgeted(compiler, WEATHER, _budgeted(compiler, WEATHER, 400).result().minimum).result()
    grammar = RequestGrammar(budgeted)
    bitmask = new_bitmask(1, compiler.vocab_size, pinned=False)
    grammar.fill(bitmask, 0)  # the budget is the minimum: the closing starts at once
    [first] = _allowed(bitmask, 0, compiler.vocab_size)
    assert grammar.accept(first)
    drafts = grammar.forced_tokens(8)
    assert len(drafts) == 8
    bitmask = new_bitmask(9, compiler.vocab_size, pinned=False)
    grammar.fill(bitmask, 0, tuple(drafts))
    assert [_allowed(bitmask, row, compiler.vocab_size) for row in range(8)] == [[t] for t in drafts]
