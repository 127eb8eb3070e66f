"""A turn's run, as the Responses API renders it: streamed as event lists (:func:`turn_events`,
which both transports send: SSE frames them, the WebSocket mode sends each as a message), or
whole (:func:`collect_rounds`, a response whose ``mcp`` tools the server runs).

The response is finished and stored in Redis between the last item's events and the final
one (:meth:`~gateway.responses_api.turn.Turn.closing_events`), so a client that reads
``response.completed`` can chain on it from any replica at once: the route saves, never the
format. With ``mcp`` tools the rounds come from the one tool loop (:mod:`gateway.tool_loop`),
rendered here as the Responses API's items and events.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from agentgate.gateway.events import ChoiceEvent
from agentgate.gateway.formats.responses import ErrorFields, Event, ResponseEvents, sse_error_fields
from agentgate.gateway.responses_api.turn import Turn
from agentgate.gateway.tool_loop.rounds import Watch
from agentgate.gateway.tools import ParsedOutput


class StreamedResponse:
    """The tool loop's stream as the Responses API's events (a ``StreamRendering``)."""

    def __init__(self, turn: Turn, events: ResponseEvents) -> None:
        self.turn = turn
        self.events = events
        self.start = 0  # the first output item of the reply running now

    def opening(self) -> list[Event]:
        """``response.created`` and ``in_progress``, then the items known before the first reply
        (each server's ``mcp_list_tools``, the calls an approval ran)."""
        events = self.events
        out = events.opening()
        assert self.turn.loop is not None
        for item in self.turn.loop.rounds.opening:
            progress = "response.mcp_list_tools" if item["type"] == "mcp_list_tools" else "response.mcp_call"
            out += events.whole_item(item, progress)
        self.start = len(events.output)
        return out

    def chunk(self, outputs: Sequence[ChoiceEvent]) -> list[Event]:
        return [event for output in outputs for event in self.events.chunk(output)]

    def round_end(self) -> tuple[list[Event], list[dict[str, Any]], str | None]:
        closed = self.events.ending()
        items = self.events.output[self.start :]
        self.start = len(self.events.output)
        return closed, items, self.events.finish_reason

    def settled(self, item: dict[str, Any]) -> list[Event]:
        return self.events.settled(item)

    async def error(self, exc: BaseException) -> list[Event]:
        """The error event and ``response.failed``, the response stored failed with every item so
        far first (a client that reads it can retrieve what ran)."""
        assert self.turn.loop is not None
        await self.turn.fail_keeping(exc, self.turn.loop.output)
        return self.events.error(exc)  # response.failed as stored

    def next_round(self) -> None:
        self.events.next_round()


class WholeResponse:
    """The tool loop's whole response (a ``WholeRendering``): its output items as they come, and,
    in the background, the response stored after each round."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.background = turn.response.background

    def round(self, parsed: ParsedOutput, items: list[dict[str, Any]]) -> None:
        assert self.turn.loop is not None
        self.turn.response.output = list(self.turn.loop.output)

    async def refused(self, exc: BaseException) -> None:
        """The response ``failed`` with ``exc``, its items so far kept, and stored."""
        assert self.turn.loop is not None
        await self.turn.fail_keeping(exc, self.turn.loop.output)

    async def between(self) -> bool:
        return not self.background or await self.turn.save()

    async def finish(self, parsed: ParsedOutput, finish: str | None, matched_stop: str | None) -> None:
        assert self.turn.loop is not None
        self.turn.finish(parsed, finish, output=self.turn.loop.output)
        await self.turn.save()


async def collect_rounds(turn: Turn, watch: Watch) -> bool:
    """Run a response's tool loop to its end, whole; the response finished and stored (``failed``
    with its items where the loop could not go on after a call ran). False: the client left. An
    engine error before any call ran is raised, unless nobody waits (a background response)."""
    assert turn.loop is not None
    return await turn.loop.collect(WholeResponse(turn), watch)


async def turn_events(turn: Turn, error_fields: ErrorFields = sse_error_fields) -> AsyncIterator[list[Event]]:
    """The turn's events, batch by batch, up to its final one (the response finished and stored
    just before it); ``error_fields``: the transport's error event. A warm-up's output is not
    sent. Each reply is closed before the last event; the edge closes the one running when
    the client leaves (:meth:`~gateway.responses_api.turn.Turn.close_round`)."""
    events = turn.events(error_fields)
    if turn.loop is not None:
        async for batch in turn.loop.stream(StreamedResponse(turn, events)):
            yield batch
        if turn.loop.ended:
            yield await turn.closing_events(events)
        return
    gen = turn.run.generation
    yield events.opening()
    try:
        async for outputs in gen.events(0):
            batch = [event for output in (() if turn.warmup else outputs) for event in events.chunk(output)]
            if batch:
                yield batch
        tail = await turn.closing_events(events)
    except Exception as exc:  # whatever it is, the stream ends with an error event
        tail = events.error(gen.failed(exc))
    finally:
        await turn.close_round()
    yield tail
