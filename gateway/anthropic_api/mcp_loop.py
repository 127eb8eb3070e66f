"""The Messages API's rendering of the one tool loop (:mod:`gateway.tool_loop`), for a request
with ``mcp_servers`` (:mod:`gateway.anthropic_api.mcp_connector`): each reply a turn of the
request's program, the model's MCP calls run by the server and shown as ``mcp_tool_use`` +
``mcp_tool_result`` blocks, whole (:func:`collect_message`) or streamed (:func:`stream_message`,
the bytes of :class:`~gateway.formats.anthropic.MessagesStream`). A call the loop did not run
(the reply was cut by ``max_tokens``) shows its use block and no result.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import msgspec

from agentgate.gateway.anthropic_api.mcp_connector import open_connector, result_block, use_block
from agentgate.gateway.anthropic_api.translate import to_chat
from agentgate.gateway.api_types.anthropic import Message, MessagesRequest
from agentgate.gateway.api_types.openai import ChatMessage
from agentgate.gateway.api_types.response_items import chat_tools
from agentgate.gateway.chat import ChatCore, ChatRun
from agentgate.gateway.context import RequestContext
from agentgate.gateway.events import ChoiceEvent
from agentgate.gateway.formats.anthropic import MessagesStream, content_blocks, message_usage, stop_reason
from agentgate.gateway.mcp import McpHost
from agentgate.gateway.state.sealing import Sealer
from agentgate.gateway.tool_loop.loop import ToolLoop
from agentgate.gateway.tool_loop.rounds import McpRounds, Watch, round_id
from agentgate.gateway.tools import ParsedOutput

logger = logging.getLogger(__name__)
RAN = ("completed", "failed")  # an mcp_call item's statuses once the server ran it


class WholeMessage:
    """The loop's whole reply as one message's content blocks (a ``WholeRendering``)."""

    background = False  # a Messages request always has its client waiting

    def __init__(self, loop: ToolLoop, message: Message) -> None:
        self.loop = loop
        self.message = message
        self.blocks: list[dict[str, Any]] = []

    def round(self, parsed: ParsedOutput, items: list[dict[str, Any]]) -> None:
        """A round's blocks: the text and client calls as without MCP, and each MCP call as its
        use block, then its result once run."""
        out = [block for block in content_blocks(ParsedOutput(parsed.content)) if block["type"] == "text"]
        calls = iter(parsed.tool_calls)
        for item in items:
            if item["type"] == "mcp_call":
                next(calls)
                out.append(use_block(item))
                if item["status"] in RAN:
                    out.append(result_block(item))
            elif item["type"] == "function_call":
                out += content_blocks(ParsedOutput(None, [next(calls)]))
        self.blocks += out

    async def refused(self, exc: BaseException) -> None:
        """After calls ran: the message holds every block so far and stops on ``pause_turn``
        (Anthropic's "send it back as it is to go on"; the calls are not run again), never an
        error that hides what ran."""
        logger.warning("a message's tool loop stopped after its MCP calls ran: %s", exc)
        message = self.message
        message.content = self.blocks
        message.stop_reason, message.stop_sequence = "pause_turn", None
        message.usage = message_usage(self.loop.usage)

    async def between(self) -> bool:
        return True

    async def finish(self, parsed: ParsedOutput, finish: str | None, matched_stop: str | None) -> None:
        message = self.message
        message.content = self.blocks
        message.stop_reason = stop_reason(finish, matched_stop)
        message.stop_sequence = matched_stop if message.stop_reason == "stop_sequence" else None
        message.usage = message_usage(self.loop.usage)


class StreamedMessage:
    """The loop's stream as one message's SSE bytes (a ``StreamRendering``)."""

    def __init__(self, fmt: MessagesStream) -> None:
        self.fmt = fmt

    def opening(self) -> bytes:
        return self.fmt.opening()

    def chunk(self, events: Sequence[ChoiceEvent]) -> bytes:
        return b"".join(chunk for event in events if (chunk := self.fmt.chunk(0, event)) is not None)

    def round_end(self) -> tuple[bytes, list[dict[str, Any]], str | None]:
        items, finish = self.fmt.round_end()
        return b"", items, finish  # the last block stops with the next event written

    def settled(self, item: dict[str, Any]) -> bytes:
        return self.fmt.result(result_block(item)) if item["status"] in RAN else b""

    async def error(self, exc: BaseException) -> bytes:
        return self.fmt.error(exc)

    def next_round(self) -> None:
        self.fmt.next_round()


def message_format(loop: ToolLoop, message: Message, sealer: Sealer) -> MessagesStream:
    """The stream's format, the loop's MCP calls as mcp_tool_use blocks."""
    labels = {name: label for name, (label, _) in loop.rounds.labels.items()}
    return MessagesStream(message, sealer, labels)


async def collect_message(loop: ToolLoop, message: Message, watch: Watch) -> bool:
    """Run every round, whole, into ``message``; False: the client left. Engine errors before any
    call ran are raised; after, the message stops on ``pause_turn`` (:meth:`WholeMessage.refused`)."""
    return await loop.collect(WholeMessage(loop, message), watch)


async def stream_message(loop: ToolLoop, fmt: MessagesStream) -> AsyncIterator[bytes]:
    """The reply's events as SSE bytes, every round's blocks in one message."""
    async for data in loop.stream(StreamedMessage(fmt)):
        yield data
    if loop.ended:
        yield fmt.closing(loop.usage)


async def start_connector(
    core: ChatCore,
    host: McpHost,
    body: MessagesRequest,
    *,
    request_id: str,
    arrival: float,
    context: RequestContext,
    **sampling: Any,
) -> ToolLoop:
    """List the request's MCP servers (``host``'s allowed ones) and start the model's first reply
    with their tools."""
    toolset = await open_connector(body.mcp_servers or [], host)
    offered = toolset.offer({str(tool.get("name")) for tool in body.tools or ()})
    base = to_chat(body, core.sealer, extra_tools=chat_tools(offered), **sampling)
    conversation = msgspec.to_builtins(base.messages)

    async def start(messages: list[dict[str, Any]], tool_choice: Any, max_tokens: int | None, reply_id: str) -> ChatRun:
        nonlocal context
        chat = msgspec.structs.replace(
            base,
            messages=msgspec.convert(messages, list[ChatMessage]),
            tool_choice=tool_choice,
            max_tokens=max_tokens,
        )
        run = await core.start(chat, request_id=reply_id, arrival=arrival, context=context)
        context = run.generation.context  # admitted: the next rounds are not charged again
        return run

    rounds = McpRounds(host, toolset, start, body.max_tokens, request_id)
    run = await start(conversation, base.tool_choice, body.max_tokens, round_id(request_id, 0))
    return ToolLoop(rounds, run, conversation)
