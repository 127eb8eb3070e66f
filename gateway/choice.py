"""One choice of a generation: one engine request's outputs turned into text events,
incremental detokenizing and stop strings (``OutputProcessor``), with its latencies.

The choice reads its reply once, here, as its text comes: through the job's tool plan
(:class:`~gateway.replies.ReplyReader`) into content and tool-call deltas and the finish
reason the APIs report. Its events carry those pieces, which the formats write as they
are; the session's reply, the calls by name (the program's turn, the trace) and a whole
body take the reply as read (:attr:`Choice.reply`), never a second reading of its text.

A stop string ends the choice; leaving the engine stream early aborts the engine
request, so its KV blocks are freed within one step. The choice is submitted by its
generation (``Generation.submit``, which dispatch calls) and read by
:meth:`Choice.events` (streamed) or :meth:`Choice.collect` (whole).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Protocol

import msgspec

from agentgate.engine.front.client import EngineClient, RequestStream
from agentgate.engine.front.protocol import EngineCoreOutput, ProgramTag, RequestTimings, TokenLogprobs
from agentgate.engine.sampling_params import SamplingParams
from agentgate.engine.text.output_processor import OutputProcessor
from agentgate.engine.text.tokenizer import Tokenizer
from agentgate.gateway.admission.waiting import Ticket
from agentgate.gateway.events import ChoiceEvent
from agentgate.gateway.observation.metrics import Metrics
from agentgate.gateway.reasoning.splitter import ReasoningSplitter
from agentgate.gateway.replies import ReplyReader
from agentgate.gateway.tools.deltas import Delta, ParsedOutput, accumulate
from agentgate.gateway.tools.plan import ToolPlan


class Owner(Protocol):
    """What a choice reads of the generation it belongs to (``gateway.generation.Generation``)."""

    engine: EngineClient
    tokenizer: Tokenizer
    metrics: Metrics
    ticket: Ticket
    arrival: float
    program: ProgramTag | None


class Choice:
    __slots__ = (
        "index",
        "request_id",
        "prompt_index",
        "prompt_ids",
        "params",
        "_processor",
        "_reader",
        "num_tokens",
        "reasoning_tokens",
        "finish_reason",
        "reply_finish",
        "num_cached_tokens",
        "keep_text",
        "texts",
        "deltas",
        "token_ids",
        "logprobs",
        "_generation",
        "_last_time",
        "_outputs",
        "_first",
        "timings",
        "ended_at",
    )

    def __init__(
        self,
        generation: Owner,
        index: int,
        request_id: str,
        prompt_index: int,
        prompt_ids: list[int],
        params: SamplingParams,
        plan: ToolPlan,
        splitter: ReasoningSplitter | None = None,
    ) -> None:
        self._generation = generation
        self.index = index
        self.request_id = request_id
        self.prompt_index = prompt_index
        self.prompt_ids = prompt_ids
        self.params = params
        self._processor = OutputProcessor(generation.tokenizer, params)
        self._reader = ReplyReader(plan, splitter)  # the one reading of the reply
        self.num_tokens = 0
        self.reasoning_tokens = 0  # of the thinking block, as the engine counted them (its last output)
        self.num_cached_tokens = 0  # prompt tokens the engine found in its prefix cache
        self.finish_reason: str | None = None  # the engine's (stop, length, abort)
        self.reply_finish: str | None = None  # as the APIs report it (tool_calls: see ChoiceEvent)
        # The text, its tokens and the reply as read, kept when keep_text (collect() sets it; a
        # session keeps its first choice's reply); logprobs by collect() only.
        self.keep_text = False
        self.texts: list[str] = []
        self.deltas: list[Delta] = []
        self.token_ids: list[int] = []
        self.logprobs: list[TokenLogprobs] = []
        self._last_time = 0.0
        self._outputs: RequestStream | None = None  # the engine request's, once submitted
        self._first: EngineCoreOutput | None = None  # taken by prime(), not yet turned into events
        # The engine's account of where its time went, with its last output, and the time.monotonic()
        # the gateway got that output (a trace's queue, prefill and decode spans: gateway.tracing).
        self.timings: RequestTimings | None = None
        self.ended_at = 0.0

    def submitted(self, outputs: RequestStream) -> None:
        """The engine request was sent (by the generation); ``outputs``: its stream."""
        self._outputs = outputs

    async def prime(self) -> None:
        """Wait for the first output (kept for :meth:`events`): an engine error that comes before
        any token (a grammar that does not compile) raises here."""
        if self._first is None and self.finish_reason is None:
            self._first = await self._outputs.__anext__()

    async def aclose(self) -> None:
        """End the engine stream (aborting the engine request if it is still running)."""
        if self._outputs is not None:
            await self._outputs.aclose()

    async def events(self, per_token: bool = False) -> AsyncIterator[list[ChoiceEvent]]:
        """The choice's text, an engine output at a time, until it finishes.

        An engine output holds several tokens when this consumer fell behind
        (the engine client merges what queued up); ``per_token`` splits it
        into one event per token (one SSE chunk each, written together),
        else it is one event. Leaving early (a stop string, a disconnect)
        aborts the engine request."""
        outputs = self._outputs
        async with aclosing(outputs):
            if self._first is not None:
                out, self._first = self._first, None
                yield self._events(out, per_token)
                if self.finish_reason is not None:
                    return
            # anext(), not ``async for``: the stream is read the same way whether or not its first
            # output already finished it (the request walk, docs/request-walk.md, traces one way).
            while True:
                try:
                    out = await anext(outputs)
                except StopAsyncIteration:
                    return
                yield self._events(out, per_token)
                if self.finish_reason is not None:
                    return

    def _events(self, out: EngineCoreOutput, per_token: bool) -> list[ChoiceEvent]:
        if out.num_cached_tokens:
            self.num_cached_tokens = out.num_cached_tokens
        if out.timings is not None:
            self.timings, self.ended_at = out.timings, time.monotonic()
        if out.reasoning_tokens:
            self.reasoning_tokens = out.reasoning_tokens
        if per_token and len(out.new_token_ids) > 1:
            return self._split(out)
        return [self._update(out.new_token_ids, out.logprobs, out.finish_reason, out.queue_time)]

    async def collect(self) -> None:
        """Run to the end, keeping the text, tokens and logprobs (non-streaming)."""
        want_logprobs = self.params.logprobs is not None
        self.keep_text = True
        async for [event] in self.events():
            if want_logprobs and event.logprobs:
                self.logprobs += event.logprobs

    @property
    def text(self) -> str:
        return "".join(self.texts)

    @property
    def reply(self) -> ParsedOutput:
        """The reply as it was read (kept when ``keep_text``): its content and tool calls, what
        the streamed deltas add up to."""
        return accumulate(self.deltas)

    @property
    def matched_stop(self) -> str | None:
        """The stop string that ended the choice (finish reason "stop"), if one did."""
        return self._processor.matched_stop

    def _split(self, out: EngineCoreOutput) -> list[ChoiceEvent]:
        tokens, logprobs = out.new_token_ids, out.logprobs
        last = len(tokens) - 1
        gap = (time.monotonic() - self._last_time) / len(tokens)  # the merged tokens share the gap
        events = []
        for i, token in enumerate(tokens):
            event = self._update(
                [token],
                logprobs[i : i + 1] if logprobs else None,
                out.finish_reason if i == last else None,
                out.queue_time if i == 0 else None,
                gap,
            )
            events.append(event)
            if event.finish_reason is not None:
                break
        return events

    def _update(
        self,
        new: list[int],
        logprobs: list[TokenLogprobs] | None,
        engine_finish: str | None,
        queue_time: float | None,
        gap: float | None = None,
    ) -> ChoiceEvent:
        """Advance by ``new`` tokens; ``gap``: the inter-token latency to record (default: measured)."""
        now = time.monotonic()
        gen = self._generation
        metrics = gen.metrics
        if new:
            if self.num_tokens == 0:
                metrics.first_token(gen.engine.address, now - gen.arrival, queue_time)
                gen.ticket.started()
                if len(new) > 1:  # the tokens merged into the first output came with it: 0 s apart
                    metrics.next_tokens(gen.engine.address, 0.0, len(new) - 1)
            else:
                if gap is None:
                    gap = (now - self._last_time) / len(new)
                metrics.next_tokens(gen.engine.address, gap, len(new))
            self._last_time = now
            self.num_tokens += len(new)
        delta = self._processor.push(new, engine_finish is not None)
        reason = "stop" if delta.stopped else engine_finish
        deltas, reply_finish = self._reader.read(delta.text, reason)
        if self.keep_text:
            self.token_ids += new
            if delta.text:
                self.texts.append(delta.text)
            self.deltas += deltas
        if reason is not None:
            self.finish_reason, self.reply_finish = reason, reply_finish
        matched = self._processor.matched_stop if reason else None
        return ChoiceEvent(delta.text, new, logprobs, reason, matched, deltas, reply_finish)


def choice_params(params: SamplingParams, index: int) -> SamplingParams:
    """The parameters of a prompt's ``index``-th choice: with a seed, its own seed stream
    (``seed + index``, as vLLM gives each of n choices), so n > 1 choices differ and are
    each reproducible."""
    if index == 0 or params.seed is None:
        return params
    return msgspec.structs.replace(params, seed=(params.seed + index) % 2**64)


def engine_request_ids(request_id: str, num_choices: int) -> list[str]:
    """The engine request id of each choice: the request id itself, or ``<id>-<index>`` for several."""
    return [request_id] if num_choices == 1 else [f"{request_id}-{i}" for i in range(num_choices)]
