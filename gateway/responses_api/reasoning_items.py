"""Responses ``reasoning`` items: sealed for a client that keeps its own history, and read back.

Out: with ``include: ["reasoning.encrypted_content"]`` (what Codex CLI sends with ``store:
false``) a reasoning item carries its reasoning sealed (``gateway.state.sealing``, the
:data:`~gateway.state.sealing.REASONING` purpose): the client can neither read nor change it.
In: an item's ``encrypted_content``, when it has one, is opened (one that does not open is a 400
naming it); else its ``content`` (``reasoning_text`` parts), else its ``summary``
(``summary_text`` parts), is the reasoning. Read back, it goes to the assistant turn that
follows the item (``gateway.reasoning.history``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentgate.gateway.errors import BadRequestError
from agentgate.gateway.state.sealing import REASONING, Sealer, SealError

INCLUDE_ENCRYPTED = "reasoning.encrypted_content"
_PARTS = {"content": "reasoning_text", "summary": "summary_text"}


def seal_reasoning(sealer: Sealer, text: str) -> str:
    """A reasoning item's ``encrypted_content``: ``text`` sealed for the reasoning purpose."""
    return sealer.seal(REASONING, msgspec.json.encode({"v": 1, "text": text}))


def reasoning_of(item: dict[str, Any], param: str, sealer: Sealer) -> str:
    """The reasoning an input ``reasoning`` item carries (see the module doc); 400 naming the field."""
    sealed = item.get("encrypted_content")
    if sealed is not None:
        try:
            text = msgspec.json.decode(sealer.open(REASONING, sealed))["text"]
        except (SealError, msgspec.DecodeError, KeyError, TypeError) as exc:
            raise BadRequestError(
                f"encrypted_content does not open ({exc}): pass a reasoning item this deployment returned, unchanged",
                param=f"{param}.encrypted_content",
            ) from None
        if isinstance(text, str):
            return text
    for field, part_type in _PARTS.items():
        parts = item.get(field)
        if parts is None:
            continue
        if not isinstance(parts, list):
            raise BadRequestError(f"`{field}` must be a list of {part_type} parts", param=f"{param}.{field}")
        texts = []
        for j, part in enumerate(parts):
            if not isinstance(part, dict) or not isinstance(part.get("text"), str):
                raise BadRequestError(f"a {part_type} part needs a string `text`", param=f"{param}.{field}[{j}]")
            texts.append(part["text"])
        if texts:
            return "\n\n".join(texts)
    return ""
