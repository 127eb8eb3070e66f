"""The reasoning parsers ``--reasoning-parser`` names: each a thinking block's start and end text,
what the engine is told about it (:meth:`ReasoningParser.thinking_spec`), and whether a rendered
prompt already opened it, read off the prompt's own tokens.

``qwen3`` (Qwen3, hybrid: its template opens the block only when ``enable_thinking`` is false, to
close it at once; otherwise the model writes ``<think>`` itself) and ``deepseek_r1`` (DeepSeek-R1 and
the Qwen3-Thinking kind: the template opens ``<think>\\n`` in the generation prompt) share their tags;
they differ in whether an output that starts outside any block is taken to be thinking
(``deepseek_r1``'s older templates left the opening to the model, which then sometimes skipped it).
``auto`` picks one from the chat template's text (:func:`resolve_parser`), ``none`` turns reasoning off.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agentgate.engine.front.protocol import ThinkingSpec

PARSER_NAMES = ("auto", "qwen3", "deepseek_r1", "none")
PROMPT_TAIL_TOKENS = 256
"""Tokens at the end of a prompt read for an open block (the generation prompt's own)."""


@dataclass(frozen=True, slots=True)
class ReasoningParser:
    """A thinking block's markup. ``starts_open``: an output that does not begin with ``start`` is
    thinking all the same until ``end`` (DeepSeek-R1's behaviour), rather than an answer."""

    name: str
    start: str = "<think>"
    end: str = "</think>"
    starts_open: bool = False

    def prompt_opened(self, prompt_token_ids: Sequence[int], decode: Callable[[list[int]], str]) -> bool:
        """Whether the rendered prompt ends inside an open block: its last ``start`` comes after its
        last ``end``, in the text of its own last tokens (``decode``: the tokenizer's, special tokens
        kept; a template that opens and closes the block at once, Qwen3's ``enable_thinking: false``,
        leaves it closed)."""
        text = decode(list(prompt_token_ids[-PROMPT_TAIL_TOKENS:]))
        opened = text.rfind(self.start)
        return opened >= 0 and opened > text.rfind(self.end)

    def thinking_spec(
        self,
        encode: Callable[[str], list[int]],
        prompt_token_ids: Sequence[int],
        decode: Callable[[list[int]], str],
        budget: int | None = None,
    ) -> ThinkingSpec:
        """What the engine enforces for a prompt (``AddRequest.thinking``): the tags in tokens
        (``encode`` without special tokens added), whether the prompt opened the block, the budget."""
        return ThinkingSpec(encode(self.start), encode(self.end), self.prompt_opened(prompt_token_ids, decode), budget)


PARSERS = {
    "qwen3": ReasoningParser("qwen3"),
    "deepseek_r1": ReasoningParser("deepseek_r1", starts_open=True),
}


class UnknownParserError(ValueError):
    """A ``--reasoning-parser`` name that is none of :data:`PARSER_NAMES`."""


def resolve_parser(name: str, chat_template: str | None) -> ReasoningParser | None:
    """The parser ``name`` stands for (None: no reasoning). ``auto``: from the chat template's text:
    one that writes ``<think>`` is a reasoning template, DeepSeek's (its full-width ``｜Assistant｜``
    markers) ``deepseek_r1``, any other ``qwen3``; a template without it has none."""
    if name not in PARSER_NAMES:
        raise UnknownParserError(f"unknown reasoning parser {name!r}: choose one of {', '.join(PARSER_NAMES)}")
    if name == "none":
        return None
    if name != "auto":
        return PARSERS[name]
    template = chat_template or ""
    if "<think>" not in template:
        return None
    return PARSERS["deepseek_r1" if "｜Assistant｜" in template else "qwen3"]
