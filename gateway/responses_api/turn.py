"""One ``POST /v1/responses`` on the chat core: the chain read back from the store,
the request translated (:mod:`~gateway.responses_api.items`) and started with
:func:`~gateway.chat.start_chat`, and the response object it ends as, stored
for the next turn.

    turn = await start_turn(gw.chat, gw.mcp, store, body, request_id=..., arrival=..., context=...)
    ... run turn.run.generation (streamed, collected, or in the background) ...
    turn.finish(parsed, finish_reason)      # status, output items, usage
    await turn.save()

Streamed, its events come from :class:`~gateway.formats.responses.ResponseEvents`
(:mod:`gateway.responses_api.turn_events`), and the response is finished and stored between
the last item's events and the final one (:meth:`Turn.closing_events`). With ``mcp`` tools
the server runs their calls in rounds (:attr:`Turn.loop`, :mod:`gateway.tool_loop`).

The chain's engine (where the previous response ran) is the turn's affinity,
so its prefix, already in that engine's cache, is not computed again.

Both transports start their turns here: ``POST /v1/responses`` and the
WebSocket mode (:mod:`gateway.http.websocket`), which also hands in
the responses its connection keeps (``store: false`` ones live nowhere else)
and may ask for a warm-up (``generate: false``): the prompt is computed into
the engine's cache, and the response has no output.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from agentgate.gateway.api_types.ids import new_id
from agentgate.gateway.api_types.openai import SamplingExtras, Usage
from agentgate.gateway.api_types.response_items import (
    CallNames,
    Sealing,
    chat_tools,
    output_items,
    round_messages,
    sealed,
)
from agentgate.gateway.api_types.responses import (
    IncompleteDetails,
    InputTokensDetails,
    OutputTokensDetails,
    ResponseError,
    ResponseObject,
    ResponsesRequest,
    ResponseUsage,
    TextConfig,
)
from agentgate.gateway.chat import ChatCore, ChatRun
from agentgate.gateway.context import RequestContext
from agentgate.gateway.errors import BadRequestError, GatewayError, ServiceUnavailableError, error_parts
from agentgate.gateway.formats.responses import ErrorFields, Event, ResponseEvents, sse_error_fields
from agentgate.gateway.mcp import McpHost
from agentgate.gateway.mcp.toolset import echoed, list_servers, resolve_servers
from agentgate.gateway.reasoning.requests import RESPONSES_THINKING, responses_reasoning
from agentgate.gateway.responses_api import items as it
from agentgate.gateway.responses_api.client_tools import client_tools
from agentgate.gateway.responses_api.mcp_items import answer_approvals
from agentgate.gateway.responses_api.reasoning_items import INCLUDE_ENCRYPTED, seal_reasoning
from agentgate.gateway.responses_api.store import ResponseStore, StoredResponse
from agentgate.gateway.tool_loop.loop import ToolLoop
from agentgate.gateway.tool_loop.rounds import McpRounds, close_reply, round_id
from agentgate.gateway.tools import ParsedOutput
from agentgate.gateway.translation import chat_request


def need_store(store: ResponseStore | None, what: str) -> ResponseStore:
    if store is None:
        raise ServiceUnavailableError(
            f"{what} needs Redis, and this gateway runs without it (start it with "
            "--redis-url, or through `agentgate serve`, which embeds one)",
            code="redis_not_configured",
        )
    return store


_EXTRAS = tuple(f.name for f in msgspec.structs.fields(SamplingExtras))


def sampling_extras(body: ResponsesRequest) -> dict[str, Any]:
    """The sampling fields chat takes that ``body`` carries (its penalties, stop, top_k, ...), for
    the chat request: the engine gets them as it gets chat's."""
    return {name: getattr(body, name) for name in _EXTRAS}


def refuse_unsupported(body: ResponsesRequest) -> None:
    """A 400 naming ``n`` or ``top_logprobs`` where they ask for what a response cannot give
    (more than one output; logprobs in the output text), never a reply that drops them."""
    if body.n not in (None, 1):
        raise BadRequestError(f"`n` must be 1 on the Responses API (one output per response), got {body.n}", param="n")
    if body.top_logprobs:
        raise BadRequestError(
            "`top_logprobs` is not supported on the Responses API (use chat completions' `logprobs`)",
            param="top_logprobs",
        )


@dataclass
class Turn:
    response: ResponseObject
    started: ChatRun  # the model's first reply
    store: ResponseStore | None  # None: not stored (``store: false``, or no Redis)
    owner: str
    history: list[dict[str, Any]]  # the chain's messages and this input: what the next turn replays
    input_items: list[dict[str, Any]]
    program: str | None = None  # the chain's first response's id
    warmup: bool = False  # generate: false: the prompt is computed, nothing is output
    loop: ToolLoop | None = None  # the server-run tool loop (mcp tools: gateway.tool_loop)
    names: CallNames = dataclasses.field(default_factory=dict)  # namespaced and custom tools' calls
    omitted: list[str] = dataclasses.field(default_factory=list)  # hosted tools left out of the prompt
    seal: Sealing | None = None  # include: reasoning.encrypted_content: seals a reasoning item's text

    @property
    def run(self) -> ChatRun:
        """The model's reply running now (the tool loop's latest)."""
        return self.loop.run if self.loop is not None else self.started

    @property
    def request_id(self) -> str:
        return self.run.generation.request_id

    def finish(
        self, parsed: ParsedOutput, finish_reason: str | None, output: list[dict[str, Any]] | None = None
    ) -> ResponseObject:
        """Set the response's final status, output and usage from the parsed reply (``output``:
        its items as they were streamed). A warm-up completes with no output."""
        response, gen = self.response, self.run.generation
        if self.warmup and gen.error is None:
            finish_reason, output = "stop", []
        if gen.error is not None:
            _, info, _ = error_parts(gen.error)
            response.status = "failed"
            response.error = ResponseError(str(info.code or "server_error"), info.message)
        elif finish_reason == "length":
            response.status = "incomplete"
            response.incomplete_details = IncompleteDetails("max_output_tokens")
        elif finish_reason == "abort":
            response.status = "cancelled"
        else:
            response.status = "completed"
        item_status = "completed" if response.status == "completed" else "incomplete"
        if output is None:
            output = [sealed(item, self.seal) for item in output_items(parsed, item_status, self.names)]
        response.output = output
        response.usage = self.response_usage()
        response.completed_at = int(time.time()) if response.status == "completed" else None
        return response

    def fail(self, exc: BaseException) -> None:
        """The response failed with ``exc`` (its output so far kept)."""
        _, info, _ = error_parts(exc)
        self.response.status = "failed"
        self.response.error = ResponseError(str(info.code or "server_error"), info.message)
        self.response.usage = self.response_usage()

    async def fail_keeping(self, exc: BaseException, output: list[dict[str, Any]]) -> None:
        """The response failed with ``exc``, ``output`` (every item so far) kept, and stored, so a
        client that reads it can retrieve what ran."""
        self.response.output = list(output)
        self.fail(exc)
        await self.save()

    def response_usage(self) -> ResponseUsage:
        usage = self.usage()
        return ResponseUsage(
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.total_tokens,
            InputTokensDetails(usage.cached_tokens),
            OutputTokensDetails(usage.reasoning_tokens),
        )

    def usage(self) -> Usage:
        """The response's usage so far: every reply of the model in it."""
        return self.loop.usage if self.loop is not None else self.run.generation.usage

    async def close_round(self) -> None:
        """End the running reply's generation and close it (its lease, metrics, the program's turn)."""
        await close_reply(self.run)

    def stored(self) -> StoredResponse:
        history, start = (self.loop.conversation, self.loop.round_start) if self.loop else (self.history, 0)
        messages = history + round_messages(self.response.output[start:])
        return StoredResponse(
            owner=self.owner,
            response=self.response,
            input_items=self.input_items,
            messages=messages,
            engine=self.run.generation.engine.address,
            request_id=self.run.generation.filed_id,  # what cancel aborts: the key's own request
            program=self.program,
        )

    async def save(self) -> bool:
        """Store the response as it stands (False: not stored, or cancelled meanwhile)."""
        return self.store is not None and await self.store.save(self.stored())

    def events(self, error_fields: ErrorFields = sse_error_fields) -> ResponseEvents:
        """The turn's stream of events (``error_fields``: the transport's error event)."""
        labels = self.loop.rounds.labels if self.loop is not None else None
        return ResponseEvents(self.response, error_fields, labels, self.names, self.seal)

    async def closing_events(self, events: ResponseEvents) -> list[Event]:
        """The last item's closing events, then (the response finished and stored) the final event."""
        out = events.ending()
        self.finish(events.parsed, events.finish_reason, output=events.output)
        try:
            await self.save()
        except GatewayError as exc:  # the store failed at the end (Redis down): the client hears why, then failed
            return out + events.error(exc)
        return out + events.final()


async def start_turn(
    core: ChatCore,
    host: McpHost,
    store: ResponseStore | None,
    body: ResponsesRequest,
    *,
    request_id: str,
    arrival: float,
    context: RequestContext,
    recent: Mapping[str, StoredResponse] | None = None,
    warmup: bool = False,
) -> Turn:
    """Validate ``body``, read its chain (from ``recent`` first: a WebSocket connection's
    responses), and start its generation on the chat core (``host``: the MCP tools' servers);
    ``warmup``: see the module doc."""
    history: list[dict[str, Any]] = []
    previous_output: list[dict[str, Any]] = []  # the output of the response this one continues
    response_id = new_id("resp")
    chain = response_id  # the agent program: the chain's first response
    if body.previous_response_id is not None:
        previous = (recent or {}).get(body.previous_response_id) or await need_store(
            store, "previous_response_id"
        ).load(body.previous_response_id, context.key, param="previous_response_id")
        history, previous_output = previous.messages, previous.response.output
        chain = previous.program or previous.response.id
        if context.engine is None and previous.engine is not None:
            context = dataclasses.replace(context, engine=previous.engine)
    elif body.prompt_cache_key:
        # A response that starts a chain under a prompt_cache_key is a turn of that key's program: an
        # agent that keeps its own history (Codex: store false, no previous_response_id, one key a
        # session) sends each turn as a new chain, which was a new program each time. Responses chained
        # to this one inherit it.
        chain = f"prompt_cache_key\0{body.prompt_cache_key}"
    if body.background and (not body.store or store is None):
        need_store(store, "background")
        raise BadRequestError("background responses must be stored: set `store` to true", param="background")
    messages, input_items = it.input_messages(body.input, core.sealer)
    if not messages and not history:
        raise BadRequestError("`input` must hold at least one message or item", param="input")
    system = [{"role": "system", "content": body.instructions}] if body.instructions else []
    text = body.text or TextConfig()
    offer = client_tools(body.tools, host.hosted_by, host.omit_unrunnable)
    tools, mcp_tools = offer.functions, offer.mcp
    reasoning = responses_reasoning(body.reasoning)
    refuse_unsupported(body)
    options = {
        "reasoning_effort": reasoning["effort"],
        "model": body.model,
        "parallel_tool_calls": body.parallel_tool_calls,
        "response_format": None if warmup else it.response_format(text.format),
        "temperature": body.temperature,
        "top_p": body.top_p,
        "seed": body.seed,
        "user": body.user,
        "cache_salt": body.cache_salt,
        **sampling_extras(body),
    }
    context = dataclasses.replace(context, program=chain)

    async def start(
        conversation: list[dict[str, Any]], tool_choice: Any, max_tokens: int | None, reply_id: str
    ) -> ChatRun:
        nonlocal context
        chat = chat_request(
            system + conversation, tools=offered_tools, tool_choice=tool_choice, max_tokens=max_tokens, **options
        )
        if warmup or context.admitted:  # a warm-up's one token, a later round's budget left: min_tokens fits them
            chat.min_tokens = min(chat.min_tokens, max_tokens or chat.min_tokens)
        run = await core.start(
            chat,
            request_id=reply_id,
            arrival=arrival,
            context=context,
            budget_param="max_output_tokens",
            thinking_params=RESPONSES_THINKING,
        )
        context = run.generation.context  # admitted: the next rounds are not charged again
        return run

    rounds = None
    conversation = history + messages
    if mcp_tools:
        toolset = await list_servers(resolve_servers(mcp_tools, host.allowlist), host.lists)
        rounds = McpRounds(host, toolset, start, body.max_output_tokens, request_id)
        offered = rounds.toolset.offer({tool["name"] for tool in tools})
        conversation = await answer_approvals(rounds, body.input, previous_output, conversation)
        offered_tools = chat_tools(tools + offered)
    else:
        offered_tools = chat_tools(tools)
    it.check_call_outputs(conversation)
    tool_choice = None if warmup else it.chat_tool_choice(body.tool_choice)  # a warm-up may not be forced
    run = await start(conversation, tool_choice, 1 if warmup else body.max_output_tokens, round_id(request_id, 0))
    params = run.generation.choices[0].params
    response = ResponseObject(
        id=response_id,
        created_at=int(time.time()),
        status="in_progress",
        model=body.model or core.model.name,
        background=body.background,
        instructions=body.instructions,
        max_output_tokens=body.max_output_tokens,
        metadata=body.metadata or {},
        parallel_tool_calls=body.parallel_tool_calls is not False,
        previous_response_id=body.previous_response_id,
        store=body.store and store is not None,
        temperature=params.temperature,
        text=text,
        tool_choice=body.tool_choice or "auto",
        tools=offer.echoed + [echoed(tool) for _, tool in mcp_tools],
        top_p=params.top_p,
        presence_penalty=params.presence_penalty,
        frequency_penalty=params.frequency_penalty,
        truncation=body.truncation or "disabled",
        user=body.user,
        prompt_cache_key=body.prompt_cache_key,
        reasoning=reasoning,
    )
    turn = Turn(response, run, store if response.store else None, context.key, conversation, input_items, chain, warmup)
    turn.names, turn.omitted = offer.names, offer.omitted
    if INCLUDE_ENCRYPTED in (body.include or ()):
        turn.seal = functools.partial(seal_reasoning, core.sealer)
    if rounds is not None:
        turn.loop = ToolLoop(rounds, run, conversation)
    return turn
