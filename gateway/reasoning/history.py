"""Reasoning sent back: the one shape every API's history gives a past assistant turn's thinking.

Chat's assistant ``reasoning`` / ``reasoning_content``, a Responses ``reasoning`` item and an
Anthropic ``thinking`` block all become the assistant message's ``reasoning_content``: the key
the reasoning templates read (Qwen3's, DeepSeek-R1's). What a template does with it is its own
choice (docs/reasoning-history.md): Qwen3's renders it only for the turns after the last user
message (a tool loop's own turns) and drops earlier turns' thinking; a template without
reasoning (SmolLM2's) ignores it.
"""

from __future__ import annotations

from typing import Any

REASONING_KEY = "reasoning_content"


def with_reasoning(message: dict[str, Any], reasoning: str | None) -> dict[str, Any]:
    """``message`` (an assistant message, changed in place and returned) carrying ``reasoning``
    where there is any; more reasoning for the same turn is appended to what it has."""
    if reasoning:
        earlier = message.get(REASONING_KEY)
        message[REASONING_KEY] = f"{earlier}\n\n{reasoning}" if earlier else reasoning
    return message
