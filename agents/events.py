"""Typed results and stream events.

A streamed chat completion is an async iterator of these events, in order:

- :class:`ContentDelta` — text of one choice;
- :class:`ToolCallDelta` — a raw fragment of a tool call as the server sent it
  (id and name first, then argument fragments);
- :class:`ToolCallComplete` — one tool call, accumulated from its deltas, once
  the next call starts or its choice finishes; ``call.arguments`` is the whole
  JSON string;
- :class:`Finish` — a choice ended, with its finish reason;
- :class:`UsageEvent` — token counts (the SDK always asks for them).

Non-streaming calls, and ``await stream.final()``, give a :class:`ChatResult`
(or :class:`CompletionResult`) holding the same information.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    # Prompt tokens the server's prefix cache served (prompt_tokens_details): how the prompt was
    # computed, not how much was used, so two usages of the same counts compare equal whatever it is.
    cached_tokens: int = field(default=0, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Usage | None:
        if not data:
            return None
        return cls(
            int(data.get("prompt_tokens") or 0),
            int(data.get("completion_tokens") or 0),
            int(data.get("total_tokens") or 0),
            int((data.get("prompt_tokens_details") or {}).get("cached_tokens") or 0),
        )

    def __add__(self, other: Usage | None) -> Usage:
        if other is None:
            return Usage(self.prompt_tokens, self.completion_tokens, self.total_tokens, self.cached_tokens)
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.total_tokens + other.total_tokens,
            self.cached_tokens + other.cached_tokens,
        )


@dataclass(slots=True)
class ToolCall:
    """One function call the model asked for; ``arguments`` is a JSON string (as OpenAI sends it)."""

    id: str
    name: str
    arguments: str = ""
    index: int = 0

    def parsed_arguments(self) -> dict[str, Any]:
        """The arguments as a dict; ValueError when they are not a JSON object."""
        text = self.arguments.strip() or "{}"
        value = json.loads(text)
        if not isinstance(value, dict):
            raise ValueError(f"the arguments of {self.name} are not a JSON object: {self.arguments!r}")
        return value

    def to_json(self) -> dict[str, Any]:
        """The call as it goes back in an assistant message's ``tool_calls``."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}

    @classmethod
    def from_json(cls, data: dict[str, Any], index: int = 0) -> ToolCall:
        function = data.get("function") or {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments if arguments is not None else {})
        return cls(str(data.get("id") or ""), str(function.get("name") or ""), arguments, data.get("index", index))


# -- stream events -------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class ContentDelta:
    text: str
    choice: int = 0


@dataclass(slots=True, frozen=True)
class ToolCallDelta:
    """A fragment of call ``index`` of choice ``choice``: id/name when it starts, argument text after."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""
    choice: int = 0


@dataclass(slots=True, frozen=True)
class ToolCallComplete:
    call: ToolCall
    choice: int = 0


@dataclass(slots=True, frozen=True)
class Finish:
    reason: str | None
    choice: int = 0


@dataclass(slots=True, frozen=True)
class UsageEvent:
    usage: Usage


Event = ContentDelta | ToolCallDelta | ToolCallComplete | Finish | UsageEvent


# -- results -------------------------------------------------------------------------


@dataclass(slots=True)
class Choice:
    index: int = 0
    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None

    def message(self) -> dict[str, Any]:
        """This choice as the assistant message to append to the conversation."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [c.to_json() for c in self.tool_calls]
        return message


@dataclass(slots=True)
class ChatResult:
    id: str = ""
    model: str = ""
    choices: list[Choice] = field(default_factory=list)
    usage: Usage | None = None
    request_id: str | None = None  # the X-Request-Id the server answered with

    @property
    def choice(self) -> Choice:
        return self.choices[0] if self.choices else Choice()

    @property
    def content(self) -> str | None:
        return self.choice.content

    @property
    def tool_calls(self) -> list[ToolCall]:
        return self.choice.tool_calls

    @property
    def finish_reason(self) -> str | None:
        return self.choice.finish_reason

    def message(self) -> dict[str, Any]:
        return self.choice.message()

    @classmethod
    def from_json(cls, data: dict[str, Any], request_id: str | None = None) -> ChatResult:
        choices = []
        for i, raw in enumerate(data.get("choices") or []):
            message = raw.get("message") or {}
            calls = [ToolCall.from_json(c, j) for j, c in enumerate(message.get("tool_calls") or [])]
            choices.append(Choice(raw.get("index", i), message.get("content"), calls, raw.get("finish_reason")))
        return cls(data.get("id", ""), data.get("model", ""), choices, Usage.from_json(data.get("usage")), request_id)


@dataclass(slots=True)
class CompletionResult:
    id: str = ""
    model: str = ""
    texts: list[str] = field(default_factory=list)
    finish_reasons: list[str | None] = field(default_factory=list)
    usage: Usage | None = None
    request_id: str | None = None

    @property
    def text(self) -> str:
        return self.texts[0] if self.texts else ""

    @property
    def finish_reason(self) -> str | None:
        return self.finish_reasons[0] if self.finish_reasons else None

    @classmethod
    def from_json(cls, data: dict[str, Any], request_id: str | None = None) -> CompletionResult:
        choices = sorted(data.get("choices") or [], key=lambda c: c.get("index", 0))
        return cls(
            data.get("id", ""),
            data.get("model", ""),
            [c.get("text") or "" for c in choices],
            [c.get("finish_reason") for c in choices],
            Usage.from_json(data.get("usage")),
            request_id,
        )
