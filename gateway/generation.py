"""One HTTP generation request as it runs: its choices (engine requests),
their text, their latencies, and the bookkeeping around them.

A :class:`Generation` is made by :func:`gateway.dispatch.dispatch` once the
request is validated, admitted, routed and registered; making one does
nothing else. It holds the engine it was routed to, the admission ticket
(its first token ends the wait) and the :class:`~gateway.lease.Lease` of
what dispatch took (registry entry, the session's and the program's turn,
the key's tokens).
:meth:`Generation.close` closes the ticket, releases the lease once and
records the request's metrics, whatever way the request ended (finished,
stopped, aborted, disconnected).

A :class:`Choice` turns one engine request's outputs into text events:
incremental detokenizing and stop strings (``OutputProcessor``). A stop
string ends the choice; leaving the engine stream early aborts the engine
request, so its KV blocks are freed within one step.

A constrained request (a grammar: tool_choice required/named, response_format)
can fail in the engine before its first token, when the grammar does not
compile. :meth:`Generation.prime` submits every choice and waits for its first
output, so a streaming response can still answer that with a 400 instead of
an error event inside a 200 stream; ``constraint_param`` names the request
field such an error is about.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

import anyio
import msgspec

from agentgate.engine.client import EngineClient
from agentgate.engine.errors import EngineError, InvalidRequestError
from agentgate.engine.output_processor import OutputProcessor
from agentgate.engine.protocol import EngineCoreOutput, ProgramTag, TokenLogprobs
from agentgate.engine.sampling_params import SamplingParams, parse_budget_error
from agentgate.engine.tokenizer import Tokenizer
from agentgate.gateway import programs
from agentgate.gateway.admission import Ticket
from agentgate.gateway.events import ChoiceEvent
from agentgate.gateway.lease import Lease
from agentgate.gateway.metrics import Metrics
from agentgate.gateway.replies import text_reply
from agentgate.gateway.schemas import PromptTokensDetails, Usage


class Choice:
    __slots__ = (
        "index",
        "request_id",
        "prompt_index",
        "prompt_ids",
        "params",
        "_processor",
        "num_tokens",
        "finish_reason",
        "num_cached_tokens",
        "keep_text",
        "texts",
        "token_ids",
        "logprobs",
        "_generation",
        "_last_time",
        "_outputs",
        "_first",
    )

    def __init__(
        self,
        generation: Generation,
        index: int,
        request_id: str,
        prompt_index: int,
        prompt_ids: list[int],
        params: SamplingParams,
    ) -> None:
        self._generation = generation
        self.index = index
        self.request_id = request_id
        self.prompt_index = prompt_index
        self.prompt_ids = prompt_ids
        self.params = params
        self._processor = OutputProcessor(generation.tokenizer, params)
        self.num_tokens = 0
        self.num_cached_tokens = 0  # prompt tokens the engine found in its prefix cache
        self.finish_reason: str | None = None
        # The text, kept when keep_text (collect() sets it; a session keeps its
        # first choice's reply); tokens and logprobs by collect() only.
        self.keep_text = False
        self.texts: list[str] = []
        self.token_ids: list[int] = []
        self.logprobs: list[TokenLogprobs] = []
        self._last_time = 0.0
        self._outputs: AsyncGenerator[EngineCoreOutput, None] | None = None
        self._first: EngineCoreOutput | None = None  # taken by prime(), not yet turned into events

    def _engine_outputs(self) -> AsyncGenerator[EngineCoreOutput, None]:
        """The engine request's outputs; the first call submits it."""
        if self._outputs is None:
            gen = self._generation
            tagged = {"program": gen.program} if gen.program is not None and self.index == 0 else {}
            self._outputs = gen.engine.generate(self.request_id, self.prompt_ids, self.params,
                                                gen.tokenizer.eos_token_ids, **tagged)  # fmt: skip
        return self._outputs

    async def prime(self) -> None:
        """Submit the engine request and wait for its first output (kept for :meth:`events`):
        an engine error that comes before any token (a grammar that does not compile) raises here."""
        outputs = self._engine_outputs()
        if self._first is None and self.finish_reason is None:
            self._first = await outputs.__anext__()

    async def aclose(self) -> None:
        """End the engine stream (aborting the engine request if it is still running)."""
        if self._outputs is not None:
            try:
                await self._outputs.aclose()
            except RuntimeError:  # being iterated by a task that is ending it anyway
                pass

    async def events(self, per_token: bool = False) -> AsyncIterator[list[ChoiceEvent]]:
        """The choice's text, an engine output at a time, until it finishes.

        An engine output holds several tokens when this consumer fell behind
        (the engine client merges what queued up); ``per_token`` splits it
        into one event per token (one SSE chunk each, written together),
        else it is one event. Leaving early (a stop string, a disconnect)
        aborts the engine request."""
        outputs = self._engine_outputs()
        async with aclosing(outputs):
            if self._first is not None:
                out, self._first = self._first, None
                yield self._events(out, per_token)
                if self.finish_reason is not None:
                    return
            async for out in outputs:
                yield self._events(out, per_token)
                if self.finish_reason is not None:
                    return

    def _events(self, out: EngineCoreOutput, per_token: bool) -> list[ChoiceEvent]:
        if out.num_cached_tokens:
            self.num_cached_tokens = out.num_cached_tokens
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
                metrics.first_token(gen.engine.address, now - gen.arrival)
                gen.ticket.started()
                if queue_time is not None:
                    metrics.queue_time.observe(queue_time)
            else:
                if gap is None:
                    gap = (now - self._last_time) / len(new)
                metrics.next_tokens(gen.engine.address, gap, len(new))
            self._last_time = now
            self.num_tokens += len(new)
        delta = self._processor.push(new, engine_finish is not None)
        if self.keep_text:
            self.token_ids += new
            if delta.text:
                self.texts.append(delta.text)
        reason = "stop" if delta.stopped else engine_finish
        if reason is not None:
            self.finish_reason = reason
        return ChoiceEvent(delta.text, new, logprobs, reason, self._processor.matched_stop if reason else None)


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


async def never_disconnects() -> dict:
    """A ``receive`` for :meth:`Generation.collect` and :meth:`Generation.prime` when no client
    waits on the connection (a background response, a WebSocket turn): it never reports a disconnect."""
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


class Generation:
    """One HTTP request's generation, over one engine: ``len(prompts) * n`` choices."""

    def __init__(
        self,
        *,
        request_id: str,
        engine: EngineClient,
        tokenizer: Tokenizer,
        metrics: Metrics,
        ticket: Ticket,
        arrival: float,
        prompts: list[list[int]],
        params: SamplingParams,
        n: int,
        lease: Lease | None = None,
        program: ProgramTag | None = None,
    ) -> None:
        self.request_id = request_id
        # The agent program this is a turn of: its first choice is tagged, and its reply,
        # read when it ends, tells the engine whether to keep the conversation's KV.
        self.program = program
        self.engine = engine
        self.tokenizer = tokenizer
        self.metrics = metrics
        self.ticket = ticket
        self.arrival = arrival
        self.created = int(time.time())
        self.prompts = prompts
        self.error: BaseException | None = None
        self.disconnected = False
        self.constraint_param: str | None = None  # the field a grammar the engine rejects comes from
        self.budget_param = "max_tokens"  # the request's name for it: a budget the grammar cannot end within
        # The reply as a session records it; the chat core sets one that parses tool calls.
        self.reply_message: Callable[[str], dict[str, Any]] = text_reply
        ids = engine_request_ids(request_id, len(prompts) * n)
        self.choices = [Choice(self, i, rid, i // n, prompts[i // n], choice_params(params, i % n))
                        for i, rid in enumerate(ids)]  # fmt: skip
        if (lease is not None and (lease.keeps_reply or lease.keeps_turn)) or (
            program is not None and program.tools_offered
        ):
            self.choices[0].keep_text = True  # the reply, for the session's messages
        self._lease = lease
        self._closed = False

    @property
    def usage(self) -> Usage:
        prompt = sum(len(p) for p in self.prompts)
        completion = sum(c.num_tokens for c in self.choices)
        n = len(self.choices) // len(self.prompts)
        cached = sum(c.num_cached_tokens for c in self.choices[::n])  # the first choice of each prompt
        return Usage(prompt, completion, prompt + completion, PromptTokensDetails(cached))

    async def collect(self, receive) -> None:
        """Run every choice to its end (non-streaming), watching ``receive``
        for the client's disconnect: on one, every engine request is aborted
        and ``disconnected`` is set. Engine errors land in ``error``."""
        await self._each_choice(receive, lambda choice: choice.collect)

    async def collect_or_raise(self, receive) -> bool:
        """:meth:`collect`, then :meth:`close`; raises the engine error, if any. False: the
        client left meanwhile (every engine request aborted), nobody is listening."""
        try:
            await self.collect(receive)
        finally:
            self.close()
        if self.error is not None and not self.disconnected:
            raise self.error
        return not self.disconnected

    async def prime(self, receive) -> None:
        """Submit every choice and wait for its first output, watching ``receive`` for the
        client's disconnect (sets ``disconnected``). An engine error lands in ``error``."""
        await self._each_choice(receive, lambda choice: choice.prime)

    async def _each_choice(self, receive, method) -> None:
        """Run ``method(choice)()`` for every choice while watching for a disconnect."""
        async with anyio.create_task_group() as tasks:

            async def watch() -> None:
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        self.disconnected = True
                        tasks.cancel_scope.cancel()
                        return

            tasks.start_soon(watch)
            if len(self.choices) == 1:
                await self.run_choice(method(self.choices[0]))
            else:
                async with anyio.create_task_group() as inner:
                    for choice in self.choices:
                        inner.start_soon(self.run_choice, method(choice))
            tasks.cancel_scope.cancel()

    async def run_choice(self, run) -> None:
        """``run()``, keeping the first engine error in ``error`` instead of raising it."""
        try:
            await run()
        except EngineError as exc:
            self.record_error(exc)

    def record_error(self, exc: EngineError) -> EngineError:
        """Keep the first engine error in ``error``; returns it as the client should see it.

        The engine rejects a request before its first token only for its
        grammar: that becomes a 400 on ``constraint_param`` (tools, response_format), or on
        ``budget_param`` when its budget cannot hold the shortest reply the grammar allows."""
        if isinstance(exc, InvalidRequestError) and self.constraint_param is not None and exc.param is None:
            what = "the tool schemas" if self.constraint_param == "tools" else "the response_format schema"
            budget = parse_budget_error(str(exc))
            if budget is not None:
                reply = "one whole tool call" if self.constraint_param == "tools" else "the JSON it asks for"
                param = self.budget_param
                exc = InvalidRequestError(
                    f"`{param}` is {budget[0]}, too few for the shortest reply this request allows ({reply}): it "
                    f"takes {budget[1]} tokens. Set `{param}` to at least {budget[1]}.",
                    param=param,
                )
            else:
                exc = InvalidRequestError(f"{what} cannot be enforced: {exc}", param=self.constraint_param)
        if self.error is None:
            self.error = exc
        return self.error  # type: ignore[return-value]

    async def aclose(self) -> None:
        """End every choice's engine stream (shielded: runs while being cancelled too)."""
        with anyio.CancelScope(shield=True):
            for choice in self.choices:
                await choice.aclose()

    def close(self) -> None:
        """Close the ticket, release the lease and record the request's metrics. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.ticket.close()
        first = self.choices[0]
        keep = first.keep_text and (first.num_tokens or first.finish_reason)
        reply = self.reply_message(first.text) if keep else None
        if self._lease is not None:
            usage = self.usage
            self._lease.release(usage.prompt_tokens, usage.completion_tokens, reply, first.token_ids)
        if self.program is not None:
            called = programs.reply_tools(reply if first.finish_reason == "stop" else None)
            if self.program.tools_offered:
                self.engine.turn_ended(self.program.program_id, first.request_id, called)
        metrics = self.metrics
        metrics.prompt_tokens.inc(sum(len(p) for p in self.prompts))
        metrics.generated(self.engine.address, sum(c.num_tokens for c in self.choices))
        for choice in self.choices:
            reason = choice.finish_reason
            if reason is None and self.error is not None:
                reason = "error"
            metrics.finished(reason)
        metrics.e2e.observe(time.monotonic() - self.arrival)
