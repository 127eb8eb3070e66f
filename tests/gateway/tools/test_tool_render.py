"""Prompts with tools: native rendering where the template has it (equal to transformers), the
Hermes-style rewrite where it does not (the default model), and tool-definition validation."""

from __future__ import annotations

import copy
import json

import msgspec
import pytest

from agentgate.engine.errors import InvalidRequestError
from agentgate.engine.text.chat_template import template_supports_tools
from agentgate.engine.text.tokenizer import Tokenizer
from agentgate.gateway.tools.hermes import HermesToolParser
from agentgate.gateway.tools.render import render_chat_prompt
from agentgate.gateway.tools.schema import ToolChoice, resolve_tool_choice, validate_tools
from tests.support.templates import QWEN25

# Qwen3's way of writing arguments: verbatim when they are a string.
QWEN3_ARGUMENTS = """{%- for message in messages %}{%- if message.tool_calls %}{%- for tool_call in message.tool_calls %}
{%- set tool_call = tool_call.function %}<tool_call>{{ tool_call.name }} {% if tool_call.arguments is string %}{{ tool_call.arguments }}{% else %}{{ tool_call.arguments | tojson }}{% endif %}</tool_call>
{%- endfor %}{%- elif message.role == 'tool' %}<tool_response>{{ message.content }}</tool_response>{%- else %}{{ message.content }}{%- endif %}{%- endfor %}{{ tools | length if tools else '' }}"""

# Llama 3.1-flavoured (tools as JSON in the system turn, one call as {"name", "parameters"}, ipython results).
LLAMA31 = """{{- bos_token }}{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content']|trim %}{%- set messages = messages[1:] %}{%- else %}{%- set system_message = "" %}{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}{%- if tools is not none %}{{- "Environment: ipython\\n" }}{%- for t in tools %}{{- t | tojson(indent=4) }}{{- "\\n\\n" }}{%- endfor %}{%- endif %}{{- system_message }}{{- "<|eot_id|>" }}
{%- for message in messages %}{%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
{%- elif 'tool_calls' in message %}{%- set tool_call = message.tool_calls[0].function %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{{- '{"name": "' + tool_call.name + '", "parameters": ' }}{{- tool_call.arguments | tojson }}{{- "}<|eot_id|>" }}
{%- elif message.role == "tool" or message.role == "ipython" %}{{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}{{- { "output": message.content } | tojson }}{{- "<|eot_id|>" }}{%- endif %}{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"""

SMOLLM_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"],
        },
    },
}
TIME_TOOL = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
TOOLS = [WEATHER_TOOL, TIME_TOOL]

# An OpenAI-shaped agent loop: arguments are JSON strings, content is null beside tool_calls.
LOOP = [
    {"role": "user", "content": "Weather in Paris and Zürich?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Zürich"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
    {"role": "tool", "tool_call_id": "call_2", "content": '{"temp": 18}'},
]


def tokenizer_with(smollm: Tokenizer, template: str) -> Tokenizer:
    return Tokenizer(
        smollm.backend,
        vocab_type=smollm.vocab_type,
        special_tokens=smollm.special_tokens_map,
        chat_templates={"default": template},
    )


def with_dict_arguments(messages: list[dict]) -> list[dict]:
    """The messages as transformers documents them: arguments as mappings."""
    out = copy.deepcopy(messages)
    for m in out:
        for call in m.get("tool_calls") or ():
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    return out


# --- the default model: no tool support in its template ---------------------------


def test_default_template_has_no_tool_support(smollm_tokenizer):
    assert not template_supports_tools(smollm_tokenizer.chat_template)
    with pytest.raises(InvalidRequestError):  # the reason for the rewrite: null content breaks it
        smollm_tokenizer.apply_chat_template(LOOP)


def test_fallback_renders_tools_calls_and_results(smollm_tokenizer):
    prompt = render_chat_prompt(smollm_tokenizer, LOOP, tools=TOOLS)
    tools_json = "\n".join(json.dumps(t, ensure_ascii=False) for t in TOOLS)
    assert prompt == (
        "<|im_start|>system\n"
        f"{SMOLLM_SYSTEM}\n\n"
        "# Tools\n\n"
        "You may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        f"<tools>\n{tools_json}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n"
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\nWeather in Paris and Zürich?<|im_end|>\n"
        "<|im_start|>assistant\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n"
        '<tool_response>\n{"temp": 21}\n</tool_response>\n'
        '<tool_response>\n{"temp": 18}\n</tool_response><|im_end|>\n'
        "<|im_start|>assistant\n"
    )


def test_fallback_round_trips_through_the_parser(smollm_tokenizer):
    """What the fallback writes for a past call is what the hermes parser reads back as that call."""
    prompt = render_chat_prompt(smollm_tokenizer, LOOP[:2], tools=TOOLS, add_generation_prompt=False)
    turn = prompt.split("<|im_start|>assistant\n")[-1].removesuffix("<|im_end|>\n")
    parsed = HermesToolParser.parse(turn)
    assert parsed.content is None
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [
        ("get_weather", '{"city": "Paris"}'),
        ("get_weather", '{"city": "Zürich"}'),
    ]


def test_fallback_keeps_the_conversation_system_prompt_and_assistant_text(smollm_tokenizer):
    messages = [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "Time?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "get_time", "arguments": ""}}],
        },
        {"role": "tool", "tool_call_id": "c", "content": "12:00"},
        {"role": "assistant", "content": "Noon."},
        {"role": "user", "content": [{"type": "text", "text": "And"}, {"type": "text", "text": "now?"}]},
    ]
    prompt = render_chat_prompt(smollm_tokenizer, messages, tools=TOOLS)
    assert prompt.startswith("<|im_start|>system\nBe terse.\n\n# Tools\n")
    assert SMOLLM_SYSTEM not in prompt
    assert (
        '<|im_start|>assistant\nChecking.\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n12:00\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\nNoon.<|im_end|>\n<|im_start|>user\nAnd\nnow?<|im_end|>\n<|im_start|>assistant\n"
    ) in prompt


def test_fallback_prompt_does_not_change_with_tool_choice(smollm_tokenizer):
    """Issue 35: every tool_choice renders the very prompt auto does (all tools presented, no
    instruction): the grammar enforces the choice, and a program keeps its prefix cached."""
    named = {"type": "function", "function": {"name": "get_time"}}
    auto = render_chat_prompt(smollm_tokenizer, LOOP, tools=TOOLS)
    assert auto.startswith(f"<|im_start|>system\n{SMOLLM_SYSTEM}\n\n# Tools\n")
    assert '"name": "get_time"' in auto and '"name": "get_weather"' in auto
    assert "<tool_response>\n" in auto and '"arguments": {"city": "Paris"}' in auto  # history still renders
    for choice in ("none", "required", "auto", named):
        assert render_chat_prompt(smollm_tokenizer, LOOP, tools=TOOLS, tool_choice=choice) == auto, choice
    assert "You must" not in auto
    with pytest.raises(InvalidRequestError, match="tool_choice"):  # still checked against the tools
        render_chat_prompt(
            smollm_tokenizer, LOOP, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}
        )


def test_fallback_without_tools_is_the_template(smollm_tokenizer):
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
    assert render_chat_prompt(smollm_tokenizer, messages) == smollm_tokenizer.apply_chat_template(messages)
    # null content does not crash
    assert render_chat_prompt(smollm_tokenizer, [{"role": "user", "content": None}]).endswith(
        "<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n"
    )


def test_msgspec_structs_are_accepted(smollm_tokenizer):
    class Message(msgspec.Struct, omit_defaults=True):
        role: str
        content: str | None = None
        tool_calls: list[dict] | None = None
        tool_call_id: str | None = None

    structs = [Message(**m) for m in LOOP]
    assert render_chat_prompt(smollm_tokenizer, structs, tools=TOOLS) == render_chat_prompt(
        smollm_tokenizer, LOOP, tools=TOOLS
    )


# --- a tool-aware template renders natively, as transformers does -----------------


@pytest.fixture(scope="module")
def hf_tokenizer(smollm_tokenizer):
    transformers = pytest.importorskip("transformers")
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=smollm_tokenizer.backend, bos_token="<|im_start|>", eos_token="<|im_end|>"
    )


@pytest.mark.parametrize("template", [QWEN25, LLAMA31], ids=["qwen2.5", "llama3.1"])
@pytest.mark.parametrize(
    ("messages", "tools"),
    [(LOOP, TOOLS), (LOOP[:2], TOOLS), (LOOP[:1], TOOLS), (LOOP[:1], None)],
    ids=["loop", "call", "first-turn", "no-tools"],
)
def test_native_rendering_equals_transformers(smollm_tokenizer, hf_tokenizer, template, messages, tools):
    if template is LLAMA31:  # one call per turn in Llama 3.1
        messages = copy.deepcopy(messages)
        for m in messages:
            if m.get("tool_calls"):
                del m["tool_calls"][1:]
        messages = [m for m in messages if m.get("tool_call_id") != "call_2"]
    ours = tokenizer_with(smollm_tokenizer, template)
    assert template_supports_tools(template)
    expected = hf_tokenizer.apply_chat_template(
        with_dict_arguments(messages), tools=tools, chat_template=template, tokenize=False, add_generation_prompt=True
    )
    assert render_chat_prompt(ours, messages, tools=tools) == expected


def test_native_prompt_does_not_change_with_tool_choice(smollm_tokenizer):
    ours = tokenizer_with(smollm_tokenizer, QWEN25)
    named = {"type": "function", "function": {"name": "get_time"}}
    auto = render_chat_prompt(ours, LOOP[:1], tools=TOOLS)
    assert '"name": "get_time"' in auto and '"name": "get_weather"' in auto and "# Tools" in auto
    for choice in ("none", "required", named):
        assert render_chat_prompt(ours, LOOP[:1], tools=TOOLS, tool_choice=choice) == auto, choice


def test_string_arguments_stay_strings_where_the_template_renders_them(smollm_tokenizer):
    ours = tokenizer_with(smollm_tokenizer, QWEN3_ARGUMENTS)
    messages = copy.deepcopy(LOOP[:2])
    messages[1]["tool_calls"][0]["function"]["arguments"] = '{"city":"Paris"}'  # compact, as the client sent it
    prompt = render_chat_prompt(ours, messages, tools=TOOLS)
    assert '<tool_call>get_weather {"city":"Paris"}</tool_call>' in prompt
    # elsewhere, arguments are decoded (tojson re-encodes them); text that is not JSON is kept as it is
    qwen = tokenizer_with(smollm_tokenizer, QWEN25)
    messages[1]["tool_calls"][1]["function"]["arguments"] = '{"city": "Zür'
    prompt = render_chat_prompt(qwen, messages, tools=TOOLS)
    assert '"arguments": {"city": "Paris"}' in prompt and '"arguments": "{\\"city\\": \\"Zür"' in prompt


def test_template_supports_tools():
    assert template_supports_tools(QWEN25) and template_supports_tools(LLAMA31)
    assert not template_supports_tools("{% for m in messages %}<tools>{{ m.content }}</tools>{% endfor %}")
    commented = "{# tools tool_calls 'tool' #}{% for m in messages %}{{ m.content }}{% endfor %}"
    assert not template_supports_tools(commented)
    assert not template_supports_tools("{% if tools %}{{ tools }}{% endif %}")  # no calls, no results
    assert not template_supports_tools("{% for %}")  # does not parse
    assert template_supports_tools("{% generation %}{{ tools }}{{ m['tool_calls'] }}{{ 'tool' }}{% endgeneration %}")


# --- validation ---------------------------------------------------------------------


def function(**fields) -> dict:
    return {"type": "function", "function": {"name": "f", **fields}}


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        ("get_weather", "tools must be an array"),
        (["x"], r"tools\[0\] must be an object"),
        ([{"type": "retrieval"}], r'tools\[0\].type must be "function", got \'retrieval\''),
        ([{"type": "function"}], r"tools\[0\].function must be an object"),
        ([function(name="get weather")], r"tools\[0\].function.name 'get weather' is invalid: it must match"),
        ([function(name="x" * 65)], "is invalid"),
        ([function(name=None)], r"tools\[0\].function.name None is invalid"),
        ([WEATHER_TOOL, WEATHER_TOOL], r"tools\[1\].function.name 'get_weather' is defined twice"),
        ([function(description=5)], "description must be a string"),
        ([function(strict="yes")], "strict must be a boolean"),
        ([function(parameters="object")], r"tools\[0\].function.parameters must be a JSON Schema object, got str"),
        (
            [function(parameters={"type": "object", "properties": {"a": {"type": "strin"}}})],
            r"tools\[0\].function.parameters is not a valid JSON Schema: .*\(at /properties/a/type\)",
        ),
        ([function(parameters={"type": "object", "required": "a"})], r"is not a valid JSON Schema: .*\(at /required\)"),
        (
            [function(parameters={"type": "object", "properties": {"n": {"minimum": "0"}}})],
            r"is not a valid JSON Schema: .*/properties/n/minimum",
        ),
        ([function(parameters={"type": "string"})], r'must describe an object \(type "object"\), got type \'string\''),
    ],
)
def test_invalid_tools_are_400s_naming_the_problem(smollm_tokenizer, tools, message):
    with pytest.raises(InvalidRequestError, match=message) as info:
        render_chat_prompt(smollm_tokenizer, LOOP[:1], tools=tools)
    assert info.value.param == "tools"


def test_valid_tools():
    assert validate_tools(None) is None and validate_tools([]) is None
    minimal = {"type": "function", "function": {"name": "ping", "description": None}}
    assert validate_tools([minimal]) == [{"type": "function", "function": {"name": "ping"}}]
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"a": {"type": ["string", "null"]}},
        "additionalProperties": False,
    }
    draft7 = function(parameters=schema)
    assert validate_tools([draft7, WEATHER_TOOL])[0] == draft7


@pytest.mark.parametrize(
    ("choice", "tools", "expected"),
    [
        (None, TOOLS, ToolChoice("auto")),
        (None, None, ToolChoice("none")),
        ("auto", None, ToolChoice("none")),
        ("none", TOOLS, ToolChoice("none")),
        ("required", TOOLS, ToolChoice("required")),
        ({"type": "function", "function": {"name": "get_time"}}, TOOLS, ToolChoice("named", "get_time")),
    ],
)
def test_tool_choice(choice, tools, expected):
    assert resolve_tool_choice(choice, validate_tools(tools)) == expected


@pytest.mark.parametrize(
    ("choice", "tools", "message"),
    [
        ("required", None, 'tool_choice "required" needs tools'),
        ({"type": "function", "function": {"name": "nope"}}, TOOLS, "'nope', which is not among the tools"),
        ({"type": "function", "function": {}}, TOOLS, "tool_choice.function.name must be a string"),
        ("sometimes", TOOLS, "tool_choice must be"),
    ],
)
def test_invalid_tool_choice(smollm_tokenizer, choice, tools, message):
    with pytest.raises(InvalidRequestError, match=message) as info:
        render_chat_prompt(smollm_tokenizer, LOOP[:1], tools=tools, tool_choice=choice)
    assert info.value.param == "tool_choice"


def test_bad_tool_call_in_history(smollm_tokenizer):
    messages = [{"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {}}]}]
    with pytest.raises(InvalidRequestError, match=r"messages\[0\].tool_calls\[0\].function.name") as info:
        render_chat_prompt(smollm_tokenizer, messages, tools=TOOLS)
    assert info.value.param == "messages"
