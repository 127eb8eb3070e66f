"""The reply of a choice, read: the model's text through the tool plan's parser into
content and tool-call deltas, and the finish reason as the APIs report it (``tool_calls``
when the reply made calls and ended normally). Each choice reads its reply once, with one
:class:`ReplyReader`, as its text comes (``gateway.choice``); every API writes the pieces
read in its own shape (``gateway.formats``)::

    reader = ReplyReader(plan)
    piece = reader.read(event.text, event.finish_reason)   # content and tool-call deltas

:func:`assistant_message` is the reply as a session records it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

from agentgate.gateway.api_types.openai import AssistantMessage
from agentgate.gateway.reasoning.splitter import ReasoningSplitter
from agentgate.gateway.tools import Delta, ParsedOutput, accumulate, finish_reason
from agentgate.gateway.tools.constraints import CALL_FORMATS
from agentgate.gateway.tools.deltas import FunctionDelta, ToolCallDelta
from agentgate.gateway.tools.plan import ToolPlan


def assistant_message(parsed: ParsedOutput) -> AssistantMessage:
    """A reply as a session records it: the assistant message, its content and tool calls as
    read (with the ids the client was sent)."""
    calls = [call.to_openai() for call in parsed.tool_calls] or None
    return AssistantMessage("assistant", parsed.content, calls, parsed.reasoning, parsed.reasoning)


class ReplyPiece(NamedTuple):
    """What one choice event adds to a reply: content and tool-call deltas, and on its
    last event the finish reason as the APIs report it."""

    deltas: list[Delta]
    finish_reason: str | None


class ReplyReader:
    """One choice's reply, read through the plan's tool-call parser (if any), keeping at
    most ``plan.max_calls`` calls. The finish reason becomes ``"tool_calls"`` when the
    reply made calls and ended normally.

    A call goes out whole: its header (id, name) is held until its arguments are
    known, so a call that ``max_tokens`` cuts is never returned, streamed or not:
    it is dropped, and so is any call markup the cut left in the text (the start
    of a call's tag, or of the closing tag after a whole call: ``</tool_ca``); the
    finish reason stays ``"length"``. (The parser keeps such a piece as content
    when the reply ended otherwise: it loses no text the model meant.)

    Under a forced plan (``plan.forced``: the grammar, not the model, keeps a reply of
    calls going) a call identical to an earlier one of the reply (same name, same
    arguments) is dropped and the calls after it renumbered: a small model repeats
    its call until the grammar's bound; the reply holds it once.

    With ``splitter`` (a reasoning model's reply, ``gateway.reasoning.splitter``), the thinking
    comes apart first, as ``reasoning`` deltas: only the answer reaches the tool-call parser, so
    a call written inside the thinking is reasoning text, never a call."""

    __slots__ = ("max_calls", "parser", "splitter", "_markup", "_pending", "_unique", "_seen", "_index", "_dropped")

    def __init__(self, plan: ToolPlan, splitter: ReasoningSplitter | None = None) -> None:
        self.splitter = splitter
        self.parser = plan.parser() if plan.parser is not None else None
        self.max_calls = plan.max_calls
        call_format = CALL_FORMATS.get(plan.parser.name) if plan.parser is not None else None
        # The tags whose start a cut can leave at the end of the text: a call's opening and closing tags.
        self._markup = tuple(t for t in (call_format.trigger, call_format.closing_tag) if t) if call_format else ()
        self._pending: dict[int, ToolCallDelta] = {}  # call headers waiting for their arguments
        self._unique = plan.forced
        self._seen: set[tuple[str | None, str | None]] = set()  # (name, arguments) of the calls sent
        self._index: dict[int, int] = {}  # the parser's index of a call sent -> its index in the reply
        self._dropped = 0  # calls dropped as repeats

    @property
    def num_calls(self) -> int:
        if self.parser is None:
            return 0
        n = self.parser.num_tool_calls
        return (n if self.max_calls is None else min(n, self.max_calls)) - self._dropped

    def feed(self, text: str) -> list[Delta]:
        if not text or self.splitter is None:
            return self._answer(text)
        return _with_reasoning(*self.splitter.feed(text), self._answer)

    def _answer(self, text: str) -> list[Delta]:
        """The deltas of answer text (no thinking in it)."""
        if not text:
            return []
        if self.parser is None:
            return [Delta(content=text)]
        return self._whole_calls(self._keep(self.parser.feed(text)))

    def finish(self, cut: bool = False) -> list[Delta]:
        """The rest of the reply; ``cut``: it ended at ``max_tokens`` (an open call is dropped)."""
        if self.splitter is None:
            return self._finish_answer(cut)
        return _with_reasoning(*self.splitter.finish(), self._answer) + self._finish_answer(cut)

    def _finish_answer(self, cut: bool) -> list[Delta]:
        if self.parser is None:
            return []
        deltas = self._keep(self.parser.finish())
        if not cut:
            deltas = self._whole_calls(deltas)
            return deltas + [Delta(tool_calls=(t,)) for t in self._pending.values()]
        cut_calls = set(self._pending)
        kept = []
        for d in deltas:
            renumbered = (self._renumbered(t) for t in d.tool_calls if t.index not in cut_calls)
            calls = tuple(t for t in renumbered if t is not None)
            content = self._before_markup(d.content)
            if content or calls:
                kept.append(Delta(content, calls))
        return kept

    def _whole_calls(self, deltas: list[Delta]) -> list[Delta]:
        """``deltas`` with each call's header held back until its arguments come, then sent with them."""
        out = []
        for d in deltas:
            calls = []
            for t in d.tool_calls:
                if t.id is not None and not t.function.arguments:
                    self._pending[t.index] = t
                    continue
                header = self._pending.pop(t.index, None)
                if header is not None:
                    function = FunctionDelta(header.function.name, t.function.arguments)
                    t = ToolCallDelta(t.index, function, header.id, header.type)
                if t.id is not None:  # a whole call
                    call = (t.function.name, t.function.arguments)
                    if self._unique and call in self._seen:
                        self._dropped += 1  # a repeat of a call this reply made
                        continue
                    self._seen.add(call)
                    self._index[t.index] = t.index - self._dropped
                t = self._renumbered(t)
                if t is not None:
                    calls.append(t)
            if d.content is not None or calls:
                out.append(Delta(d.content, tuple(calls)))
        return out

    def _renumbered(self, t: ToolCallDelta) -> ToolCallDelta | None:
        """``t`` at its call's index in the reply (None: a piece of a repeat that was dropped)."""
        if not self._unique:
            return t
        index = self._index.get(t.index)
        if index is None:
            return None
        return t if index == t.index else dataclasses.replace(t, index=index)

    def _before_markup(self, text: str | None) -> str | None:
        """The text before any call markup (or the start of a tag at its end), right-stripped."""
        if not text or not self._markup:
            return text
        trigger = self._markup[0]
        at = text.find(trigger)
        if at >= 0:
            return text[:at].rstrip()  # as before any call: the text is right-stripped
        for tag in self._markup:
            for n in range(min(len(tag), len(text)), 0, -1):
                if text.endswith(tag[:n]):
                    return text[:-n].rstrip()
        return text

    def read(self, text: str, engine_finish: str | None) -> ReplyPiece:
        """The piece an event adds (``engine_finish``: its finish reason, on the last)."""
        deltas = self.feed(text)
        if engine_finish is None:
            return ReplyPiece(deltas, None)
        deltas += self.finish(cut=engine_finish == "length")
        return ReplyPiece(deltas, finish_reason(engine_finish, tool_calls=self.num_calls > 0))

    def whole(self, text: str, engine_finish: str | None) -> tuple[ParsedOutput, str | None]:
        """A whole reply at once (non-streaming): what its streamed pieces add up to."""
        parsed = accumulate([*self.feed(text), *self.finish(cut=engine_finish == "length")])
        return parsed, finish_reason(engine_finish, tool_calls=bool(parsed.tool_calls))

    def _keep(self, deltas: list[Delta]) -> list[Delta]:
        if self.max_calls is None:
            return deltas
        kept = []
        for d in deltas:
            calls = tuple(t for t in d.tool_calls if t.index < self.max_calls)
            if d.content is not None or calls:
                kept.append(d if len(calls) == len(d.tool_calls) else Delta(d.content, calls))
        return kept


def _with_reasoning(reasoning: str, answer: str, read: Callable[[str], list[Delta]]) -> list[Delta]:
    """A reasoning delta (when there is thinking), then the deltas ``read`` makes of the answer."""
    deltas = read(answer)
    return [Delta(reasoning=reasoning), *deltas] if reasoning else deltas
