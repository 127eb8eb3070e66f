"""RequestStream: one engine request's outputs as the front end reads them (from
:meth:`EngineClient.add`), a consumer that fell behind getting what queued up merged into one."""

from __future__ import annotations

from typing import Protocol

import anyio
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from agentgate.engine.errors import EngineError, InvalidRequestError
from agentgate.engine.front.protocol import EngineCoreOutput


class StreamOwner(Protocol):
    """What a stream needs of the client that opened it (an ``EngineClient``)."""

    @property
    def is_dead(self) -> bool: ...

    def forget(self, request_id: str) -> None: ...

    async def abort(self, request_ids: list[str]) -> None: ...


class RequestStream:
    """One engine request's outputs, an async iterator that ends after the output carrying a
    finish reason (an engine error is raised: InvalidRequestError for what the request asked,
    EngineError otherwise; EngineDeadError when the engine died). :meth:`aclose` ends it: a
    request not finished yet is aborted in the engine (shielded from cancellation)."""

    __slots__ = ("request_id", "_client", "_send", "_receive", "_held", "_finished", "_closed")

    def __init__(
        self,
        client: StreamOwner,
        request_id: str,
        send: MemoryObjectSendStream[EngineCoreOutput | BaseException],
        receive: MemoryObjectReceiveStream[EngineCoreOutput | BaseException],
    ) -> None:
        self.request_id = request_id
        self._client = client
        self._send = send
        self._receive = receive
        self._held: EngineCoreOutput | BaseException | None = None  # taken from the queue, not returned yet
        self._finished = False
        self._closed = False

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> EngineCoreOutput:
        """The next output; a consumer that fell behind gets what queued up merged into one."""
        if self._finished or self._closed:
            raise StopAsyncIteration
        try:
            item, self._held = self._held if self._held is not None else await self._receive.receive(), None
        except anyio.EndOfStream:
            raise StopAsyncIteration from None
        if isinstance(item, BaseException):
            await self.aclose()
            raise item
        if item.finish_reason == "error" and item.error:
            self._finished = True
            await self.aclose()
            raise InvalidRequestError(item.error) if item.invalid else EngineError(item.error)
        item, self._held = _merge_queued(item, self._receive)
        if item.finish_reason is not None:
            self._finished = True
            await self.aclose()
        return item

    async def aclose(self) -> None:
        """Stop reading: the request is forgotten here and, unless it finished, aborted in the engine."""
        if self._closed:
            return
        self._closed = True
        client = self._client
        client.forget(self.request_id)
        self._send.close()
        self._receive.close()
        if not self._finished and not client.is_dead:
            with anyio.CancelScope(shield=True):
                await client.abort([self.request_id])


def _merge_queued(
    item: EngineCoreOutput, receive: MemoryObjectReceiveStream[EngineCoreOutput | BaseException]
) -> tuple[EngineCoreOutput, EngineCoreOutput | BaseException | None]:
    """A consumer that fell behind gets the outputs queued for it as one
    (tokens and logprobs concatenated, the last finish reason): fewer wake-ups
    and writes downstream, the same tokens. Returns the merged output and an
    item held back (an error, handled on its own) or None."""
    while item.finish_reason is None:
        try:
            more = receive.receive_nowait()
        except (anyio.WouldBlock, anyio.EndOfStream):
            return item, None
        if isinstance(more, BaseException) or more.finish_reason == "error":
            return item, more
        logprobs = (
            None if item.logprobs is None and more.logprobs is None else (item.logprobs or []) + (more.logprobs or [])
        )
        item = msgspec.structs.replace(  # the later output's fields (its finish, timings, reasoning tokens)
            more,
            new_token_ids=item.new_token_ids + more.new_token_ids,
            logprobs=logprobs,
            queue_time=item.queue_time if item.queue_time is not None else more.queue_time,
        )
    return item, None
