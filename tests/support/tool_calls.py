"""Tool-call replies to test the parsers on: a corpus per format (well-formed,
malformed, truncated), and running a parser over a reply cut into pieces."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from agentgate.gateway.tools.deltas import Delta, ParsedOutput, accumulate
from agentgate.gateway.tools.hermes import HermesToolParser
from agentgate.gateway.tools.llama3_json import Llama3JsonToolParser
from agentgate.gateway.tools.parser_base import StreamingToolParser

WEATHER = '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}'
PARIS = ("get_weather", '{"city": "Paris", "unit": "celsius"}')
NASTY_ARGS = (
    '{"path": "a/b \\"c\\".txt", "code": "fn() { return \\"}\\"; }\\n<tool_call>{\\"x\\"}</tool_call>", '
    '"tags": ["x", {"y": [1, 2.5e3, -0.1, 0, -12.5E+3, true, false, null]}], '
    '"text": "Zürich 🌍 \\u00e9\\ud83d\\ude00 \\\\ back\\/slash \\t", "empty": {}, "list": []}'
)

HERMES_CORPUS = {
    "content only": "Hello! How can I help you today?",
    "empty": "",
    "whitespace only": " \n\t ",
    "content with ws and angle brackets": "  a < b and c <= d, <b>bold</b>, <tool_ <tool_cal\n\n",
    "one call": f"<tool_call>\n{WEATHER}\n</tool_call>",
    "one call compact": '<tool_call>{"name":"f","arguments":{"a":1}}</tool_call>',
    "content then call": f"Let me check the weather.\n\n<tool_call>\n{WEATHER}\n</tool_call>",
    "parallel calls": (
        f'<tool_call>\n{WEATHER}\n</tool_call>\n<tool_call>\n{{"name": "get_time", "arguments": {{}}}}\n</tool_call>'
    ),
    "parallel, no newline": (
        f'<tool_call>{WEATHER}</tool_call><tool_call>{{"name": "b", "arguments": {{"x": [1]}}}}</tool_call>'
    ),
    "nasty arguments": f'<tool_call>\n{{"name": "write_file", "arguments": {NASTY_ARGS}}}\n</tool_call>',
    "arguments as a JSON string": (
        '<tool_call>{"name": "f", "arguments": "{\\"a\\": [1, {\\"b\\": \\"}\\"}]}"}</tool_call>'
    ),
    "arguments-first order": '<tool_call>{"arguments": {"q": "x"}, "name": "search"}</tool_call>',
    "parameters key": '<tool_call>{"name": "f", "parameters": {"a": 1}}</tool_call>',
    "no arguments": '<tool_call>{"name": "ping"}</tool_call>',
    "null arguments": '<tool_call>{"name": "ping", "arguments": null}</tool_call>',
    "escaped name": '<tool_call>{"name": "get\\u005fweather", "arguments": {}}</tool_call>',
    "raw newline in a string": '<tool_call>{"name": "echo", "arguments": {"text": "line1\nline2"}}</tool_call>',
    "unclosed tag at the end": f"<tool_call>\n{WEATHER}\n",
    "text after the call": f"<tool_call>{WEATHER}</tool_call>\n\nDone, anything else?",
    "content between calls": f"First:\n<tool_call>{WEATHER}</tool_call>\nthen:\n<tool_call>{WEATHER}</tool_call>",
    "tag in prose": "Use the <tool_call> tag to call tools, and </tool_call> to close.",
    "tag then prose json": "<tool_call> {not json} </tool_call> ok",
    "json that is not a call": '<tool_call>{"foo": 1, "bar": [true]}</tool_call>',
    "empty name": '<tool_call>{"name": "", "arguments": {}}</tool_call>',
    "non-string name": '<tool_call>{"name": 5, "arguments": {}}</tool_call>',
    "truncated before the name": '<tool_call>\n{"name": "get_wea',
    "truncated after the name": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par',
    "missing closing brace": '<tool_call>{"name": "f", "arguments": {"a": 1}</tool_call>\nafter',
    "broken after the name": '<tool_call>{"name": "f", "arguments": {"a": tru}}</tool_call>rest',
    "broken, then another call": (
        '<tool_call>{"name": "f", "arguments": {"a": 01}}\n<tool_call>{"name": "g"}</tool_call>'
    ),
    "nested tag in broken json": '<tool_call>{"name" <tool_call>{"name": "g", "arguments": {}}</tool_call>',
    "NaN is not JSON": '<tool_call>{"arguments": {"x": NaN}, "name": "f"}</tool_call>',
    "stray closing tag": "</tool_call> hi </tool_call>",
    "double closing tag": f"<tool_call>{WEATHER}</tool_call></tool_call>",
    "partial tag at the end": "Sure <tool_",
    "partial closing tag at the end": f"<tool_call>{WEATHER}</tool_",
    "lookalike tag": "<tool_calls>{}</tool_calls> <tool_call >",
    "deep nesting": '<tool_call>{"name": "d", "arguments": {"a": [[[[{"b": [[{}]]}]]]]}}</tool_call>',
    "trailing ws after call": f"<tool_call>{WEATHER}</tool_call>   \n  ",
}

LLAMA_CORPUS = {
    "content only": "The weather in Paris is sunny.",
    "empty": "",
    "whitespace only": "  \n",
    "one call": '{"name": "get_weather", "parameters": {"city": "Paris"}}',
    "python tag": '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}',
    "leading ws": '\n\n {"name": "f", "parameters": {}}',
    "parallel": '{"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {"y": "}{;"}}',
    "parallel, no space": '{"name": "a", "parameters": {}};{"name": "b", "arguments": {"z": []}}',
    "nasty arguments": f'{{"name": "write_file", "parameters": {NASTY_ARGS}}}',
    "dangling separator": '{"name": "a", "parameters": {}};  ',
    "text after": '{"name": "a", "parameters": {}}\nI called it.',
    "separator then text": '{"name": "a", "parameters": {}}; and more',
    "json answer": '{"answer": 42, "items": [1, 2]}',
    "content mentioning json": 'Call it like {"name": "f", "parameters": {}}',
    "partial tag": "<|python_ta",
    "tag then text": "<|python_tag|>print('hi')",
    "truncated": '{"name": "get_weather", "parameters": {"city": "Pa',
    "broken after the name": '{"name": "f", "parameters": {"a": [1,]}}; {"name": "g", "parameters": {}}',
    "broken before the name": '{"nam: "f"}',
}


def ids() -> Iterable[str]:
    return (f"call_{i}" for i in itertools.count())


def run(cls: type[StreamingToolParser], pieces: Iterable[str]) -> tuple[ParsedOutput, list[Delta]]:
    parser = cls(id_factory=ids().__next__)
    deltas: list[Delta] = []
    for piece in pieces:
        deltas += parser.feed(piece)
    deltas += parser.finish()
    return accumulate(deltas), deltas


def parse(cls: type[StreamingToolParser], text: str) -> ParsedOutput:
    return cls.parse(text, id_factory=ids().__next__)


def split_at(text: str, cuts: Iterable[int]) -> list[str]:
    bounds = [0, *sorted(cuts), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


CASES = [(HermesToolParser, name, text) for name, text in HERMES_CORPUS.items()] + [
    (Llama3JsonToolParser, name, text) for name, text in LLAMA_CORPUS.items()
]
