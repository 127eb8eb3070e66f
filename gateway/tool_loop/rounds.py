"""The server-run tool rounds of one request (a response with ``mcp`` tools, a Messages request
with ``mcp_servers``; the loop that drives them: :mod:`gateway.tool_loop.loop`): the tools
offered to the model, which calls run and which wait for approval, the items of a reply, the
engine request id of each reply, and the start of the model's next reply.

A round's reply ends the loop when it made no MCP call, called a client's function
(its function_call items go back to the client, as without MCP), made a call that waits for
approval (an ``mcp_approval_request`` item: the next request's ``mcp_approval_response``
continues), was cut by the output budget, or failed. After ``--max-tool-rounds`` rounds of
calls the model's next reply is generated with ``tool_choice: "none"``, so it answers. Each
reply's output budget is what the response's ``max_output_tokens`` has left.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from agentgate.gateway.api_types import response_items as it
from agentgate.gateway.api_types.openai import CompletionTokensDetails, PromptTokensDetails, Usage
from agentgate.gateway.chat import ChatRun
from agentgate.gateway.mcp import McpHost
from agentgate.gateway.mcp.calls import ToolCalls
from agentgate.gateway.mcp.toolset import McpToolset
from agentgate.gateway.tools import ParsedOutput

# (messages, tool_choice, max_tokens, request_id) -> the reply's chat turn, started
RoundStarter = Callable[[list[dict[str, Any]], Any, int | None, str], Awaitable[ChatRun]]
Watch = Callable[[Callable[[], Awaitable[None]]], Awaitable[bool]]  # runs a step; False: the client left


def round_id(request_id: str, round: int) -> str:
    """The engine request id of the request's reply after ``round`` rounds of calls: the first
    reply has the request's own id (what ``cancel`` and the traces name), each next one a suffix."""
    return request_id if round == 0 else f"{request_id}-r{round}"


def added_usage(a: Usage, b: Usage) -> Usage:
    """The usage of two replies together."""
    prompt, completion = a.prompt_tokens + b.prompt_tokens, a.completion_tokens + b.completion_tokens
    usage = Usage(prompt, completion, prompt + completion, PromptTokensDetails(a.cached_tokens + b.cached_tokens))
    if a.reasoning_tokens or b.reasoning_tokens:
        usage.completion_tokens_details = CompletionTokensDetails(a.reasoning_tokens + b.reasoning_tokens)
    return usage


async def close_reply(run: ChatRun) -> None:
    """End a reply's generation and close it (its lease, metrics, the program's turn)."""
    gen = run.generation
    await gen.aclose()
    gen.close()


async def run_reply(run: ChatRun, watch: Watch) -> bool:
    """Run a reply to its end (whole) under ``watch``, then close it; False: the client left."""
    try:
        return await watch(run.generation.collect)
    finally:
        await close_reply(run)


class McpRounds:
    """The server-run rounds of one request (see the module doc); ``request_id``: its own."""

    def __init__(
        self, host: McpHost, toolset: McpToolset, start: RoundStarter, max_tokens: int | None, request_id: str
    ) -> None:
        self.host = host
        self.toolset = toolset
        self.calls = ToolCalls(host.limits)
        self._start = start
        self.max_tokens = max_tokens  # the request's output budget (None: the server's)
        self.request_id = request_id
        self.rounds = 0  # rounds of calls run
        # items before the model's first reply: the tool lists, the calls approved
        self.opening: list[dict[str, Any]] = [server.list_item() for server in toolset.servers]

    @property
    def labels(self) -> dict[str, tuple[str, bool]]:
        """Tool name -> (its server's label, whether its calls wait for approval)."""
        return {name: (server.label, server.needs_approval(name)) for name, server in self.toolset.by_name.items()}

    async def run(self, item: dict[str, Any]) -> None:
        """Run the ``mcp_call`` item's call and write its output or error in it."""
        server = self.toolset.by_name[item["name"]]
        result = await self.calls.run(server.endpoint, item["name"], item["arguments"])
        it.settle(item, result.output, result.error)

    async def approved(self, item: dict[str, Any]) -> dict[str, Any]:
        """The ``mcp_call`` item of an approved ``mcp_approval_request`` item, run."""
        call = it.call_item(item["server_label"], item["name"], item["arguments"])
        call["approval_request_id"] = item["id"]
        if item["name"] in self.toolset.by_name:
            await self.run(call)
        else:
            message = f"the tool {item['name']!r} is not offered by this request's mcp tools"
            it.settle(call, None, {"type": "mcp_protocol_error", "code": -32602, "message": message})
        return call

    def continues(self, round_items: list[dict[str, Any]], finish: str | None, failed: bool) -> bool:
        """Whether the loop goes on after a round whose output items are ``round_items``."""
        kinds = {item["type"] for item in round_items}
        ended = failed or it.cut_short(finish) or bool(kinds & {"function_call", "mcp_approval_request"})
        return not ended and "mcp_call" in kinds

    async def start_next(self, conversation: list[dict[str, Any]], used_tokens: int) -> ChatRun:
        """Start the model's next reply to ``conversation`` (the round's reply and results in it),
        ``used_tokens`` of the response's output budget spent."""
        self.rounds += 1
        left = None if self.max_tokens is None else max(1, self.max_tokens - used_tokens)
        choice = "none" if self.rounds >= self.host.max_rounds else "auto"
        return await self._start(conversation, choice, left, round_id(self.request_id, self.rounds))


def round_items(parsed: ParsedOutput, labels: dict[str, tuple[str, bool]], status: str) -> list[dict[str, Any]]:
    """A whole reply's output items: its text, and each call as a function_call, an mcp_call
    (to run) or an mcp_approval_request; ``status``: the last item's (the reply's
    :func:`~gateway.api_types.response_items.item_status`), the text's and function calls' before
    it completed (:func:`~gateway.api_types.response_items.statuses`)."""
    marks = it.statuses(bool(parsed.content) + len(parsed.tool_calls), status)
    items = [it.message_item(parsed.content, marks[0])] if parsed.content else []
    for call, mark in zip(parsed.tool_calls, marks[len(items) :], strict=True):
        server = labels.get(call.name)
        if server is None:
            items.append(it.function_call_item(call, mark))
        elif server[1]:
            items.append(it.approval_request_item(server[0], call.name, call.arguments))
        else:
            items.append(it.call_item(server[0], call.name, call.arguments))
    return items
