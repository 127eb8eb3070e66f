"""Server-sent events over sse-starlette, in each API's framing (a :class:`StreamFormat`).

OpenAI's chat and completions (:class:`OpenAIStream`): each event is
``data: <json>`` and a blank line, encoded once with msgspec and handed to
sse-starlette as bytes (sent as they are); the stream ends with
``data: [DONE]``. An error after the stream has started cannot change the
status any more, so it is sent as an event holding the OpenAI error body,
then ``[DONE]``. The Responses and Anthropic Messages APIs name their events
(``event: <type>``) and close with their own last event instead.

Each token is one chunk. When the stream fell behind the engine, the tokens
that queued up arrive as one engine output (the client merges them); their
chunks are then written together, in one send, which saves the gateway and
the client a wake-up and a read per token.

One choice streams straight from its engine stream. Several choices (n > 1,
or a batch of prompts) each run in a task writing into one memory stream,
which the response reads; the response's task group cancels them when the
client goes away.

A constrained request is *primed* before the response starts: its choices
are submitted and their first outputs awaited (``Generation.prime``), so a
grammar the engine cannot compile is a 400 with an OpenAI error body, like
the same request without ``stream``, rather than an error event in a 200
stream. The first chunk then goes out with the headers.

A write that waits longer than ``--sse-send-timeout`` on a client that
stopped reading ends the stream (``gateway.http.slow_clients``): the generation is
closed, the engine request aborted, its KV blocks freed.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

import anyio
from sse_starlette import EventSourceResponse
from sse_starlette.sse import SendTimeoutError
from starlette.types import Receive, Scope, Send

from agentgate.engine.errors import EngineError
from agentgate.gateway.formats import StreamFormat
from agentgate.gateway.http.errors import error_response

if TYPE_CHECKING:
    from agentgate.gateway.events import ChoiceEvent
    from agentgate.gateway.generation import Choice, Generation

log = logging.getLogger("agentgate.gateway")

PING_SECONDS = 15


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
    ) -> None:
        super().__init__(body, ping=PING_SECONDS, sep="\r\n", data_sender_callable=data_sender)
        self._generation = gen
        self._prime = prime

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gen = self._generation
        try:
            if self._prime:
                await gen.prime(receive)
                if gen.disconnected:
                    return
                if gen.error is not None:
                    await error_response(gen.error, gen.request_id)(scope, receive, send)
                    return
            gw = scope.get("state", {}).get("gateway")
            self.send_timeout = gw.settings.sse_send_timeout if gw is not None else None
            try:
                await super().__call__(scope, receive, send)
            except* SendTimeoutError:
                log.warning("request %s: the client stopped reading for %g s; its stream is aborted",
                            gen.request_id, self.send_timeout)  # fmt: skip
        finally:
            await gen.aclose()
            gen.close()


def stream_generation(gen: Generation, fmt: StreamFormat, *, prime: bool = False) -> GenerationResponse:
    """The SSE response of a streaming request; ``prime``: wait for the first outputs before
    answering (constrained requests, see the module docstring)."""
    if len(gen.choices) == 1:
        return GenerationResponse(gen, _single(gen, fmt), prime=prime)
    send, receive = anyio.create_memory_object_stream[bytes](math.inf)

    async def produce() -> None:
        async with send:
            try:
                opening = fmt.opening()
                if opening:
                    send.send_nowait(opening)

                async def run(choice: Choice) -> None:
                    async for events in choice.events(per_token=True):
                        data = _chunks(fmt, choice, events)
                        if data:
                            send.send_nowait(data)

                async with anyio.create_task_group() as tasks:
                    for choice in gen.choices:
                        tasks.start_soon(gen.run_choice, lambda c=choice: run(c))
                tail = fmt.error(gen.error) if gen.error is not None else await fmt.closing(gen.usage)
            finally:
                gen.close()
            send.send_nowait(tail)

    return GenerationResponse(gen, receive, data_sender=produce, prime=prime)


def _chunks(fmt: StreamFormat, choice: Choice, events: list[ChoiceEvent]) -> bytes:
    """The SSE chunks of one engine output: one per token, written at once."""
    if len(events) == 1:
        return fmt.chunk(choice.index, events[0]) or b""
    return b"".join(data for event in events if (data := fmt.chunk(choice.index, event)) is not None)


async def _single(gen: Generation, fmt: StreamFormat) -> AsyncIterator[bytes]:
    choice = gen.choices[0]
    try:
        opening = fmt.opening()
        if opening:
            yield opening
        async for events in choice.events(per_token=True):
            data = _chunks(fmt, choice, events)
            if data:
                yield data
        tail = await fmt.closing(gen.usage)
    except EngineError as exc:
        tail = fmt.error(gen.record_error(exc))
    finally:
        gen.close()
    yield tail
