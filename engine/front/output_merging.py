"""Outputs queued for a consumer that fell behind, merged into one (``EngineClient``'s streams)."""

from __future__ import annotations

import anyio
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream

from agentgate.engine.front.protocol import EngineCoreOutput


def merge_queued(
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
