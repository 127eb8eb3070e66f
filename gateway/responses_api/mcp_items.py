"""The Responses API's MCP items (``mcp_list_tools``, ``mcp_call``, ``mcp_approval_request``,
``mcp_approval_response``), in the shapes of the openai SDK's types, and what the model reads
of them: a call is an assistant tool call, its output (or error) the tool's message.

A client that sends its output items back as input (instead of ``previous_response_id``)
sends these too: ``mcp_list_tools`` is skipped, an ``mcp_call`` becomes the call and its
result, an ``mcp_approval_request`` the call awaiting its answer, and an
``mcp_approval_response`` is read by the tool loop (:mod:`gateway.responses_api.tool_loop`).
"""

from __future__ import annotations

import json
from typing import Any

from agentgate.gateway.errors import BadRequestError
from agentgate.gateway.translation import new_id

MCP_INPUT_ITEMS = frozenset({"mcp_list_tools", "mcp_call", "mcp_approval_request", "mcp_approval_response"})


def call_item(server_label: str, name: str, arguments: str = "", status: str = "in_progress") -> dict[str, Any]:
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


def _string(item: dict[str, Any], key: str, param: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise BadRequestError(f"`{key}` must be a string", param=f"{param}.{key}")
    return value


def input_item_messages(item: dict[str, Any], param: str) -> list[dict[str, Any]]:
    """The chat messages of an MCP input item (see the module doc)."""
    kind = item["type"]
    if kind in ("mcp_list_tools", "mcp_approval_response"):
        return []
    call_id = _string(item, "id", param)
    call = tool_call(call_id, _string(item, "name", param), _string(item, "arguments", param))
    messages = [{"role": "assistant", "content": "", "tool_calls": [call]}]
    if kind == "mcp_call":
        error = item.get("error")
        output = item.get("output")
        messages.append(result_message(call_id, output if isinstance(output, str) else "", error or None))
    return messages


def approval_responses(input: str | list[dict[str, Any]] | None) -> dict[str, tuple[bool, int]]:
    """The ``mcp_approval_response`` items of ``input``: approval request id -> (approve, index)."""
    out: dict[str, tuple[bool, int]] = {}
    for i, item in enumerate(input if isinstance(input, list) else ()):
        if isinstance(item, dict) and item.get("type") == "mcp_approval_response":
            param = f"input[{i}]"
            request_id = _string(item, "approval_request_id", param)
            approve = item.get("approve")
            if not isinstance(approve, bool):
                raise BadRequestError("`approve` must be a boolean", param=f"{param}.approve")
            out[request_id] = (approve, i)
    return out
