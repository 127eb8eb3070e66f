"""Bytes out: each API's wire shape of a reply, streamed and whole.

- :mod:`~gateway.formats.openai`: chat completions and completions (``data:`` chunks,
  the usage chunk, ``[DONE]``; whole bodies);
- :mod:`~gateway.formats.anthropic`: the Messages API's events and content blocks;
- :mod:`~gateway.formats.responses`: the Responses API's typed events;
- :mod:`~gateway.formats.framing`: SSE framing shared by all of them.

A format is built from what it needs (the request id, the model's name, the
tokenizer) and written from plain values: the events of a choice, its reply already
read (``gateway.events``; no format parses a reply), then the usage it closes with.
It never calls up: no format
imports the stream that drives it, the chat core or the generation (the boundary
test, ``tests/gateway/test_gateway_boundary.py``, holds it to that).
"""

from __future__ import annotations

from typing import Protocol

from agentgate.gateway.api_types.openai import Usage
from agentgate.gateway.events import ChoiceEvent


class StreamFormat(Protocol):
    """An API's wire shape of a stream: what opens it, the bytes of one choice's event (its
    reply's pieces as the choice read them), what closes it once every choice has finished
    (with the usage), and the event an error after the start becomes."""

    def opening(self) -> bytes: ...
    def chunk(self, index: int, event: ChoiceEvent) -> bytes | None: ...
    def closing(self, usage: Usage) -> bytes: ...
    def error(self, exc: BaseException) -> bytes: ...
