"""``context_management`` edits of a Messages request, done on its history before it is
translated: ``clear_thinking_20251015`` removes the thinking blocks of all but the last
``keep`` assistant turns that have any (``keep``: ``{"type": "thinking_turns", "value": N}``,
or ``"all"``: nothing cleared; default: the last turn's kept, as Anthropic's API does).
Any other edit (``clear_tool_uses_20250919``, ...) is a 400 naming it, not a no-op.
"""

from __future__ import annotations

from typing import Any

from agentgate.gateway.errors import BadRequestError

THINKING_BLOCKS = frozenset({"thinking", "redacted_thinking"})


def _keep(edit: dict[str, Any], param: str) -> int | None:
    """How many thinking turns ``edit`` keeps (None: all)."""
    keep = edit.get("keep", {"type": "thinking_turns", "value": 1})
    if keep == "all":
        return None
    if isinstance(keep, dict) and keep.get("type") == "thinking_turns":
        value = keep.get("value")
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    raise BadRequestError('keep must be "all" or {"type": "thinking_turns", "value": N >= 0}', param=f"{param}.keep")


def _thinks(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") in THINKING_BLOCKS for b in content)


def apply_edits(messages: list[dict[str, Any]], context_management: dict[str, Any] | None) -> list[dict[str, Any]]:
    """``messages`` with the edits of ``context_management`` done (a new list; the request's
    messages are not changed)."""
    if context_management is None:
        return messages
    edits = context_management.get("edits") if isinstance(context_management, dict) else None
    if not isinstance(edits, list):
        raise BadRequestError("context_management.edits must be a list", param="context_management.edits")
    for i, edit in enumerate(edits):
        param = f"context_management.edits[{i}]"
        kind = edit.get("type") if isinstance(edit, dict) else None
        if kind != "clear_thinking_20251015":
            raise BadRequestError(
                f"context_management edit {kind!r} is not supported; this server does clear_thinking_20251015",
                param=f"{param}.type",
            )
        keep = _keep(edit, param)
        if keep is None:
            continue
        thinking = [i for i, m in enumerate(messages) if m.get("role") == "assistant" and _thinks(m)]
        cleared = set(thinking[: max(len(thinking) - keep, 0)])
        messages = [
            {**m, "content": [b for b in m["content"] if b.get("type") not in THINKING_BLOCKS]} if i in cleared else m
            for i, m in enumerate(messages)
        ]
    return messages
