"""The run: simulated agents against a server, with abort storms and pauses on the side.

Closed loop: ``agents`` agents, each running conversations back to back (a
turn starts when the previous one and its tool calls are done). Open loop:
conversations start as a Poisson process of ``rate`` per second, each with its
own agent loop, at most ``max_concurrency`` at once (arrivals beyond it are
counted as dropped). Either way no new turn starts after ``duration`` (with
``complete_conversations``, no new conversation: those begun run all their
turns); what is in flight then finishes (the drain), so no stream is cut short
by the run.

Each agent (in the open loop: each conversation) has its own
``agents.AsyncClient`` (its own connections), as real agents do, so the
retries counted for a request are its own. Per chunk the client does an SSE
split, a ``json.loads`` and an append of a timestamp; everything else happens
per request.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx

from agentgate.agents import AsyncAdmin, AsyncClient
from agentgate.agents.errors import AgentGateError, APIStatusError
from agentgate.agents.events import ChatResult, ContentDelta, Finish, ToolCallDelta, UsageEvent
from agentgate.loadtests.metrics import SLO, RequestRecord
from agentgate.loadtests.tool_agents import ToolConversation
from agentgate.loadtests.workload import Arrivals, Conversation, WorkloadConfig

MAX_ATTEMPTS = 3  # tries of one turn when it is aborted


@dataclass(frozen=True)
class Pause:
    at: float  # seconds after the start
    duration: float = 5.0
    mode: str = "keep"


@dataclass(frozen=True)
class RunConfig:
    url: str
    agents: int = 16
    duration: float = 60.0
    mode: str = "closed"  # closed or open
    rate: float = 1.0  # open loop: conversations per second
    max_concurrency: int = 256  # open loop
    seed: int = 0
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    slo: SLO = field(default_factory=SLO)
    api_key: str | None = None
    admin_key: str | None = None
    abort_every: float | None = None  # seconds between abort storms
    abort_fraction: float = 0.25
    abort_via: str = "client"  # client: close the connection; server: POST /abort_requests
    pauses: tuple[Pause, ...] = ()
    metrics_interval: float = 2.0
    request_timeout: float = 600.0
    drain_timeout: float = 300.0
    max_retries: int = 5
    complete_conversations: bool = False  # after `duration`, finish the conversations begun (not only the turns)

    def __post_init__(self) -> None:
        if self.mode not in ("closed", "open"):
            raise ValueError("mode must be closed or open")
        if self.abort_via not in ("client", "server"):
            raise ValueError("abort_via must be client or server")
        if self.agents < 1 or self.duration <= 0:
            raise ValueError("agents and duration must be positive")


@dataclass
class RunState:
    t0: float
    records: list[RequestRecord] = field(default_factory=list)
    in_flight: dict[str, anyio.CancelScope] = field(default_factory=dict)
    samples: list[dict[str, float]] = field(default_factory=list)  # /metrics over time
    events: list[dict[str, Any]] = field(default_factory=list)  # pauses, resumes, abort storms
    conversations: int = 0
    dropped: int = 0
    active: int = 0
    draining: bool = False

    def now(self) -> float:
        return time.perf_counter() - self.t0


class Runner:
    def __init__(self, config: RunConfig, on_progress: Callable[[RunState], None] | None = None) -> None:
        self.config = config
        self.on_progress = on_progress
        self.state = RunState(time.perf_counter())
        self._rng = random.Random(f"{config.seed}/storms")

    # -- one request ---------------------------------------------------------------------
    async def request(
        self, client: AsyncClient, conv: Conversation | ToolConversation, attempt: int
    ) -> tuple[RequestRecord, ChatResult | None]:
        state = self.state
        record = RequestRecord(conv.agent, conv.number, conv.turn, state.now())
        request_id = f"lt-{self.config.seed}-{conv.agent}-{conv.number}-{conv.turn}-{attempt}"
        record.request_id = request_id
        times = record.token_times
        t0, clock = state.t0, time.perf_counter
        retries_before = client.retries
        result = None
        with anyio.CancelScope() as scope:
            state.in_flight[request_id] = scope
            try:
                stream = client.chat_stream(conv.messages, request_id=request_id, **conv.request_options())
                async with stream:
                    async for event in stream:
                        kind = type(event)
                        if kind is ContentDelta or kind is ToolCallDelta:
                            times.append(clock() - t0)
                        elif kind is Finish:
                            record.finish_reason = event.reason
                        elif kind is UsageEvent:
                            record.prompt_tokens = event.usage.prompt_tokens
                            record.completion_tokens = event.usage.completion_tokens
                result = stream.result()
                record.tool_calls = len(result.tool_calls)
            except APIStatusError as exc:
                record.status, record.error = "error", f"{exc.status_code} {exc.message}"[:300]
            except AgentGateError as exc:
                record.status, record.error = "error", f"{type(exc).__name__}: {exc}"[:300]
            finally:
                state.in_flight.pop(request_id, None)
        record.end = state.now()
        record.retries = client.retries - retries_before
        if times:
            record.ttft = times[0] - record.start
        if scope.cancelled_caught or record.finish_reason == "abort":
            record.status = "aborted"
        elif record.ok and record.completion_tokens < conv.min_tokens:
            record.status = "truncated"  # a stream cut short
        state.records.append(record)
        return record, result

    # -- agents ----------------------------------------------------------------------------
    async def conversation(self, client: AsyncClient, agent: int, number: int) -> None:
        config, state = self.config, self.state
        tools = config.workload.format == "tools"
        conv = (ToolConversation if tools else Conversation)(config.workload, config.seed, agent, number)
        state.conversations += 1
        while not conv.done and (state.now() < config.duration or config.complete_conversations):
            for attempt in range(MAX_ATTEMPTS):
                record, result = await self.request(client, conv, attempt)
                if record.status != "aborted":
                    break
            if record.status != "ok" or result is None:
                return  # an error (or aborted thrice): this conversation is over
            if isinstance(conv, ToolConversation):  # the model's own calls, run and answered
                made = result.tool_calls
                await anyio.sleep(conv.tool_latency(len(made)))
                conv.add_reply(result.message(), made)
                continue
            text = result.content or ""
            calls = conv.tool_calls() if conv.turn < config.workload.turns - 1 else []
            if calls:
                await anyio.sleep(max(c.latency for c in calls))  # the calls run in parallel
            conv.add_reply(text, calls)

    def _client(self, connections: int) -> AsyncClient:
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        return AsyncClient(
            self.config.url,
            api_key=self.config.api_key,
            timeout=self.config.request_timeout,
            max_retries=self.config.max_retries,
            limits=limits,
        )

    async def closed_agent(self, agent: int) -> None:
        async with self._client(2) as client:
            number = 0
            while self.state.now() < self.config.duration:
                self.state.active += 1
                try:
                    await self.conversation(client, agent, number)
                finally:
                    self.state.active -= 1
                number += 1
                if self.config.workload.think_time:
                    await anyio.sleep(self.config.workload.think_time)

    async def open_loop(self) -> None:
        config, state = self.config, self.state
        async with anyio.create_task_group() as tasks:
            number = 0
            gaps = Arrivals(config.rate, config.seed).gaps()
            next_start = 0.0

            async def one(n: int) -> None:
                state.active += 1
                try:
                    async with self._client(2) as client:
                        await self.conversation(client, n, 0)
                finally:
                    state.active -= 1

            while True:
                next_start += next(gaps)
                if next_start >= config.duration:
                    break
                await anyio.sleep(max(0.0, next_start - state.now()))
                if state.active >= config.max_concurrency:
                    state.dropped += 1
                    continue
                tasks.start_soon(one, number)
                number += 1

    # -- the side tasks ------------------------------------------------------------------------
    async def sample_metrics(self, admin: AsyncAdmin) -> None:
        while True:
            try:
                samples = await admin.metrics()
                samples["t"] = self.state.now()
                self.state.samples.append(samples)
            except AgentGateError:
                pass
            await anyio.sleep(self.config.metrics_interval)

    async def abort_storms(self, admin: AsyncAdmin) -> None:
        config, state = self.config, self.state
        while True:
            await anyio.sleep(config.abort_every)  # type: ignore[arg-type]
            if state.now() >= config.duration:
                return
            victims = list(state.in_flight)
            k = math.ceil(len(victims) * config.abort_fraction) if victims else 0
            chosen = self._rng.sample(sorted(victims), k) if k else []
            state.events.append({"t": state.now(), "kind": "abort_storm", "requests": len(chosen)})
            if config.abort_via == "client":
                for request_id in chosen:
                    scope = state.in_flight.get(request_id)
                    if scope is not None:
                        scope.cancel()
            elif chosen:
                try:
                    await admin.abort(chosen)
                except AgentGateError as exc:
                    state.events.append({"t": state.now(), "kind": "abort_failed", "error": str(exc)})

    async def pause(self, admin: AsyncAdmin, pause: Pause) -> None:
        state = self.state
        await anyio.sleep(max(0.0, pause.at - state.now()))
        try:
            await admin.pause(pause.mode)
            state.events.append({"t": state.now(), "kind": "pause", "mode": pause.mode})
            await anyio.sleep(pause.duration)
        except AgentGateError as exc:
            state.events.append({"t": state.now(), "kind": "pause_failed", "error": str(exc)})
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await admin.resume()
                    state.events.append({"t": state.now(), "kind": "resume"})
                except AgentGateError as exc:
                    state.events.append({"t": state.now(), "kind": "resume_failed", "error": str(exc)})

    async def progress(self) -> None:
        assert self.on_progress is not None
        while True:
            self.on_progress(self.state)
            await anyio.sleep(0.5)

    # -- the run -------------------------------------------------------------------------------
    async def run(self) -> RunState:
        config = self.config
        async with AsyncAdmin(config.url, admin_key=config.admin_key, max_retries=1) as admin:
            self.state.t0 = time.perf_counter()
            async with anyio.create_task_group() as side:
                side.start_soon(self.sample_metrics, admin)
                if config.abort_every:
                    side.start_soon(self.abort_storms, admin)
                for pause in config.pauses:
                    side.start_soon(self.pause, admin, pause)
                if self.on_progress is not None:
                    side.start_soon(self.progress)
                with anyio.move_on_after(config.duration + config.drain_timeout):
                    async with anyio.create_task_group() as work:
                        if config.mode == "closed":
                            for agent in range(config.agents):
                                work.start_soon(self.closed_agent, agent)
                        else:
                            work.start_soon(self.open_loop)
                        await anyio.sleep(config.duration)
                        self.state.draining = True
                side.cancel_scope.cancel()
            try:
                self.state.samples.append({**await admin.metrics(), "t": self.state.now()})
            except AgentGateError:
                pass
        if self.on_progress is not None:
            self.on_progress(self.state)
        return self.state
