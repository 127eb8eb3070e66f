"""The tool loop of a response with ``mcp`` tools: the server runs the model's calls of MCP
tools and feeds their results back in the same response, round after round.

    opening:  an mcp_list_tools item per server (and the calls an mcp_approval_response approved)
    round:    the model's reply (its text, calls of client functions, calls of MCP tools)
              each MCP call is run (gateway.mcp.calls): an mcp_call item with output or error
    next round while the reply made MCP calls and nothing else ends it
              (gateway.responses_api.mcp_rounds says what ends it)

Each round is a chat turn of the response's program (``gateway.chat.start_chat``), its
messages the previous round's plus the reply and the results, so the engine keeps the
conversation's KV between rounds as between a client's turns (the reply ended in tool calls),
and the reply is read back from its own tokens (``gateway.programs.turn_tokens``).

The edge drives it: :func:`collect` (whole, or in the background) with a ``watch`` that
runs a step while watching the client, :func:`stream` (SSE and WebSocket) as event lists.
A next reply the gateway cannot start (its queue full, the results past the context) fails
the response: an HTTP error when the client waits, a ``failed`` response in the background,
an ``error`` event then ``response.failed`` on a stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from agentgate.engine.errors import EngineError
from agentgate.gateway.errors import GatewayError
from agentgate.gateway.formats.responses import ErrorFields, Event
from agentgate.gateway.responses_api.mcp_rounds import Watch, round_items, run_reply
from agentgate.gateway.responses_api.turn import Turn


async def collect(turn: Turn, watch: Watch) -> bool:
    """Run the loop to its end, whole; the response finished and stored. False: the client left
    (``watch`` said so). An engine error is raised, unless nobody waits (a background response)."""
    rounds = turn.mcp
    assert rounds is not None
    output = list(rounds.opening)
    while True:
        gen = turn.run.generation
        if not await run_reply(turn.run, watch):
            return False
        if gen.error is not None and not turn.response.background:
            raise gen.error
        choice = gen.choices[0]
        parsed, finish = choice.reply, choice.reply_finish
        status = "incomplete" if finish == "length" else "completed"
        items = round_items(parsed, rounds.labels, status)
        output += items
        turn.response.output = output
        calls = [item for item in items if item["type"] == "mcp_call"]
        go_on = rounds.continues(items, finish, gen.error is not None)
        for item in calls:
            if go_on or finish != "length":
                if not await watch(lambda item=item: rounds.run(item)):
                    return False
            else:
                item["status"] = "incomplete"
        if not go_on:
            break
        try:
            await turn.next_round(items, len(output))
        except (GatewayError, EngineError) as exc:  # refused (a full queue, a prompt past the context)
            if not turn.response.background:
                raise
            turn.fail(exc)
            await turn.save()
            return True
        if turn.response.background and not await turn.save():  # cancelled meanwhile: its reply too
            await turn.close_round()
            return True
    turn.finish(parsed, finish, output=output)
    await turn.save()
    return True


async def stream(turn: Turn, error_fields: ErrorFields) -> AsyncIterator[list[Event]]:
    """The response's events, round after round, up to its final one (the response finished
    and stored just before). The edge closes the round running when the client leaves."""
    rounds = turn.mcp
    assert rounds is not None
    events = turn.events(error_fields)
    yield events.opening()
    for item in rounds.opening:
        progress = "response.mcp_list_tools" if item["type"] == "mcp_list_tools" else "response.mcp_call"
        yield events.whole_item(item, progress)
    while True:
        gen = turn.run.generation
        start = len(events.output)
        try:
            async for outputs in gen.events(0):
                batch = [event for output in outputs for event in events.chunk(output)]
                if batch:
                    yield batch
        except EngineError as exc:
            await turn.close_round()
            yield events.error(gen.record_error(exc))
            return
        await turn.close_round()
        yield events.ending()
        items = events.output[start:]
        go_on = rounds.continues(items, events.finish_reason, gen.error is not None)
        for item in events.pending:
            if go_on or events.finish_reason != "length":
                await rounds.run(item)
            else:
                item["status"] = "incomplete"
            yield events.settled(item)
        if not go_on:
            break
        try:
            await turn.next_round(items, len(events.output))
        except (GatewayError, EngineError) as exc:  # refused: the stream says why, then failed
            yield events.error(exc)
            return
        events.next_round()
    yield await turn.closing_events(events)
