"""The Responses API's output items, as plain JSON objects in the shapes of the openai SDK's
types (``message``, ``function_call``, ``mcp_call``, ``mcp_approval_request``), and what the model
reads of them back: an assistant message, its calls as tool calls, an MCP call's output (or
error) as the tool's message.

The server-run tool loop (:mod:`gateway.tool_loop`) keeps these items as its record of a round
for both the Responses and the Messages APIs; the formats write them (:mod:`gateway.formats`).
Reading a request's input items is the Responses API's (:mod:`gateway.responses_api.items`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from agentgate.gateway.api_types.ids import new_id
from agentgate.gateway.tools import ParsedOutput, ToolCall


def cut_short(finish: str | None) -> bool:
    """Whether a reply that ended with ``finish`` was ended before the model ended it: by its
    budget (``length``) or by an abort. Its items are ``incomplete`` and its hosted calls not run."""
    return finish in ("length", "abort")


def item_status(finish: str | None) -> str:
    """The status of the last output item of a reply that ended with ``finish``."""
    return "incomplete" if cut_short(finish) else "completed"


def statuses(count: int, last: str) -> list[str]:
    """The statuses of a reply's ``count`` items, ``last`` the last one's (:func:`item_status`): a
    cut ends the item being written, the last; the model closed those before it (so the streamed
    items, each done as the next opens, say the same)."""
    return ["completed"] * (count - 1) + [last] if count else []


def message_item(text: str, status: str = "completed", item_id: str | None = None) -> dict[str, Any]:
    return {
        "id": item_id or new_id("msg"),
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }


def user_message_item(text: str) -> dict[str, Any]:
    return {
        "id": new_id("msg"),
        "type": "message",
        "role": "user",
        "status": "completed",
        "content": [{"type": "input_text", "text": text}],
    }


def function_call_item(call: ToolCall, status: str = "completed", item_id: str | None = None) -> dict[str, Any]:
    return {
        "id": item_id or new_id("fc"),
        "type": "function_call",
        "status": status,
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments,
    }


def reasoning_item(text: str, status: str = "completed", item_id: str | None = None) -> dict[str, Any]:
    """A reasoning model's thinking: its whole text as one ``reasoning_text`` part, no summary
    (``reasoning.summary`` is accepted and writes none: docs/reasoning.md)."""
    return {
        "id": item_id or new_id("rs"),
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
        "status": status,
    }


CallNames = Mapping[str, tuple[str | None, str, bool]]
"""Offered tool name -> (namespace, the tool's own name, whether a custom tool): the calls that
come back as namespaced ``function_call`` or ``custom_tool_call`` items (``responses_api.client_tools``)."""


def flat_name(namespace: str | None, name: str) -> str:
    """The name a namespace's tool is offered to the model under (chat's names allow no dot)."""
    return f"{namespace}__{name}" if namespace else name


def custom_input(arguments: str) -> str:
    """A custom tool call's free-form input, from the arguments (``{"input": ...}``) the model wrote."""
    try:
        value = json.loads(arguments).get("input")
    except (ValueError, AttributeError):
        return arguments
    return value if isinstance(value, str) else arguments


def client_call_item(
    call: ToolCall, names: CallNames, status: str = "completed", item_id: str | None = None
) -> dict[str, Any]:
    """The output item of a call of a client tool: a ``function_call``, or a ``custom_tool_call``
    (its ``input``), with its ``namespace`` when it has one."""
    namespace, name, custom = names.get(call.name, (None, call.name, False))
    if custom:
        item = {"id": item_id or new_id("ctc"), "type": "custom_tool_call", "status": status, "call_id": call.id}
        item |= {"name": name, "input": custom_input(call.arguments)}
    else:
        item = function_call_item(ToolCall(call.id, name, call.arguments), status, item_id)
    if namespace:
        item["namespace"] = namespace
    return item


Sealing = Callable[[str], str]
"""Seals a reasoning item's text into its ``encrypted_content`` (``seal_reasoning`` of
``responses_api.reasoning_items`` with the deployment's sealer)."""


def sealed(item: dict[str, Any], seal: Sealing | None) -> dict[str, Any]:
    """``item`` as it goes out: a reasoning item with its ``encrypted_content`` when ``seal`` (the
    request's ``include`` asked for it), any other item as it is."""
    if seal is None or item.get("type") != "reasoning":
        return item
    text = "".join(part["text"] for part in item.get("content") or ())
    return {**item, "encrypted_content": seal(text)}


def output_items(
    parsed: ParsedOutput, status: str = "completed", names: CallNames | None = None
) -> list[dict[str, Any]]:
    """A reply's items: its reasoning first, then its message, then its calls (``names``: the
    offered client tools' namespaces and kinds); ``status``: the last one's (:func:`statuses`)."""
    makers: list[Callable[[str], dict[str, Any]]] = []
    if parsed.reasoning:
        makers.append(lambda mark: reasoning_item(parsed.reasoning or "", mark))
    if parsed.content:
        makers.append(lambda mark: message_item(parsed.content or "", mark))
    makers += [lambda mark, call=call: client_call_item(call, names or {}, mark) for call in parsed.tool_calls]
    return [make(mark) for make, mark in zip(makers, statuses(len(makers), status), strict=True)]


def chat_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """Function tools (as a response echoes them) in chat's shape."""
    keys = ("name", "description", "parameters", "strict")
    return [{"type": "function", "function": {k: t[k] for k in keys if t[k] is not None}} for t in tools] or None


def call_item(server_label: str, name: str, arguments: str = "", status: str = "in_progress") -> dict[str, Any]:
    """An ``mcp_call`` item: a call of an MCP tool the server runs."""
    return {
        "id": new_id("mcp"),
        "type": "mcp_call",
        "status": status,
        "server_label": server_label,
        "name": name,
        "arguments": arguments,
        "output": None,
        "error": None,
    }


def approval_request_item(server_label: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "id": new_id("mcpr"),
        "type": "mcp_approval_request",
        "server_label": server_label,
        "name": name,
        "arguments": arguments,
    }


def settle(item: dict[str, Any], output: str | None, error: dict[str, Any] | None) -> None:
    """Write a run call's ``output`` or ``error`` into its ``mcp_call`` item."""
    item.update(output=output, error=error, status="failed" if error is not None else "completed")


def error_text(error: dict[str, Any], prefix: str = "Error: ") -> str:
    """A call's error as the model reads it, in its tool message (after ``prefix``)."""
    if error.get("type") == "mcp_tool_execution_error":
        content = error.get("content") or []
        texts = [part.get("text", "") for part in content if isinstance(part, dict)]
        return prefix + ("\n".join(t for t in texts if t) or json.dumps(content))
    return prefix + str(error.get("message") or error.get("type"))


def result_message(call_id: str, output: str | None, error: dict[str, Any] | None) -> dict[str, Any]:
    """The tool message the model reads for a call."""
    return {"role": "tool", "tool_call_id": call_id, "content": output if error is None else error_text(error)}


def tool_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def assistant_message(output: list[dict[str, Any]]) -> dict[str, Any]:
    """The output items as the one assistant message a later turn replays."""
    texts, calls = [], []
    for item in output:
        if item["type"] == "message":
            texts.append("".join(part["text"] for part in item["content"]))
        elif item["type"] == "function_call":
            calls.append(tool_call(item["call_id"], flat_name(item.get("namespace"), item["name"]), item["arguments"]))
        elif item["type"] == "custom_tool_call":
            arguments = json.dumps({"input": item["input"]}, ensure_ascii=False)
            calls.append(tool_call(item["call_id"], flat_name(item.get("namespace"), item["name"]), arguments))
        elif item["type"] in ("mcp_call", "mcp_approval_request"):  # the server's calls: answered by item id
            calls.append(tool_call(item["id"], item["name"], item["arguments"]))
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
    if calls:
        message["tool_calls"] = calls
    return message


def round_messages(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The output items of one reply of the model as the messages a later turn replays: the
    assistant message, then the result of each MCP call the server ran (none if it has no items)."""
    if not output:
        return []
    results = [
        result_message(item["id"], item["output"], item["error"])
        for item in output
        if item["type"] == "mcp_call" and item["status"] in ("completed", "failed")
    ]
    return [assistant_message(output), *results]
