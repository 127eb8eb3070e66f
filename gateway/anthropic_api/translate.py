"""Anthropic messages -> the chat core's messages.

In: ``system``, messages of content blocks (``text``, ``tool_use`` in the assistant's turns,
``tool_result`` in the user's; the MCP connector's ``mcp_tool_use`` and ``mcp_tool_result``
alike; ``system`` messages among them, Claude Code's mid-conversation system turns, placed by
the chat template or folded: :mod:`gateway.tools.system_turns`), ``tools`` with ``input_schema``
(``defer_loading`` ones left out of the prompt, as the API defines them), ``context_management``
edits (:mod:`~gateway.anthropic_api.context_edits`), ``tool_choice``
(``auto``/``any``/``tool``/``none``, with ``disable_parallel_tool_use``) and ``stop_sequences``
become a :class:`~gateway.api_types.openai.ChatCompletionRequest`: ``any`` is OpenAI's
``required`` and ``tool`` a named function, enforced by the same grammar.
An assistant turn's ``thinking`` blocks are verified (their signature: :mod:`gateway.formats.anthropic_thinking`)
and become its ``reasoning_content``; ``redacted_thinking`` blocks are accepted and not rendered.
(What goes out, content blocks and stop reasons, is :mod:`gateway.formats.anthropic`'s.)
"""

from __future__ import annotations

import json
from typing import Any

from agentgate.gateway.anthropic_api.context_edits import apply_edits
from agentgate.gateway.api_types.ids import new_id
from agentgate.gateway.api_types.openai import ChatCompletionRequest
from agentgate.gateway.errors import BadRequestError
from agentgate.gateway.formats.anthropic_thinking import thinking_of
from agentgate.gateway.reasoning.history import with_reasoning
from agentgate.gateway.state.sealing import Sealer
from agentgate.gateway.translation import chat_request, text_of

TEXT_BLOCKS = frozenset({"text"})


def _text(content: Any, param: str) -> str:
    return text_of(content, param, TEXT_BLOCKS)


def _turn(message: dict[str, Any], param: str, sealer: Sealer) -> list[dict[str, Any]]:
    """One Anthropic message as chat messages: tool results become tool messages (``sealer``
    verifies the thinking blocks)."""
    role, content = message.get("role"), message.get("content")
    if role == "system":  # mid-conversation system messages (beta mid-conversation-system-2026-04-07)
        return [{"role": "system", "content": _text(content, f"{param}.content")}]
    if role not in ("user", "assistant"):
        raise BadRequestError(f"role must be user, assistant or system, got {role!r}", param=f"{param}.role")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise BadRequestError("content must be a string or a list of content blocks", param=f"{param}.content")
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    thinking: list[str] = []
    for i, block in enumerate(content):
        where = f"{param}.content[{i}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(_text([block], where))
        elif kind in ("tool_use", "mcp_tool_use") and role == "assistant":
            arguments = json.dumps(block.get("input") or {}, ensure_ascii=False)
            calls.append(
                {
                    "id": block.get("id") or new_id("toolu"),
                    "type": "function",
                    "function": {"name": block.get("name"), "arguments": arguments},
                }
            )
        elif kind == "mcp_tool_result" and role == "assistant":  # the server ran it: after its call
            out.append(_assistant(texts, calls, thinking))
            texts, calls, thinking = [], [], []
            out.append(_result(block, where))
        elif kind in ("tool_result", "mcp_tool_result") and role == "user":
            out.append(_result(block, where))
        elif kind == "thinking" and role == "assistant":
            thinking.append(thinking_of(block, where, sealer))
        elif kind in ("thinking", "redacted_thinking"):
            continue  # redacted: nothing readable (this server writes none); a user's: not the model's
        else:
            raise BadRequestError(
                f"content blocks of type {kind!r} are not supported in a {role} message", param=f"{where}.type"
            )
    if texts or calls or not out:
        assistant = role == "assistant"
        out.append(_assistant(texts, calls, thinking) if assistant else {"role": role, "content": "".join(texts)})
    return out


def _assistant(texts: list[str], calls: list[dict[str, Any]], thinking: list[str]) -> dict[str, Any]:
    turn: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
    if calls:
        turn["tool_calls"] = calls
    return with_reasoning(turn, "\n\n".join(thinking))


def _result(block: dict[str, Any], where: str) -> dict[str, Any]:
    """A ``tool_result`` (or ``mcp_tool_result``) block as the tool message."""
    result = block.get("content", "")
    text = _text(result, f"{where}.content") if result is not None else ""
    if block.get("is_error"):
        text = f"Error: {text}"
    return {"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": text}


def _tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    out = []
    for i, tool in enumerate(tools):
        if tool.get("defer_loading") is True:  # discovered by tool search, never in the prompt up front
            continue
        if tool.get("type") not in (None, "custom") or "input_schema" not in tool:
            raise BadRequestError("only client tools with an input_schema are supported", param=f"tools[{i}]")
        function = {"name": tool.get("name"), "parameters": tool["input_schema"]}
        if tool.get("description"):
            function["description"] = tool["description"]
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: dict[str, Any] | None) -> tuple[str | dict[str, Any] | None, bool | None]:
    """(OpenAI's tool_choice, parallel_tool_calls) for Anthropic's ``tool_choice``."""
    if choice is None:
        return None, None
    parallel = False if choice.get("disable_parallel_tool_use") else None
    kind = choice.get("type")
    if kind in ("auto", "none"):
        return kind, parallel
    if kind == "any":
        return "required", parallel
    if kind == "tool":
        return {"type": "function", "function": {"name": choice.get("name")}}, parallel
    raise BadRequestError(f"tool_choice.type must be auto, any, tool or none, got {kind!r}", param="tool_choice.type")


def chat_messages(system: Any, messages: list[dict[str, Any]], sealer: Sealer) -> list[dict[str, Any]]:
    out = [{"role": "system", "content": _text(system, "system")}] if system else []
    for i, message in enumerate(messages):
        out += _turn(message, f"messages[{i}]", sealer)
    return out


def to_chat(
    body: Any, sealer: Sealer, extra_tools: list[dict[str, Any]] | None = None, **sampling: Any
) -> ChatCompletionRequest:
    """A messages (or count_tokens) request on the chat core (``sealer``: verifies the thinking
    blocks sent back; ``extra_tools``: chat's function tools beside the request's, the MCP
    connector's)."""
    tool_choice, parallel = _tool_choice(body.tool_choice)
    return chat_request(
        chat_messages(body.system, apply_edits(body.messages, body.context_management), sealer),
        model=body.model,
        tools=((_tools(body.tools) or []) + (extra_tools or [])) or None,
        tool_choice=tool_choice,
        parallel_tool_calls=parallel,
        **sampling,
    )
