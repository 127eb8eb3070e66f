"""Streaming reasoning apart from the answer: text deltas in, (reasoning delta, content delta) out,
the same whatever the chunking: a tag split across tokens or across the bytes of a character is
held back until it is whole (or proven not to be one).

Where the prompt opened the block, the output starts in the thinking; otherwise it may open with the
start tag (leading whitespace allowed), and without one it is the answer or, for a parser that
``starts_open``, thinking until the end tag. The tags are in neither part; the answer's leading
whitespace after a block is dropped (the ``\\n\\n`` templates write after ``</think>``). An output
that ends inside the block is all reasoning. Tool calls written inside the thinking are reasoning
text: only the content goes to the tool parser.
"""

from __future__ import annotations

import codecs
import enum

from agentgate.gateway.reasoning.parsers import ReasoningParser


class _Part(enum.Enum):
    BEFORE = "before"  # at the start of an output whose prompt did not open the block
    REASONING = "reasoning"
    CONTENT = "content"


class ReasoningSplitter:
    """One reply's splitter. ``feed`` a text delta (or ``feed_bytes`` raw UTF-8), ``finish`` at the
    end; each returns the (reasoning, content) text that is certain so far."""

    def __init__(self, parser: ReasoningParser, prompt_opened: bool) -> None:
        self.parser = parser
        self._part = _Part.REASONING if prompt_opened else _Part.BEFORE
        self._held = ""
        self._after_block = False  # the content follows a block: its leading whitespace goes
        self._bytes = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.reasoning = ""  # all of it so far
        self.content = ""

    @property
    def in_reasoning(self) -> bool:
        return self._part is _Part.REASONING

    def feed_bytes(self, data: bytes, final: bool = False) -> tuple[str, str]:
        return self.feed(self._bytes.decode(data, final))

    def feed(self, delta: str) -> tuple[str, str]:
        text, self._held = self._held + delta, ""
        reasoning: list[str] = []
        content: list[str] = []
        while text:
            if self._part is _Part.BEFORE:
                lead = text.lstrip()
                if lead.startswith(self.parser.start):
                    text, self._part = lead[len(self.parser.start) :], _Part.REASONING
                elif self.parser.start.startswith(lead):
                    self._held = text  # whitespace, or a start tag begun
                    break
                else:  # no tag: an answer, or (starts_open) thinking that skipped its tag
                    self._part = _Part.REASONING if self.parser.starts_open else _Part.CONTENT
            elif self._part is _Part.REASONING:
                at = text.find(self.parser.end)
                if at >= 0:
                    reasoning.append(text[:at])
                    text = text[at + len(self.parser.end) :]
                    self._part, self._after_block = _Part.CONTENT, True
                    continue
                keep = _partial_suffix(text, self.parser.end)
                reasoning.append(text[: len(text) - keep])
                self._held = text[len(text) - keep :]
                break
            else:
                if self._after_block:
                    text = text.lstrip()
                    if not text:
                        break
                    self._after_block = False
                content.append(text)
                break
        return self._emit("".join(reasoning), "".join(content))

    def finish(self) -> tuple[str, str]:
        """The end of the reply: what was held back goes where it stands (an unclosed block's text
        is reasoning; a start tag never completed is answer)."""
        held, self._held = self._held + self._bytes.decode(b"", True), ""
        if self._part is _Part.REASONING:
            return self._emit(held, "")
        if self._part is _Part.BEFORE:
            return self._emit(held, "") if self.parser.starts_open and held.strip() else self._emit("", held)
        return self._emit("", held.lstrip() if self._after_block else held)

    def _emit(self, reasoning: str, content: str) -> tuple[str, str]:
        self.reasoning += reasoning
        self.content += content
        return reasoning, content


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest end of ``text`` that begins ``tag`` (a tag that may yet complete)."""
    for size in range(min(len(text), len(tag) - 1), 0, -1):
        if tag.startswith(text[-size:]):
            return size
    return 0
