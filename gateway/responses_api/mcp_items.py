"""The Responses API's MCP items (``mcp_list_tools``, ``mcp_call``, ``mcp_approval_request``,
``mcp_approval_response``) read back from a request's input (their shapes, and what the model
reads of them: :mod:`gateway.api_types.response_items`).

A client that sends its output items back as input (instead of ``previous_response_id``)
sends these too: ``mcp_list_tools`` is skipped, an ``mcp_call`` becomes the call and its
result, an ``mcp_approval_request`` the call awaiting its answer, and an
``mcp_approval_response`` is read by the tool loop (:mod:`gateway.tool_loop`).
"""

from __future__ import annotations

from typing import Any

from agentgate.gateway.api_types.response_items import result_message, tool_call
from agentgate.gateway.errors import BadRequestError

MCP_INPUT_ITEMS = frozenset({"mcp_list_tools", "mcp_call", "mcp_approval_request", "mcp_approval_response"})


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
