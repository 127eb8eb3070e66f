"""Reasoning parsers (gateway.reasoning): the same split whatever the chunking of the text, tags
split across tokens and across the bytes of a character."""

import itertools

import pytest

from agentgate.gateway.reasoning.parsers import PARSERS, UnknownParserError, resolve_parser
from agentgate.gateway.reasoning.splitter import ReasoningSplitter

CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
# (parser, prompt opened the block, output text, reasoning, content)
CASES = [
    ("qwen3", True, "Let me think. 思考é\n</think>\n\nParis ☀.", "Let me think. 思考é\n", "Paris ☀."),
    ("qwen3", False, "<think>\nhmm</think>\n\nanswer", "\nhmm", "answer"),
    ("qwen3", False, "  <think>a<b</think>c", "a<b", "c"),
    ("qwen3", False, "no thinking here </think> at all", "", "no thinking here </think> at all"),
    ("qwen3", False, "<thin>k not a tag", "", "<thin>k not a tag"),
    ("qwen3", True, "still thinking </thin", "still thinking </thin", ""),  # ended inside the block
    ("qwen3", True, f"I could call {CALL} but wait.</think>{CALL}", f"I could call {CALL} but wait.", CALL),
    ("deepseek_r1", False, "thinking with no tag</think>\n\nthe answer", "thinking with no tag", "the answer"),
    ("deepseek_r1", False, "<think>tagged</think>answer", "tagged", "answer"),
    ("deepseek_r1", True, "é</think>ü", "é", "ü"),
]


def _split(parser, opened, chunks, as_bytes=False):
    splitter = ReasoningSplitter(PARSERS[parser], opened)
    reasoning, content = [], []
    for chunk in chunks:
        r, c = splitter.feed_bytes(chunk) if as_bytes else splitter.feed(chunk)
        reasoning.append(r)
        content.append(c)
        assert not (splitter.in_reasoning and c)  # no answer text while the block is open
    r, c = splitter.finish()
    reasoning.append(r)
    content.append(c)
    assert splitter.reasoning == "".join(reasoning) and splitter.content == "".join(content)
    return "".join(reasoning), "".join(content)


def _chunkings(seq):
    """Every split of ``seq`` in two and in three pieces, and one piece per element."""
    n = len(seq)
    yield [seq]
    yield [seq[i : i + 1] for i in range(n)]
    for i in range(n + 1):
        yield [seq[:i], seq[i:]]
    for i, j in itertools.combinations(range(0, n + 1, max(1, n // 12)), 2):
        yield [seq[:i], seq[i:j], seq[j:]]


@pytest.mark.parametrize(("parser", "opened", "text", "reasoning", "content"), CASES)
def test_the_split_does_not_depend_on_the_chunking(parser, opened, text, reasoning, content):
    for chunks in _chunkings(text):
        assert _split(parser, opened, chunks) == (reasoning, content), chunks
    encoded = text.encode()
    for chunks in _chunkings(encoded):  # across the bytes of a character too
        assert _split(parser, opened, chunks, as_bytes=True) == (reasoning, content), chunks


def test_nothing_is_shown_before_it_is_certain():
    splitter = ReasoningSplitter(PARSERS["qwen3"], prompt_opened=True)
    assert splitter.feed("a </th") == ("a ", "")  # "</th" may be the end tag
    assert splitter.feed("ink") == ("", "")
    assert splitter.feed(">\n\nB") == ("", "B")


def test_the_prompt_tells_whether_the_block_is_open():
    parser = PARSERS["qwen3"]
    decode = "".join  # the prompt's tokens as text pieces (a stand-in tokenizer: one string a token)
    opened = ["<|im_start|>", "assistant\n", "<think>", "\n"]
    closed = [*opened, "\n", "</think>", "\n\n"]  # Qwen3 with enable_thinking: false
    assert parser.prompt_opened(opened, decode)
    assert not parser.prompt_opened(closed, decode)
    assert not parser.prompt_opened(["<|im_start|>", "assistant\n"], decode)
    spec = parser.thinking_spec(lambda text: [ord(ch) for ch in text], opened, decode, budget=8)
    assert spec.start_token_ids == [ord(ch) for ch in "<think>"] and spec.end_token_ids[-1] == ord(">")
    assert spec.prompt_opened and spec.budget == 8


def test_parsers_by_name_and_from_the_template():
    assert resolve_parser("qwen3", None) is PARSERS["qwen3"]
    assert resolve_parser("none", "{{ '<think>' }}") is None
    assert resolve_parser("auto", "{% if enable_thinking %}<think>{% endif %}") is PARSERS["qwen3"]
    assert resolve_parser("auto", "<｜Assistant｜><think>\n") is PARSERS["deepseek_r1"]
    assert resolve_parser("auto", "{{ message.content }}") is None
    with pytest.raises(UnknownParserError, match="'qwen4'"):
        resolve_parser("qwen4", None)
