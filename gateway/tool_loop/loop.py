"""The one tool loop of the Responses API's ``mcp`` tools and the Messages API's MCP connector:
the server runs the model's calls of MCP tools and feeds their results back in the same
response (or message), round after round.

    round:    the model's reply (its text, calls of client functions, calls of MCP tools);
              each MCP call is run (gateway.mcp.calls): its mcp_call item gets its output or error
    next round while the reply made MCP calls and nothing else ends it
              (gateway.tool_loop.rounds says what ends it)

Each round is a chat turn of the request's program (``gateway.chat.start_chat``), its messages
the previous round's plus the reply and the results, and the reply is read back from its own
tokens (``gateway.programs.turn_tokens``). The engine is told that the server runs the round's
tools (``Generation.server_tools``: its pin is held for exactly as long as they run, not for a
TTL guessed from client tool gaps): the next round, sent as they return, claims the pin and is
admitted first; where the loop stops instead, ``Generation.tools_returned`` releases it. The
loop keeps every round's items (the Responses API's output items, whichever API renders them)
in :attr:`ToolLoop.output`.

Each API renders the loop its way: whole (:meth:`ToolLoop.collect`, with a
:class:`WholeRendering`) or streamed (:meth:`ToolLoop.stream`, with a :class:`StreamRendering`
of event lists or SSE bytes). A call the loop does not run because the reply was cut by its
output budget is ``incomplete``; a run call is ``completed`` or ``failed``. Once a hosted call
has run, the loop never ends in an HTTP error that hides it: a next reply the gateway cannot
start (its queue full, the results past the context) or a round the engine fails is the
rendering's to record with every item so far (:meth:`WholeRendering.refused`: the Responses
API's ``failed`` response, stored; the Messages API's ``pause_turn``), and ends a stream with the
API's error event after them (the Responses API's stored first). Before any call ran, the
error answers a client that waits whole.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol, TypeVar

from agentgate.engine.errors import EngineError
from agentgate.gateway.api_types.openai import Usage
from agentgate.gateway.api_types.response_items import cut_short, item_status, round_messages
from agentgate.gateway.chat import ChatRun
from agentgate.gateway.errors import GatewayError
from agentgate.gateway.events import ChoiceEvent
from agentgate.gateway.tool_loop.rounds import McpRounds, Watch, added_usage, close_reply, round_items, run_reply
from agentgate.gateway.tools import ParsedOutput

T = TypeVar("T")
Item = dict[str, Any]


class WholeRendering(Protocol):
    """An API's whole reply of a loop. ``background``: nobody waits (errors are recorded, not raised)."""

    background: bool

    def round(self, parsed: ParsedOutput, items: list[Item]) -> None:
        """A round's reply, read whole, and its items (its MCP calls run or left)."""

    async def refused(self, exc: BaseException) -> None:
        """The loop cannot go on (``exc``: why) and its reply says so with every item so far: a
        hosted call ran (or nobody waits), so an HTTP error would hide what ran."""

    async def between(self) -> bool:
        """The next reply started; False: the request was cancelled meanwhile (the loop stops)."""

    async def finish(self, parsed: ParsedOutput, finish: str | None, matched_stop: str | None) -> None:
        """The last round's reply ended the loop."""


class StreamRendering(Protocol[T]):
    """An API's stream of a loop: each method gives what to send (empty: nothing)."""

    def opening(self) -> T: ...
    def chunk(self, events: Sequence[ChoiceEvent]) -> T: ...
    def round_end(self) -> tuple[T, list[Item], str | None]:
        """What closes the reply, its items and its finish reason."""

    def settled(self, item: Item) -> T:
        """An ``mcp_call`` item, run (or left ``incomplete``)."""

    async def error(self, exc: BaseException) -> T:
        """The stream's error events: the loop cannot go on (``exc``: why); what the API keeps of
        the reply (the Responses API's stored response) recorded first."""

    def next_round(self) -> None: ...


class ToolLoop:
    """One request's rounds: the reply running, the conversation, every round's items, the
    usage so far."""

    def __init__(self, rounds: McpRounds, run: ChatRun, conversation: list[dict[str, Any]]) -> None:
        self.rounds = rounds
        self.run = run
        self.conversation = conversation
        self.output: list[Item] = list(rounds.opening)
        self.round_start = len(self.output)  # the first item of the reply running now
        self._serve(run)
        self.earlier: Usage | None = None  # the usage of the earlier replies
        self.ended = False  # a reply ended the loop (not an error): the API writes its close

    @property
    def usage(self) -> Usage:
        """Every reply's usage so far."""
        usage = self.run.generation.usage
        return usage if self.earlier is None else added_usage(self.earlier, usage)

    async def close_round(self) -> None:
        """End the running reply's generation and close it (its lease, metrics, the program's turn)."""
        await close_reply(self.run)

    def _serve(self, run: ChatRun) -> None:
        """Say which tools the server runs for ``run``'s turn and for at most how long (what is
        left of the response's tool time, and a second for the round trip)."""
        gen = run.generation
        gen.server_tools = frozenset(name for name, (_, approval) in self.rounds.labels.items() if not approval)
        calls = self.rounds.calls
        gen.server_hold = max(calls.limits.budget - calls.spent, 0.0) + 1.0

    async def _next(self, items: list[Item]) -> None:
        """The server ran the calls of the reply whose items are ``items``: start the next reply
        (it claims the pin the engine held for them)."""
        self.conversation += round_messages(items)
        self.round_start = len(self.output)
        earlier = self.usage
        run = await self.rounds.start_next(self.conversation, earlier.completion_tokens)
        self.run.generation.server_held = False
        self.run = run
        self._serve(run)
        self.earlier = earlier

    @property
    def ran_calls(self) -> bool:
        """Whether the server has run a hosted call for this request (an approved one included)."""
        return any(item["type"] == "mcp_call" and item["status"] in ("completed", "failed") for item in self.output)

    def _stopped(self) -> None:
        """The loop ends here: a pin held for the last round's server-run tools goes."""
        self.run.generation.tools_returned()

    async def _settle(self, item: Item, finish: str | None, watch: Watch | None = None) -> bool:
        """Run an ``mcp_call`` item's call, unless the reply was cut (then it is ``incomplete``);
        False: the client left (``watch`` said so)."""
        if cut_short(finish):
            item["status"] = "incomplete"
            return True
        if watch is None:
            await self.rounds.run(item)
            return True
        return await watch(lambda: self.rounds.run(item))

    async def collect(self, whole: WholeRendering, watch: Watch) -> bool:
        """Run every round, whole; False: the client left (``watch`` said so). An engine error is
        raised, unless nobody waits (``whole.background``)."""
        try:
            return await self._collect(whole, watch)
        finally:
            self._stopped()

    async def _collect(self, whole: WholeRendering, watch: Watch) -> bool:
        while True:
            gen = self.run.generation
            if not await run_reply(self.run, watch):
                return False
            if gen.error is not None and not whole.background:
                if not self.ran_calls:  # nothing ran: the error answers
                    raise gen.error
                await whole.refused(gen.error)
                return True
            choice = gen.choices[0]
            parsed, finish = choice.reply, choice.reply_finish
            items = round_items(parsed, self.rounds.labels, item_status(finish))
            self.output += items
            go_on = self.rounds.continues(items, finish, gen.error is not None)
            for item in _calls(items):
                if not await self._settle(item, finish, watch):
                    return False
            whole.round(parsed, items)
            if not go_on:
                break
            try:
                await self._next(items)
            except (GatewayError, EngineError) as exc:  # refused (a full queue, results past the context)
                await whole.refused(exc)  # after calls ran: the reply holds them, never an HTTP error
                return True
            if not await whole.between():  # cancelled meanwhile: its reply too
                await self.close_round()
                return True
        self.ended = True
        await whole.finish(parsed, finish, choice.matched_stop)
        return True

    async def stream(self, out: StreamRendering[T]) -> AsyncIterator[T]:
        """The rounds' events, as ``out`` renders them, up to the last reply's end (then
        :attr:`ended`; the API writes its close). The edge closes the round running when the
        client leaves."""
        try:
            async for part in self._stream(out):
                yield part
        finally:
            self._stopped()

    async def _stream(self, out: StreamRendering[T]) -> AsyncIterator[T]:
        yield out.opening()
        while True:
            gen = self.run.generation
            try:
                async for events in gen.events(0):
                    if chunk := out.chunk(events):
                        yield chunk
            except EngineError as exc:
                yield await out.error(gen.record_error(exc))
                return
            finally:
                await self.close_round()
            closed, items, finish = out.round_end()
            if closed:
                yield closed
            self.output += items
            go_on = self.rounds.continues(items, finish, gen.error is not None)
            for item in _calls(items):
                await self._settle(item, finish)
                if settled := out.settled(item):
                    yield settled
            if not go_on:
                break
            try:
                await self._next(items)
            except (GatewayError, EngineError) as exc:  # refused: the stream says why
                yield await out.error(exc)
                return
            out.next_round()
        self.ended = True


def _calls(items: list[Item]) -> list[Item]:
    return [item for item in items if item["type"] == "mcp_call"]
