"""What tool-call parsing produces: OpenAI ``tool_calls`` as deltas (streamed) or whole.

A parser (``gateway.tools.parser_base``) turns a reply into :class:`Delta` s;
:func:`accumulate` folds them as an OpenAI client does, so the
non-streaming reply is what the streamed deltas add up to.
"""

from __future__ import annotations

import secrets
import string
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

_ID_ALPHABET = string.ascii_letters + string.digits


def new_tool_call_id() -> str:
    """``call_`` + 24 random alphanumerics, the shape OpenAI's ids have."""
    return "call_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(24))


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One complete call. ``arguments`` is a JSON string, as in OpenAI's ``function.arguments``."""

    id: str
    name: str
    arguments: str

    def to_openai(self) -> dict[str, Any]:
        """The entry of an assistant message's ``tool_calls``."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True, slots=True)
class ParsedOutput:
    """A whole reply: the text that is not a call, and the calls in order.

    ``content`` is None when there are calls and no other text (what OpenAI
    sends); a reply without calls keeps its text, even an empty one. ``reasoning``: a reasoning
    model's thinking, apart (``gateway.reasoning``; None: it wrote none).
    """

    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    reasoning: str | None = None


@dataclass(frozen=True, slots=True)
class FunctionDelta:
    name: str | None = None
    arguments: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """One ``choices[].delta.tool_calls[]`` entry: the first for a call carries id, type and name."""

    index: int
    function: FunctionDelta
    id: str | None = None
    type: Literal["function"] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index}
        if self.id is not None:
            out["id"] = self.id
        if self.type is not None:
            out["type"] = self.type
        fn = {k: v for k, v in (("name", self.function.name), ("arguments", self.function.arguments)) if v is not None}
        out["function"] = fn
        return out


@dataclass(frozen=True, slots=True)
class Delta:
    """What one ``chat.completion.chunk`` carries in ``choices[].delta``: content or tool-call pieces,
    or (``reasoning``) a piece of a reasoning model's thinking."""

    content: str | None = None
    tool_calls: tuple[ToolCallDelta, ...] = ()
    reasoning: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The OpenAI ``delta`` object (without ``role``, which the route adds to the first chunk)."""
        out: dict[str, Any] = {}
        if self.reasoning is not None:
            out["reasoning"] = out["reasoning_content"] = self.reasoning
        if self.content is not None:
            out["content"] = self.content
        if self.tool_calls:
            out["tool_calls"] = [t.to_dict() for t in self.tool_calls]
        return out


def accumulate(deltas: Iterable[Delta]) -> ParsedOutput:
    """Fold deltas the way OpenAI clients do: concatenate content and, per index, arguments."""
    content: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, list[str]] = {}  # index -> [id, name, arguments]
    for d in deltas:
        if d.reasoning:
            reasoning.append(d.reasoning)
        if d.content:
            content.append(d.content)
        for t in d.tool_calls:
            entry = calls.setdefault(t.index, ["", "", ""])
            if t.id:
                entry[0] = t.id
            if t.function.name:
                entry[1] += t.function.name
            if t.function.arguments:
                entry[2] += t.function.arguments
    tool_calls = [ToolCall(*calls[i]) for i in sorted(calls)]
    text = "".join(content)
    return ParsedOutput(None if tool_calls and not text else text, tool_calls, "".join(reasoning) or None)


def finish_reason(engine_reason: str | None, *, tool_calls: bool) -> str | None:
    """``"tool_calls"`` when the reply made calls and ended normally; otherwise the engine's reason.

    A reply cut off by ``max_tokens`` stays ``"length"`` even with calls, as in
    vLLM: its last call may be incomplete.
    """
    return "tool_calls" if tool_calls and engine_reason == "stop" else engine_reason
