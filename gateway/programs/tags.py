"""Which agent program a request is a turn of, as the engine is told (``ProgramTag``).

A program is, in this order: the session (``X-Session-Id``), the Responses chain (its first
response's id), the request's ``prompt_cache_key``, or its ``user``. Its id is a digest of
that and the API key's digest, so two keys' ``user: "bob"`` are two programs and no client
string reaches the engine; and of the LoRA adapter the request runs through, if any
(``docs/lora.md``), so one conversation through two adapters is two programs: their KV is not
shared (the prefix cache is salted per adapter), so neither are their pins, ranks or turns.

A turn comes back *after tool calls* when the conversation's last assistant message made
calls and only their results follow it. When that previous turn ended, and on which engine,
is kept in Redis for every gateway replica (``gateway.programs.last_turns``): dispatch fills in
the tag's ``previous_turn_end`` and routes the turn there; an engine that saw the turn end
measures the gap itself.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from agentgate.engine.front.protocol import ProgramTag
from agentgate.gateway.api_types.openai import AssistantMessage
from agentgate.gateway.context import RequestContext


def program_id(
    context: RequestContext, prompt_cache_key: str | None, user: str | None, adapter: str = ""
) -> str | None:
    """The program's id (see the module docstring); ``adapter``: the LoRA adapter's name ("": none)."""
    through = f"\0lora\0{adapter}" if adapter else ""
    for kind, value in (
        ("session", context.session_id),
        ("chain", context.program),
        ("cache", prompt_cache_key),
        ("user", user),
    ):
        if value:
            digest = hashlib.sha256(f"{context.key}\0{kind}\0{value}{through}".encode()).hexdigest()[:24]
            return f"{kind}:{digest}"
    return None


def called_tools(messages: Sequence[Any]) -> list[str] | None:
    """The tools the conversation's last assistant turn called, when only their results follow
    it (this turn returns after tool calls); None otherwise."""
    for message in reversed(messages):
        role = _get(message, "role")
        if role == "tool":
            continue
        calls = _get(message, "tool_calls") if role == "assistant" else None
        if not calls:
            return None
        return [str((_get(call, "function") or {}).get("name", "")) for call in calls]
    return None


def _get(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


def program_tag(
    context: RequestContext,
    messages: Sequence[Any],
    *,
    tools_offered: bool,
    prompt_cache_key: str | None = None,
    user: str | None = None,
    adapter: str = "",
) -> ProgramTag | None:
    """The tag of a chat request's engine request, None when it belongs to no program (its
    ``previous_turn_end`` is dispatch's to fill in); ``adapter``: the LoRA adapter it runs through."""
    pid = program_id(context, prompt_cache_key, user, adapter)
    if pid is None:
        return None
    tools = called_tools(messages)
    return ProgramTag(pid, tools_offered=tools_offered, after_tool_calls=tools is not None, tool_names=tools or [])


def reply_tools(reply: AssistantMessage | dict[str, Any] | None) -> list[str]:
    """The tools a turn's ``reply`` (an assistant message as recorded, or as a client sends it) called."""
    calls = _get(reply, "tool_calls") if reply is not None else None
    return [call["function"]["name"] for call in calls or ()]
