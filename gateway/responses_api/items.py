"""Responses API items <-> the chat core's messages.

In: ``input`` (a string, or items: messages with text parts, ``function_call``,
``function_call_output``, ``custom_tool_call`` and its output, a namespace's calls (their
``namespace``), ``compaction``, ``reasoning``), ``instructions``, ``tools``
(:mod:`~gateway.responses_api.client_tools`),
``tool_choice`` and ``text.format`` become a
:class:`~gateway.api_types.openai.ChatCompletionRequest` (400s name the ``input[i]``
field they are about). Out: the output items' shapes, and the messages a later
turn replays of them, are :mod:`gateway.api_types.response_items`.

A ``compaction`` item (what ``POST /v1/responses/compact`` returns) carries the
summary of a conversation in ``encrypted_content``, sealed under the deployment key
(``gateway.state.sealing``, its own purpose: a reasoning item's seal does not open as a
compaction's); one that does not open is a 400 naming it. Read back, it is an assistant
message holding the summary. A ``reasoning`` item's reasoning
(``gateway.responses_api.reasoning_items``) goes to the assistant turn that follows it
(its message, or its calls); one that no assistant turn follows is dropped.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from agentgate.gateway.api_types.ids import new_id
from agentgate.gateway.api_types.response_items import flat_name
from agentgate.gateway.errors import BadRequestError
from agentgate.gateway.reasoning.history import with_reasoning
from agentgate.gateway.responses_api.mcp_items import MCP_INPUT_ITEMS, input_item_messages
from agentgate.gateway.responses_api.reasoning_items import reasoning_of
from agentgate.gateway.state.sealing import COMPACTION, Sealer, SealError
from agentgate.gateway.translation import text_of

TEXT_PARTS = frozenset({"input_text", "output_text", "text", "refusal"})  # the parts text_of reads in an input
SUMMARY_PREFIX = "Summary of the conversation so far:\n"
CUT_SUMMARY_NOTE = "\n[This summary was cut short by its length budget.]"


def _message(item: dict[str, Any], param: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in ("user", "assistant", "system", "developer"):
        raise BadRequestError(f"role must be user, assistant, system or developer, got {role!r}", param=f"{param}.role")
    content = text_of(item.get("content"), f"{param}.content", TEXT_PARTS)
    return {"role": "system" if role == "developer" else role, "content": content}


def _required(item: dict[str, Any], key: str, param: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise BadRequestError(f"`{key}` must be a string", param=f"{param}.{key}")
    return value


def input_messages(
    input: str | list[dict[str, Any]] | None, sealer: Sealer
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``input`` as chat messages, and as the input items stored with the response (each with an
    id); ``sealer`` opens the items' ``encrypted_content``."""
    if input is None:
        return [], []
    if isinstance(input, str):
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": input}]}
        return [{"role": "user", "content": input}], [{"id": new_id("msg"), **item}]
    messages: list[dict[str, Any]] = []
    items = []
    reasoning: str | None = None  # a reasoning item's, for the assistant turn that follows it
    for i, item in enumerate(input):
        param = f"input[{i}]"
        kind = item.get("type", "message")
        if kind == "message":
            message = _message(item, param)
            messages.append(with_reasoning(message, reasoning) if message["role"] == "assistant" else message)
        elif kind in ("function_call", "custom_tool_call"):
            name = flat_name(item.get("namespace"), _required(item, "name", param))
            if kind == "custom_tool_call":
                arguments = json.dumps({"input": _required(item, "input", param)}, ensure_ascii=False)
            else:
                arguments = _required(item, "arguments", param)
            function = {"name": name, "arguments": arguments}
            call = {"id": _required(item, "call_id", param), "type": "function", "function": function}
            last = messages[-1] if messages else None
            if reasoning is None and last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)  # parallel calls: one assistant turn
            else:
                messages.append(with_reasoning({"role": "assistant", "content": "", "tool_calls": [call]}, reasoning))
        elif kind == "reasoning":
            text = reasoning_of(item, param, sealer)
            reasoning = f"{reasoning}\n\n{text}" if reasoning and text else (reasoning or text)  # one turn's items
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output")
            text = output if isinstance(output, str) else text_of(output, f"{param}.output", TEXT_PARTS)
            messages.append({"role": "tool", "tool_call_id": _required(item, "call_id", param), "content": text})
        elif kind == "compaction":
            summary = compaction_summary(item.get("encrypted_content"), f"{param}.encrypted_content", sealer)
            messages.append({"role": "assistant", "content": SUMMARY_PREFIX + summary})
        elif kind in MCP_INPUT_ITEMS:
            messages += input_item_messages(item, param)
        else:
            raise BadRequestError(
                f"input items of type {kind!r} are not supported; this server takes message, "
                "function_call, custom_tool_call, their outputs, compaction, reasoning and mcp items",
                param=f"{param}.type",
            )
        if kind != "reasoning":
            reasoning = None  # read by the item right after it, or by none
        items.append({"id": item.get("id") or new_id("msg" if kind == "message" else "fc"), **item, "type": kind})
    return messages, items


def check_call_outputs(messages: list[dict[str, Any]]) -> None:
    """400 unless every tool output answers a call made before it (a ``function_call_output``
    whose ``call_id`` no earlier ``function_call`` of the chain or input made)."""
    calls: set[str] = set()
    for message in messages:
        calls.update(call["id"] for call in message.get("tool_calls") or ())
        if message["role"] == "tool" and message["tool_call_id"] not in calls:
            raise BadRequestError(
                f"No tool call found for function call output with call_id {message['tool_call_id']}.", param="input"
            )


def compaction_item(summary: str, sealer: Sealer, *, cut: bool = False, dropped: int = 0) -> dict[str, Any]:
    """The ``compaction`` item that carries ``summary``, sealed by ``sealer`` (see the module doc);
    ``cut``: its budget ended it (the item is then ``incomplete``); ``dropped``: the oldest
    messages it did not read."""
    payload = {"v": 1, "summary": summary, "cut": cut, "dropped_messages": dropped}
    content = sealer.seal(COMPACTION, msgspec.json.encode(payload))
    status = "incomplete" if cut else "completed"
    return {"id": new_id("cmp"), "type": "compaction", "encrypted_content": content, "status": status}


def compaction_summary(content: Any, param: str, sealer: Sealer) -> str:
    """The summary a compaction item's ``encrypted_content`` carries (opened by ``sealer``), as
    the model reads it back (said to be cut short when its budget cut it); 400 naming ``param``
    otherwise."""
    why = "it is not a summary"
    try:
        payload = msgspec.json.decode(sealer.open(COMPACTION, content))
        summary = payload["summary"]
    except SealError as exc:
        summary, why = None, str(exc)
    except (TypeError, KeyError, msgspec.DecodeError):
        summary = None
    if not isinstance(summary, str):
        raise BadRequestError(
            f"not a compaction this deployment made ({why}): pass the output of /v1/responses/compact as it came",
            param=param,
        )
    return summary + CUT_SUMMARY_NOTE if payload.get("cut") is True else summary


def chat_tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    if isinstance(choice, dict) and choice.get("type") == "mcp":  # a tool of that server (any: required)
        return {"type": "function", "function": {"name": choice["name"]}} if choice.get("name") else "required"
    if isinstance(choice, dict):
        raise BadRequestError(f"tool_choice of type {choice.get('type')!r} is not supported", param="tool_choice")
    return choice


def response_format(text_format: dict[str, Any] | None) -> dict[str, Any] | None:
    """``text.format`` as chat's ``response_format`` (its json_schema fields sit one level up)."""
    if text_format is None or text_format.get("type") != "json_schema":
        return text_format
    spec = {k: text_format[k] for k in ("name", "schema", "strict", "description") if k in text_format}
    return {"type": "json_schema", "json_schema": spec}
