"""Tool-call parsers: the chunking property and explicit results, per format (the corpus is
``tests/support/tool_calls.py``; what the OpenAI SDK makes of their deltas: test_tool_deltas.py)."""

from __future__ import annotations

import codecs
import itertools
import json
import random

import pytest

from agentgate.gateway.tools.deltas import Delta, finish_reason, new_tool_call_id
from agentgate.gateway.tools.hermes import HermesToolParser
from agentgate.gateway.tools.llama3_json import Llama3JsonToolParser
from agentgate.gateway.tools.parser_registry import select_tool_parser
from tests.support.tool_calls import (
    CASES,
    HERMES_CORPUS,
    LLAMA_CORPUS,
    NASTY_ARGS,
    PARIS,
    WEATHER,
    ids,
    parse,
    run,
    split_at,
)


@pytest.mark.parametrize(("cls", "name", "text"), CASES, ids=[f"{c.name}:{n}" for c, n, _ in CASES])
def test_chunking_property(cls, name, text, smollm_tokenizer):
    """Split at every position, per character, per token, in random multi-splits: always the parse."""
    expected = parse(cls, text)
    assert run(cls, [text])[0] == expected
    assert run(cls, list(text))[0] == expected
    for cut in range(len(text) + 1):
        assert run(cls, split_at(text, [cut]))[0] == expected, f"split at {cut}: {text[:cut]!r} | {text[cut:]!r}"
    rng = random.Random(name)
    for _ in range(40):
        cuts = rng.sample(range(len(text) + 1), k=min(len(text) + 1, rng.randint(2, 12)))
        pieces = split_at(text, cuts)
        assert run(cls, pieces)[0] == expected, pieces
    # as a detokenizer delivers it: one token's text at a time
    decoder = codecs.getincrementaldecoder("utf-8")()
    ids_ = smollm_tokenizer.encode(text, add_special_tokens=False)
    pieces = [decoder.decode(smollm_tokenizer.token_bytes[i]) for i in ids_]
    assert "".join(pieces) == text
    assert run(cls, pieces)[0] == expected


def test_tag_split_every_way():
    """<tool_call> and </tool_call> cut into three pieces at every pair of positions."""
    text = f"Checking.\n<tool_call>\n{WEATHER}\n</tool_call>"
    expected = parse(HermesToolParser, text)
    assert [c.name for c in expected.tool_calls] == ["get_weather"]
    for tag in ("<tool_call>", "</tool_call>"):
        start = text.index(tag)
        span = range(start, start + len(tag) + 1)
        for a, b in itertools.combinations(span, 2):
            assert run(HermesToolParser, split_at(text, [a, b]))[0] == expected


FRAGMENTS = [
    *HERMES_CORPUS.values(),
    *LLAMA_CORPUS.values(),
    "<",
    "<tool_call>",
    "</tool_call>",
    "{",
    "}",
    '"',
    "\\",
    " ",
    "\n",
    '{"name": "x"',
    ', "arguments": ',
    "[",
    "]",
    ";",
    "<|python_tag|>",
    "1",
    "tru",
    ":",
    ",",
]


@pytest.mark.parametrize("cls", [HermesToolParser, Llama3JsonToolParser], ids=lambda c: c.name)
def test_chunking_property_fuzzed(cls):
    """Random splices of corpus pieces and markup fragments, randomly chunked: same result, and a
    reply without calls keeps its text exactly."""
    rng = random.Random(cls.name)
    for _ in range(400):
        parts = rng.choices(FRAGMENTS, k=rng.randint(1, 5))
        text = "".join(p[rng.randint(0, len(p) // 2) :] if rng.random() < 0.3 else p for p in parts)
        expected = parse(cls, text)
        if not expected.tool_calls:
            assert expected.content == text
        assert run(cls, list(text))[0] == expected, text
        for _ in range(3):
            cuts = rng.sample(range(len(text) + 1), k=min(len(text) + 1, rng.randint(1, 15)))
            assert run(cls, split_at(text, cuts))[0] == expected, (text, cuts)


@pytest.mark.parametrize(
    ("text", "content", "calls"),
    [
        ("Hello", "Hello", []),
        ("", "", []),
        (f"Let me check.\n<tool_call>\n{WEATHER}\n</tool_call>", "Let me check.", [PARIS]),
        (HERMES_CORPUS["parallel calls"], None, [PARIS, ("get_time", "{}")]),
        (HERMES_CORPUS["arguments as a JSON string"], None, [("f", '{"a": [1, {"b": "}"}]}')]),
        (HERMES_CORPUS["arguments-first order"], None, [("search", '{"q": "x"}')]),
        (HERMES_CORPUS["parameters key"], None, [("f", '{"a": 1}')]),
        (HERMES_CORPUS["no arguments"], None, [("ping", "{}")]),
        (HERMES_CORPUS["null arguments"], None, [("ping", "{}")]),
        (HERMES_CORPUS["escaped name"], None, [("get_weather", "{}")]),
        (HERMES_CORPUS["raw newline in a string"], None, [("echo", '{"text": "line1\\nline2"}')]),
        (HERMES_CORPUS["unclosed tag at the end"], None, [PARIS]),
        (HERMES_CORPUS["text after the call"], "Done, anything else?", [PARIS]),
        (HERMES_CORPUS["content between calls"], "First:then:", [PARIS, PARIS]),
        # not calls: the text stays, verbatim
        (HERMES_CORPUS["tag in prose"], HERMES_CORPUS["tag in prose"], []),
        (HERMES_CORPUS["tag then prose json"], HERMES_CORPUS["tag then prose json"], []),
        (HERMES_CORPUS["json that is not a call"], HERMES_CORPUS["json that is not a call"], []),
        (HERMES_CORPUS["empty name"], HERMES_CORPUS["empty name"], []),
        (HERMES_CORPUS["non-string name"], HERMES_CORPUS["non-string name"], []),
        (HERMES_CORPUS["truncated before the name"], HERMES_CORPUS["truncated before the name"], []),
        (HERMES_CORPUS["NaN is not JSON"], HERMES_CORPUS["NaN is not JSON"], []),
        (HERMES_CORPUS["stray closing tag"], HERMES_CORPUS["stray closing tag"], []),
        (HERMES_CORPUS["partial tag at the end"], "Sure <tool_", []),
        ("  spaced  ", "  spaced  ", []),
        # named, then broken: the call stands with the raw arguments text
        (HERMES_CORPUS["truncated after the name"], None, [("get_weather", '{"city": "Par')]),
        (HERMES_CORPUS["missing closing brace"], "after", [("f", '{"a": 1}')]),
        (HERMES_CORPUS["broken after the name"], "rest", [("f", '{"a": tru}}')]),
        (HERMES_CORPUS["broken, then another call"], None, [("f", '{"a": 01}}'), ("g", "{}")]),
        (HERMES_CORPUS["nested tag in broken json"], '<tool_call>{"name"', [("g", "{}")]),
        (HERMES_CORPUS["double closing tag"], "</tool_call>", [PARIS]),
        (HERMES_CORPUS["partial closing tag at the end"], "</tool_", [PARIS]),
    ],
)
def test_hermes_results(text, content, calls):
    out = parse(HermesToolParser, text)
    assert out.content == content
    assert [(c.name, c.arguments) for c in out.tool_calls] == calls
    assert [c.id for c in out.tool_calls] == [f"call_{i}" for i in range(len(calls))]


def test_nasty_arguments_round_trip():
    out = parse(HermesToolParser, HERMES_CORPUS["nasty arguments"])
    (call,) = out.tool_calls
    assert out.content is None and call.name == "write_file"
    assert call.arguments == json.dumps(json.loads(NASTY_ARGS), ensure_ascii=False)
    assert json.loads(call.arguments)["code"] == 'fn() { return "}"; }\n<tool_call>{"x"}</tool_call>'


@pytest.mark.parametrize(
    ("text", "content", "calls"),
    [
        (LLAMA_CORPUS["content only"], LLAMA_CORPUS["content only"], []),
        (LLAMA_CORPUS["one call"], None, [("get_weather", '{"city": "Paris"}')]),
        (LLAMA_CORPUS["python tag"], None, [("get_weather", '{"city": "Paris"}')]),
        (LLAMA_CORPUS["leading ws"], None, [("f", "{}")]),
        (LLAMA_CORPUS["parallel"], None, [("a", '{"x": 1}'), ("b", '{"y": "}{;"}')]),
        (LLAMA_CORPUS["parallel, no space"], None, [("a", "{}"), ("b", '{"z": []}')]),
        (LLAMA_CORPUS["dangling separator"], None, [("a", "{}")]),
        (LLAMA_CORPUS["text after"], "I called it.", [("a", "{}")]),
        (LLAMA_CORPUS["separator then text"], "; and more", [("a", "{}")]),
        (LLAMA_CORPUS["json answer"], LLAMA_CORPUS["json answer"], []),
        (LLAMA_CORPUS["content mentioning json"], LLAMA_CORPUS["content mentioning json"], []),
        (LLAMA_CORPUS["partial tag"], "<|python_ta", []),
        (LLAMA_CORPUS["tag then text"], "<|python_tag|>print('hi')", []),
        (LLAMA_CORPUS["truncated"], None, [("get_weather", '{"city": "Pa')]),
        (LLAMA_CORPUS["broken before the name"], LLAMA_CORPUS["broken before the name"], []),
        ("  ", "  ", []),
    ],
)
def test_llama3_results(text, content, calls):
    out = parse(Llama3JsonToolParser, text)
    assert out.content == content
    assert [(c.name, c.arguments) for c in out.tool_calls] == calls


def test_streaming_order_and_early_name():
    """Content streams before the call is complete; the name goes out before the arguments are done."""
    parser = HermesToolParser(id_factory=ids().__next__)
    assert parser.feed("Let me check") == [Delta(content="Let me check")]
    assert parser.feed(" the weather.\n<tool") == [Delta(content=" the weather.")]  # "\n<tool" held
    assert parser.feed('_call>\n{"name": "get_wea') == []
    (header,) = parser.feed('ther", "arguments": {"city": ')
    first = {"index": 0, "id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
    assert header.to_dict() == {"tool_calls": [first]}
    assert parser.feed('"Paris"}') == []
    (arguments,) = parser.feed("}\n</tool_call>")
    assert arguments.to_dict() == {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": "Paris"}'}}]}
    assert parser.finish() == []
    assert parser.num_tool_calls == 1
    with pytest.raises(RuntimeError):
        parser.feed("more")


def test_content_is_not_held_without_a_tag():
    parser = HermesToolParser()
    assert parser.feed("a < b") == [Delta(content="a < b")]
    assert parser.feed(" and <") == [Delta(content=" and")]  # " <" may start a tag
    assert parser.feed("p>") == [Delta(content=" <p>")]
    assert parser.finish() == []


def test_default_ids():
    out = HermesToolParser.parse(HERMES_CORPUS["parallel calls"])
    a, b = (c.id for c in out.tool_calls)
    assert a != b and a.startswith("call_") and len(a) == 29
    assert new_tool_call_id() != new_tool_call_id()


def test_finish_reason():
    assert finish_reason("stop", tool_calls=True) == "tool_calls"
    assert finish_reason("stop", tool_calls=False) == "stop"
    assert finish_reason("length", tool_calls=True) == "length"


QWEN_LIKE = (
    "{% for m in messages %}{{ tools }}{{ m.tool_calls }}"
    "{% if m.role == 'tool' %}<tool_response>{% endif %}<tool_call>{% endfor %}"
)
LLAMA_LIKE = (
    "{{ bos_token }}{% for m in messages %}{% if m.role == 'ipython' %}{{ tools }}"
    "{% elif m.tool_calls %}<|python_tag|>{% endif %}<|start_header_id|>{% endfor %}"
)


def test_select_tool_parser(smollm_tokenizer):
    assert select_tool_parser(smollm_tokenizer.chat_template) is HermesToolParser  # no tool support: our markup
    assert select_tool_parser(None) is HermesToolParser
    assert select_tool_parser(QWEN_LIKE) is HermesToolParser
    assert select_tool_parser(LLAMA_LIKE) is Llama3JsonToolParser
    assert select_tool_parser(QWEN_LIKE, "llama3_json") is Llama3JsonToolParser
    with pytest.raises(ValueError, match="unknown tool-call parser 'mistral'"):
        select_tool_parser(QWEN_LIKE, "mistral")
