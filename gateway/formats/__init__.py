"""Bytes out: each API's wire shape of a reply, streamed and whole.

- :mod:`~gateway.formats.openai`: chat completions and completions (``data:`` chunks,
  the usage chunk, ``[DONE]``; whole bodies);
- :mod:`~gateway.formats.anthropic`: the Messages API's events and content blocks;
- :mod:`~gateway.formats.responses`: the Responses API's typed events;
- :mod:`~gateway.formats.framing`: SSE framing shared by all of them.

A format is built from what it needs (the tool plan, the request id, the model's
name, the tokenizer) and written from plain values: the events of a choice
(``gateway.events``), then the usage it closes with. It never calls up: no format
imports the stream that drives it, the chat core or the generation (the boundary
test, ``tests/gateway/test_gateway_boundary.py``, holds it to that).
"""

from __future__ import annotations

from typing import Protocol

from agentgate.gateway.api_types.openai import AssistantMessage, Usage
from agentgate.gateway.events import ChoiceEvent


class StreamFormat(Protocol):
    """An API's wire shape of a stream: what opens it, the bytes of one choice's event, what
    closes it once every choice has finished (with the usage), the event an error after the
    start becomes, and the reply of a choice's text as a session records it (OpenAI's assistant
    message, whatever the API: ``gateway.replies``)."""

    def opening(self) -> bytes: ...
    def chunk(self, index: int, event: ChoiceEvent) -> bytes | None: ...
    def closing(self, usage: Usage) -> bytes: ...
    def error(self, exc: BaseException) -> bytes: ...
    def reply(self, text: str) -> AssistantMessage: ...
