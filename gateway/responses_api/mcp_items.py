"""The Responses API's MCP items (``mcp_list_tools``, ``mcp_call``, ``mcp_approval_request``,
``mcp_approval_response``) read back from a request's input (their shapes, and what the model
reads of them: :mod:`gateway.api_types.response_items`).

A client that sends its output items back as input (instead of ``previous_response_id``)
sends these too: ``mcp_list_tools`` is skipped, an ``mcp_call`` becomes the call and its
result, an ``mcp_approval_request`` the call awaiting its answer, and an
``mcp_approval_response`` answers its request (:func:`answer_approvals`: the call is run
before the model's first reply, or its refusal read back).
"""

from __future__ import annotations

from typing import Any

from agentgate.gateway.api_types.response_items import result_message, tool_call
from agentgate.gateway.errors import BadRequestError
from agentgate.gateway.tool_loop.rounds import McpRounds

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


async def answer_approvals(
    rounds: McpRounds, input: Any, previous_output: list[dict[str, Any]], conversation: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``conversation`` with the result of each call the input's ``mcp_approval_response`` items
    answer (run when approved; the model reads a refusal), after the call; their items open the
    output. 400 for an answer to no approval request of the chain or input."""
    answers = approval_responses(input)
    if not answers:
        return conversation
    requests = {
        item["id"]: item
        for item in previous_output + [i for i in input if isinstance(i, dict)]
        if item.get("type") == "mcp_approval_request"
    }
    out = list(conversation)
    for request_id, (approve, index) in answers.items():
        request = requests.get(request_id)
        if request is None:
            raise BadRequestError(
                f"no mcp_approval_request with id {request_id!r} in this chain",
                param=f"input[{index}].approval_request_id",
            )
        if approve:
            call = await rounds.approved(request)
            rounds.opening.append(call)
            result = result_message(request_id, call["output"], call["error"])
        else:
            result = result_message(request_id, None, {"type": "denied", "message": "the user denied this call"})
        at = next((k for k, m in enumerate(out) for c in m.get("tool_calls") or () if c["id"] == request_id), -1)
        at += 1
        while 0 < at < len(out) and out[at]["role"] == "tool":  # after the results of its sibling calls
            at += 1
        out.insert(at if at > 0 else len(out), result)
    return out
