"""The response that streams a generation: server-sent events over sse-starlette, in
each API's framing (a :class:`~gateway.formats.StreamFormat`), and the client's
disconnect watched in a cancel scope this module owns.

OpenAI's chat and completions: each event is ``data: <json>`` and a blank line,
encoded once with msgspec and handed to sse-starlette as bytes (sent as they are);
the stream ends with ``data: [DONE]``. An error after the stream has started cannot
change the status any more, so it is sent as an event holding the OpenAI error body,
then ``[DONE]``. The Responses and Anthropic Messages APIs name their events
(``event: <type>``) and close with their own last event instead.

Each token is one chunk. When the stream fell behind the engine, the tokens that
queued up arrive as one engine output (the client merges them); their chunks are then
written together, in one send, which saves the gateway and the client a wake-up and a
read per token.

One choice streams straight from its engine stream. Several choices (n > 1, or a
batch of prompts) each run in a task writing into one memory stream, which the
response reads; the response's task group cancels them when the client goes away.

The generation was submitted before the route returned (``gateway.dispatch``). A
constrained request is *primed* before the response starts: its choices' first
outputs are awaited (``Generation.prime``), so a grammar the engine cannot compile is
a 400 with an OpenAI error body, like the same request without ``stream``, rather than
an error event in a 200 stream. The first chunk then goes out with the headers.

However the response ends, the generation is closed once, with the usage the client
was told (``Generation.close``: the reply a session records is the one its choice read);
its engine requests still running are aborted. A write that waits longer than
``--sse-send-timeout`` on a client that stopped reading ends the stream
(``gateway.http.slow_clients``): the generation is closed, the engine request aborted,
its KV blocks freed.

:func:`collect_or_raise` runs a whole (non-streaming) request under the same watch.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable

import anyio
from sse_starlette import EventSourceResponse
from sse_starlette.sse import SendTimeoutError
from starlette.types import Receive, Scope, Send

from agentgate.gateway.choice import Choice
from agentgate.gateway.events import ChoiceEvent
from agentgate.gateway.formats import StreamFormat
from agentgate.gateway.generation import Generation
from agentgate.gateway.http.errors import error_response

log = logging.getLogger("agentgate.gateway")

PING_SECONDS = 15


async def until_disconnect(receive: Receive, run: Callable[[], Awaitable[None]]) -> bool:
    """Run ``run()`` while watching ``receive`` for the client's disconnect, which cancels it;
    True when the client left."""
    disconnected = False
    async with anyio.create_task_group() as tasks:

        async def watch() -> None:
            nonlocal disconnected
            while (await receive())["type"] != "http.disconnect":
                pass
            disconnected = True
            tasks.cancel_scope.cancel()

        tasks.start_soon(watch)
        await run()
        tasks.cancel_scope.cancel()
    return disconnected


async def collect_or_raise(gen: Generation, receive: Receive) -> bool:
    """Run every choice to its end (non-streaming) while watching the client, then close the
    generation; raises the engine error, if any. False: the client left meanwhile (every
    engine request aborted), nobody is listening."""
    try:
        disconnected = await until_disconnect(receive, gen.collect)
    finally:
        await gen.aclose()
        gen.close()
    if gen.error is not None and not disconnected:
        raise gen.error
    return not disconnected


class GenerationResponse(EventSourceResponse):
    """An SSE response that closes its generation however the response ends,
    even when the client left before the body was ever iterated."""

    def __init__(
        self,
        gen: Generation,
        body: AsyncIterable[bytes],
        data_sender: Callable[[], Awaitable[None]] | None = None,
        *,
        prime: bool = False,
        on_close: Callable[[], Awaitable[None]] | None = None,
        send_timeout: float | None,
    ) -> None:
        # send_timeout: --sse-send-timeout (None: none), handed in by the route
        super().__init__(
            body, ping=PING_SECONDS, sep="\r\n", data_sender_callable=data_sender, send_timeout=send_timeout
        )
        self._generation = gen
        self._prime = prime
        self._on_close = on_close  # closes what runs instead (a tool loop: its round running)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gen = self._generation
        try:
            if self._prime:
                if await until_disconnect(receive, gen.prime):
                    return
                if gen.error is not None:
                    await error_response(gen.error, gen.request_id)(scope, receive, send)
                    return
            try:
                await super().__call__(scope, receive, send)
            except* SendTimeoutError:
                log.warning(
                    "request %s: the client stopped reading for %g s; its stream is aborted",
                    gen.request_id,
                    self.send_timeout,
                )
        finally:
            if self._on_close is not None:
                await self._on_close()
            else:
                await gen.aclose()
                gen.close()


def stream_rounds(
    first: Generation,
    body: AsyncIterable[bytes],
    on_close: Callable[[], Awaitable[None]],
    *,
    send_timeout: float | None,
    prime: bool = False,
) -> GenerationResponse:
    """The SSE response of generations one after another (a tool loop's, or a stream that stores
    its response before its last event), ``body`` their bytes, written by the route (``prime``:
    the first one's, as :func:`stream_generation`), ``on_close`` closing the one running
    however the response ends."""
    return GenerationResponse(first, body, prime=prime, on_close=on_close, send_timeout=send_timeout)


def stream_generation(
    gen: Generation, fmt: StreamFormat, *, send_timeout: float | None, prime: bool = False
) -> GenerationResponse:
    """The SSE response of a streaming request; ``send_timeout``: ``--sse-send-timeout``, the
    seconds a write may wait on a client that stopped reading (None: no limit); ``prime``: wait
    for the first outputs before answering (constrained requests, see the module docstring)."""
    if len(gen.choices) == 1:
        return GenerationResponse(gen, _single(gen, fmt), prime=prime, send_timeout=send_timeout)
    send, receive = anyio.create_memory_object_stream[bytes](math.inf)

    async def produce() -> None:
        async with send:
            usage = None
            try:
                opening = fmt.opening()
                if opening:
                    send.send_nowait(opening)

                async def run(choice: Choice) -> None:
                    async for events in gen.events(choice.index):
                        data = _chunks(fmt, choice, events)
                        if data:
                            send.send_nowait(data)

                async with anyio.create_task_group() as tasks:
                    for choice in gen.choices:
                        tasks.start_soon(gen.run_choice, lambda c=choice: run(c))
                usage = gen.usage
                tail = fmt.error(gen.error) if gen.error is not None else fmt.closing(usage)
            except Exception as exc:  # a choice's task failed (a group): the stream still ends with an error event
                tail = fmt.error(gen.failed(exc))
            finally:
                gen.close(usage)
            send.send_nowait(tail)

    return GenerationResponse(gen, receive, data_sender=produce, prime=prime, send_timeout=send_timeout)


def _chunks(fmt: StreamFormat, choice: Choice, events: list[ChoiceEvent]) -> bytes:
    """The SSE chunks of one engine output: one per token, written at once."""
    if len(events) == 1:
        return fmt.chunk(choice.index, events[0]) or b""
    return b"".join(data for event in events if (data := fmt.chunk(choice.index, event)) is not None)


async def _single(gen: Generation, fmt: StreamFormat) -> AsyncIterator[bytes]:
    choice = gen.choices[0]
    usage = None
    try:
        opening = fmt.opening()
        if opening:
            yield opening
        async for events in gen.events(0):
            data = _chunks(fmt, choice, events)
            if data:
                yield data
        usage = gen.usage
        tail = fmt.closing(usage)
    except Exception as exc:  # whatever it is, the stream ends with an error event (and [DONE])
        tail = fmt.error(gen.failed(exc))
    finally:
        gen.close(usage)
    yield tail
