"""Anthropic ``thinking`` blocks: the server's signature over each, and the blocks sent back.

A ``thinking`` block's ``signature`` is the server's HMAC over the block's text
(``gateway.state.sealing``, the :data:`~gateway.state.sealing.THINKING` purpose, the deployment
key: docs/sealing.md), so a block sent back in an assistant turn is verified before the model
reads it: an edited block (or signature, or one another deployment signed) is a 400 naming its
``signature``. A verified block's text is the turn's ``reasoning_content``
(``gateway.reasoning.history``), which the chat template renders or drops as it does
(docs/reasoning-history.md). ``redacted_thinking`` blocks are accepted and passed over: this
server never writes one, and nothing in them is readable.
"""

from __future__ import annotations

from typing import Any

from agentgate.gateway.errors import BadRequestError
from agentgate.gateway.state.sealing import THINKING, Sealer, SealError


def thinking_signature(sealer: Sealer, thinking: str) -> str:
    """The ``signature`` of a thinking block holding ``thinking``."""
    return sealer.sign(THINKING, thinking.encode())


def thinking_block(sealer: Sealer, thinking: str) -> dict[str, Any]:
    """A whole ``thinking`` content block, signed."""
    return {"type": "thinking", "thinking": thinking, "signature": thinking_signature(sealer, thinking)}


def thinking_of(block: dict[str, Any], where: str, sealer: Sealer) -> str:
    """The text of a ``thinking`` block sent back (``where``: its param path), once its signature
    verifies; else a 400 naming the field."""
    thinking = block.get("thinking")
    if not isinstance(thinking, str):
        raise BadRequestError("a thinking block needs a string `thinking`", param=f"{where}.thinking")
    try:
        sealer.verify(THINKING, thinking.encode(), block.get("signature"))
    except SealError as exc:
        raise BadRequestError(
            f"the thinking block's signature does not verify ({exc}): send thinking blocks back as this "
            "deployment returned them",
            param=f"{where}.signature",
        ) from None
    return thinking
