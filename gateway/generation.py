"""One HTTP generation request as it runs: its choices (engine requests) and the
bookkeeping around them.

:func:`gateway.dispatch.dispatch` makes a :class:`Generation` once the request is
validated, admitted, routed and registered, and submits it (:meth:`Generation.submit`)
before it returns it: it is complete by then, and whoever reads it (the route, the SSE
response) only reads. It holds the engine it was routed to, the admission ticket (its
first token ends the wait) and the :class:`~gateway.lease.Lease` of what dispatch took
(registry entry, the session's and the program's turn, the key's tokens).
:meth:`Generation.close` closes the ticket, releases the lease once (with the reply as a
session records it and the usage the client was told) and records the request's
metrics, whatever way the request ended (finished, stopped, aborted, disconnected).
The reply it closes with is the first choice's, as the choice read it while it ran
(``gateway.choice``): the session's message, the calls by name that the program's turn
and the trace report, taken from that one reading.

A constrained request (a grammar: tool_choice required/named, response_format) can fail
in the engine before its first token, when the grammar does not compile.
:meth:`Generation.prime` waits for every choice's first output, so a streaming response
can still answer that with a 400 instead of an error event inside a 200 stream; the
job's ``constraint_param`` names the request field such an error is about.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing

import anyio

from agentgate.engine.errors import EngineError, InvalidRequestError
from agentgate.engine.front.client import EngineClient
from agentgate.engine.sampling_params import parse_budget_error
from agentgate.engine.text.tokenizer import Tokenizer
from agentgate.gateway.admission.waiting import Ticket
from agentgate.gateway.api_types.openai import CompletionTokensDetails, PromptTokensDetails, Usage
from agentgate.gateway.choice import Choice, choice_params, engine_request_ids
from agentgate.gateway.context import NO_CONTEXT, filed_id
from agentgate.gateway.events import ChoiceEvent
from agentgate.gateway.job import Job
from agentgate.gateway.lease import Lease
from agentgate.gateway.observation.metrics import Metrics
from agentgate.gateway.observation.tracing import current_span
from agentgate.gateway.observation.vllm_metrics import FinishedChoice
from agentgate.gateway.replies import assistant_message
from agentgate.gateway.tools.deltas import ParsedOutput


class Generation:
    """One HTTP request's generation of ``job``, over one engine: ``len(job.prompts) * job.n`` choices."""

    def __init__(
        self,
        job: Job,
        engine: EngineClient,
        tokenizer: Tokenizer,
        metrics: Metrics,
        ticket: Ticket,
        lease: Lease | None = None,
    ) -> None:
        self.job = job
        self.request_id = job.request_id
        # The agent program this is a turn of: its first choice is tagged, and its reply,
        # read when it ends, tells the engine whether to keep the conversation's KV.
        self.program = job.program
        self.engine = engine
        self.tokenizer = tokenizer
        self.metrics = metrics
        self.ticket = ticket
        self.arrival = job.arrival
        self.created = int(time.time())
        self.prompts = job.prompts
        self.error: BaseException | None = None
        n, params = job.n, job.params
        # the id the server files it under: its key's (dispatch set the tenant; a bare job: its own id)
        self.filed_id = filed_id(job.tenant, job.request_id) if job.tenant else job.request_id
        ids = engine_request_ids(self.filed_id, len(job.prompts) * n)
        self.choices = [
            Choice(self, i, rid, i // n, job.prompts[i // n], choice_params(params, i % n), job.plan, job.splitter())
            for i, rid in enumerate(ids)
        ]
        if (lease is not None and (lease.keeps_reply or lease.keeps_turn)) or (
            job.program is not None and job.program.tools_offered
        ):
            self.choices[0].keep_text = True  # the reply, for the session's messages
        self._lease = lease
        # The request's context as dispatch admitted it: a later round of the request starts in it.
        self.context = lease.context if lease is not None else NO_CONTEXT
        self._closed = False
        # The tools the server runs for this turn (the hosted MCP loop, gateway.tool_loop) and for at
        # most how many seconds: a turn that calls only these tells the engine so (its pin is held
        # until they return: ``server_held``, ended by ``tools_returned``).
        self.server_tools: frozenset[str] = frozenset()
        self.server_hold = 0.0
        self.server_held = False
        self.span = current_span()  # this request's trace span (None: tracing off)
        if self.span is not None:
            self.span.requested(job.model, params, len(self.choices))
            self.choices[0].keep_text = True  # its reply's tool calls, by name, for the span

    def submit(self) -> None:
        """Send every choice's engine request (dispatch does, once the registry filed them); the
        first choice carries the program's tag."""
        eos, job = self.tokenizer.eos_token_ids, self.job
        for choice in self.choices:
            program = self.program if choice.index == 0 else None
            stream = self.engine.add(
                choice.request_id,
                choice.prompt_ids,
                choice.params,
                eos,
                program,
                tenant=job.tenant,
                cache_salt=job.cache_salt,
                thinking=job.thinking,
                lora=job.lora,
            )
            choice.submitted(stream)

    async def events(self, index: int) -> AsyncIterator[list[ChoiceEvent]]:
        """Choice ``index``'s events, an engine output at a time, an event per token (see
        :meth:`~gateway.choice.Choice.events`)."""
        async with aclosing(self.choices[index].events(per_token=True)) as events:
            async for batch in events:
                yield batch

    @property
    def lora(self) -> str:
        """The LoRA adapter it runs through ("": the base model)."""
        return self.job.lora

    @property
    def usage(self) -> Usage:
        prompt = sum(len(p) for p in self.prompts)
        completion = sum(c.num_tokens for c in self.choices)
        n = len(self.choices) // len(self.prompts)
        cached = sum(c.num_cached_tokens for c in self.choices[::n])  # the first choice of each prompt
        usage = Usage(prompt, completion, prompt + completion, PromptTokensDetails(cached))
        if self.job.thinking is not None:
            usage.completion_tokens_details = CompletionTokensDetails(sum(c.reasoning_tokens for c in self.choices))
        return usage

    @property
    def reply(self) -> ParsedOutput | None:
        """The first choice's reply as it read it, when it is kept (a session's turn, a program's,
        a trace) and the engine produced anything; None otherwise."""
        first = self.choices[0]
        return first.reply if first.keep_text and (first.num_tokens or first.finish_reason) else None

    async def collect(self) -> None:
        """Run every choice to its end (non-streaming). Engine errors land in ``error``."""
        await self._each_choice(lambda choice: choice.collect)

    async def prime(self) -> None:
        """Wait for every choice's first output. An engine error lands in ``error``."""
        await self._each_choice(lambda choice: choice.prime)

    async def _each_choice(self, method: Callable[[Choice], Callable[[], Awaitable[None]]]) -> None:
        """Run ``method(choice)()`` for every choice, at once."""
        if len(self.choices) == 1:
            await self.run_choice(method(self.choices[0]))
            return
        async with anyio.create_task_group() as tasks:
            for choice in self.choices:
                tasks.start_soon(self.run_choice, method(choice))

    async def run_choice(self, run: Callable[[], Awaitable[None]]) -> None:
        """``run()``, keeping the first engine error in ``error`` instead of raising it."""
        try:
            await run()
        except EngineError as exc:
            self.record_error(exc)

    def record_error(self, exc: EngineError) -> EngineError:
        """Keep the first engine error in ``error``; returns it as the client should see it.

        The engine rejects a request before its first token only for its
        grammar: that becomes a 400 on the job's ``constraint_param`` (tools, response_format),
        or on its ``budget_param`` when its budget cannot hold the shortest reply the grammar allows."""
        constraint = self.job.constraint_param
        if isinstance(exc, InvalidRequestError) and constraint is not None and exc.param is None:
            what = "the tool schemas" if constraint == "tools" else "the response_format schema"
            budget = parse_budget_error(str(exc))
            if budget is not None:
                reply = "one whole tool call" if constraint == "tools" else "the JSON it asks for"
                param = self.job.budget_param
                exc = InvalidRequestError(
                    f"`{param}` is {budget[0]}, too few for the shortest reply this request allows ({reply}): it "
                    f"takes {budget[1]} tokens. Set `{param}` to at least {budget[1]}.",
                    param=param,
                )
            else:
                exc = InvalidRequestError(f"{what} cannot be enforced: {exc}", param=constraint)
        if self.error is None:
            self.error = exc
        return self.error  # type: ignore[return-value]

    def failed(self, exc: Exception) -> BaseException:
        """What a stream's error event tells of ``exc``, raised while its events were produced: an
        engine error as :meth:`record_error` words it, anything else as it is (its event says only
        "internal server error"; the detail is logged). Kept in ``error`` when it is the first."""
        if isinstance(exc, EngineError):
            return self.record_error(exc)
        if self.error is None:
            self.error = exc
        return exc

    async def aclose(self) -> None:
        """End every choice's engine stream (shielded: runs while being cancelled too)."""
        with anyio.CancelScope(shield=True):
            for choice in self.choices:
                await choice.aclose()

    def close(self, usage: Usage | None = None) -> None:
        """Close the ticket, release the lease (with :attr:`reply` as a session records it) and
        record the request's metrics. Idempotent. ``usage``: what the client was told (default: now)."""
        if self._closed:
            return
        self._closed = True
        self.ticket.close()
        first = self.choices[0]
        reply = self.reply
        called = [call.name for call in reply.tool_calls] if reply is not None else []
        if self._lease is not None:
            usage = usage or self.usage
            message = assistant_message(reply) if reply is not None else None
            self._lease.release(usage.prompt_tokens, usage.completion_tokens, message, first.token_ids)
        if self.program is not None and self.program.tools_offered:
            ended = called if first.finish_reason == "stop" else []
            self.server_held = bool(ended) and self.server_hold > 0 and set(ended) <= self.server_tools
            hold = self.server_hold if self.server_held else 0.0
            self.engine.turn_ended(self.program.program_id, first.request_id, ended, hold)
        reasons = [c.finish_reason or ("error" if self.error is not None else None) for c in self.choices]
        if self.span is not None:
            self._trace_end(called, usage or self.usage, reasons)
        self.metrics.request_ended(
            self.engine.address,
            sum(len(p) for p in self.prompts),
            sum(c.num_tokens for c in self.choices),
            reasons,
            time.monotonic() - self.arrival,
            [FinishedChoice(len(c.prompt_ids), c.num_tokens, c.timings, c.reasoning_tokens) for c in self.choices],
        )

    def tools_returned(self) -> None:
        """The server-run tools this turn called returned and no next round follows: the engine
        releases the pin it held for them (once; a next round claims the pin instead)."""
        if self.server_held and self.program is not None:
            self.server_held = False
            self.engine.tools_returned(self.program.program_id, self.choices[0].request_id)

    def _trace_end(self, calls: list[str], usage: Usage, reasons: list[str | None]) -> None:
        """The span's end: usage, finish reasons (a first reply that called tools: ``tool_calls``,
        as the APIs say), the calls by name and the engine's timings."""
        finish = [r or "abort" for r in reasons]
        if calls and finish[0] == "stop":
            finish[0] = "tool_calls"
        phases = [(c.request_id, c.timings, c.ended_at) for c in self.choices if c.timings is not None]
        self.span.ended((usage.prompt_tokens, usage.completion_tokens), finish, calls, phases)
