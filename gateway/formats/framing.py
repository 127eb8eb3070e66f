"""SSE framing: OpenAI's ``data:`` events (lines end with ``\r\n``, as sse-starlette writes
them) and the named events of the Responses and Anthropic streams (``event:`` + ``data:``,
lines ending with ``\n``, as OpenAI's and Anthropic's do)."""

from __future__ import annotations

from typing import Any

import msgspec

DONE = b"data: [DONE]\r\n\r\n"
_encoder = msgspec.json.Encoder()


def sse(payload: bytes) -> bytes:
    """One SSE event carrying ``payload`` (JSON, which holds no raw newline)."""
    return b"data: " + payload + b"\r\n\r\n"


def named_event(kind: str, payload: Any) -> bytes:
    """One SSE event with its type named (``event:``) and its JSON payload. Lines end with
    ``\n``, as OpenAI's and Anthropic's do (line-splitting clients read nothing else)."""
    return b"event: " + kind.encode() + b"\ndata: " + _encoder.encode(payload) + b"\n\n"
