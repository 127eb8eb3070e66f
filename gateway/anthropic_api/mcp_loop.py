"""The tool loop of a Messages request with ``mcp_servers`` (:mod:`gateway.anthropic_api.mcp_connector`):
round after round as in the Responses API's (:mod:`gateway.responses_api.tool_loop`), each
reply a turn of the request's program, the model's MCP calls run by the server and shown as
``mcp_tool_use`` + ``mcp_tool_result`` blocks, whole (:meth:`ConnectorLoop.collect`) or
streamed (:meth:`ConnectorLoop.stream`, the bytes of :class:`~gateway.formats.anthropic.MessagesStream`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec

from agentgate.engine.errors import EngineError
from agentgate.gateway.anthropic_api.mcp_connector import open_connector, result_block, use_block
from agentgate.gateway.anthropic_api.translate import to_chat
from agentgate.gateway.anthropic_api.types import Message, MessagesRequest
from agentgate.gateway.api_types.openai import ChatMessage, Usage
from agentgate.gateway.app_state import GatewayState
from agentgate.gateway.chat import ChatRun, start_chat
from agentgate.gateway.context import RequestContext
from agentgate.gateway.errors import GatewayError
from agentgate.gateway.formats.anthropic import MessagesStream, content_blocks, message_usage, stop_reason
from agentgate.gateway.responses_api import items as it
from agentgate.gateway.responses_api.mcp_rounds import (
    McpRounds,
    Watch,
    added_usage,
    close_reply,
    round_items,
    run_reply,
)
from agentgate.gateway.tools import ParsedOutput


class ConnectorLoop:
    """One Messages request's rounds: the running reply, the conversation, the usage so far."""

    def __init__(self, rounds: McpRounds, run: ChatRun, conversation: list[dict[str, Any]]) -> None:
        self.rounds = rounds
        self.run = run
        self.conversation = conversation
        self.earlier = Usage(0, 0, 0)

    @property
    def usage(self) -> Usage:
        return added_usage(self.earlier, self.run.generation.usage)

    async def close_round(self) -> None:
        """End the running reply's generation and close it (its lease, metrics, the program's turn)."""
        await close_reply(self.run)

    async def _next(self, items: list[dict[str, Any]]) -> None:
        self.conversation += it.round_messages(items)
        earlier = self.usage
        self.run = await self.rounds.start_next(self.conversation, earlier.completion_tokens)
        self.earlier = earlier

    async def collect(self, message: Message, watch: Watch) -> bool:
        """Run every round, whole, into ``message``; False: the client left. Engine errors are raised."""
        blocks: list[dict[str, Any]] = []
        while True:
            gen = self.run.generation
            if not await run_reply(self.run, watch):
                return False
            if gen.error is not None:
                raise gen.error
            choice = gen.choices[0]
            parsed, finish = choice.reply, choice.reply_finish
            items = round_items(parsed, self.rounds.labels, "completed")
            go_on = self.rounds.continues(items, finish, False)
            for item in items:
                if item["type"] != "mcp_call":
                    continue
                if finish != "length" and not await watch(lambda item=item: self.rounds.run(item)):
                    return False
            blocks += _blocks(parsed, items, finish != "length")
            if not go_on:
                break
            await self._next(items)
        message.content = blocks
        message.stop_reason = stop_reason(finish, choice.matched_stop)
        message.stop_sequence = choice.matched_stop if message.stop_reason == "stop_sequence" else None
        message.usage = message_usage(self.usage)
        return True

    def format(self, message: Message) -> MessagesStream:
        """The stream's format, its MCP calls as mcp_tool_use blocks."""
        return MessagesStream(message, {name: label for name, (label, _) in self.rounds.labels.items()})

    async def stream(self, fmt: MessagesStream) -> AsyncIterator[bytes]:
        """The reply's events as SSE bytes, every round's blocks in one message."""
        yield fmt.opening()
        while True:
            gen = self.run.generation
            try:
                async for events in gen.events(0):
                    data = b"".join(chunk for event in events if (chunk := fmt.chunk(0, event)) is not None)
                    if data:
                        yield data
            except EngineError as exc:
                yield fmt.error(gen.record_error(exc))
                return
            finally:
                await self.close_round()
            items, finish = fmt.round_end()
            go_on = self.rounds.continues(items, finish, False)
            for item in items:
                if item["type"] == "mcp_call" and finish != "length":
                    await self.rounds.run(item)
                    yield fmt.result(result_block(item))
            if not go_on:
                break
            try:
                await self._next(items)
            except (GatewayError, EngineError) as exc:  # refused (a full queue, results past the context)
                yield fmt.error(exc)
                return
            fmt.next_round()
        yield await fmt.closing(self.usage)


def _blocks(parsed: ParsedOutput, items: list[dict[str, Any]], ran: bool) -> list[dict[str, Any]]:
    """A whole round's content blocks: the text and client calls as without MCP, and each MCP
    call as its use block, then its result once run."""
    out = [block for block in content_blocks(ParsedOutput(parsed.content)) if block["type"] == "text"]
    calls = iter(parsed.tool_calls)
    for item in items:
        if item["type"] == "mcp_call":
            next(calls)
            out.append(use_block(item))
            if ran:
                out.append(result_block(item))
        elif item["type"] == "function_call":
            out += content_blocks(ParsedOutput(None, [next(calls)]))
    return out


async def start_connector(
    gw: GatewayState,
    body: MessagesRequest,
    *,
    request_id: str,
    arrival: float,
    context: RequestContext,
    **sampling: Any,
) -> ConnectorLoop:
    """List the request's MCP servers and start the model's first reply with their tools."""
    toolset = await open_connector(body.mcp_servers or [], gw.mcp)
    offered = toolset.offer({str(tool.get("name")) for tool in body.tools or ()})
    base = to_chat(body, extra_tools=it.chat_tools(offered), **sampling)
    conversation = msgspec.to_builtins(base.messages)
    started = 0

    async def start(messages: list[dict[str, Any]], tool_choice: Any, max_tokens: int | None) -> ChatRun:
        nonlocal started, context
        round_id = request_id if started == 0 else f"{request_id}-r{started}"
        started += 1
        chat = msgspec.structs.replace(
            base,
            messages=msgspec.convert(messages, list[ChatMessage]),
            tool_choice=tool_choice,
            max_tokens=max_tokens,
        )
        run = await start_chat(
            gw.model, gw.dispatcher, chat, turns=gw.turn_tokens, request_id=round_id, arrival=arrival, context=context
        )
        context = run.generation.context  # admitted: the next rounds are not charged again
        return run

    rounds = McpRounds(gw.mcp, toolset, start, body.max_tokens)
    run = await start(conversation, base.tool_choice, body.max_tokens)
    return ConnectorLoop(rounds, run, conversation)
