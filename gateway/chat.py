"""The core under every chat-shaped API: a chat request in, a running
generation and API-neutral reply pieces out.

An API module translates its wire request into a
:class:`~gateway.api_types.openai.ChatCompletionRequest` (OpenAI's chat completions
need no translation; the Responses and Anthropic Messages APIs map their
items and content blocks onto messages, tools and tool_choice), calls
:func:`start_chat`, and writes the reply pieces each choice read through ``run.plan``
(``gateway.choice``) in its own wire shape (``gateway.formats``)::

    run = await start_chat(model, dispatcher, request, turns=..., request_id=..., arrival=..., context=...)
    run.generation    # running: its choices' events (their replies read), then its usage
    run.plan          # how its replies are read (gateway.replies), what its grammar enforces

Shared by all of them, so that no API module repeats it: the prompt (the
chat template, tools presented, past calls rendered back), the tool plan
(which parser reads the reply, how many calls are kept, the grammar the
engine enforces), sampling parameters, admission, routing and registration
(``gateway.dispatch``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio
import msgspec

from agentgate.gateway.admission.bounds import OFF_LOOP_CHARS, check_prompt_chars, message_chars
from agentgate.gateway.api_types.openai import ChatCompletionRequest
from agentgate.gateway.context import RequestContext
from agentgate.gateway.dispatch import Dispatcher, dispatch
from agentgate.gateway.generation import Generation
from agentgate.gateway.job import Job
from agentgate.gateway.programs.tags import program_tag
from agentgate.gateway.programs.turn_tokens import TurnStart, TurnTokens
from agentgate.gateway.prompts import (
    chat_logprobs,
    chat_prompt_text,
    check_n,
    check_request_json,
    program_prompt,
    sampling_params,
    tool_plan,
)
from agentgate.gateway.reasoning.requests import CHAT_THINKING, ThinkingParams, thinking_spec, with_template_defaults
from agentgate.gateway.served_model import ServedModel
from agentgate.gateway.state.sealing import Sealer
from agentgate.gateway.tools.plan import ToolPlan, stops_outside_calls


@dataclass(frozen=True, slots=True)
class ChatRun:
    """A chat request admitted and running: its generation and how its replies are read."""

    generation: Generation
    plan: ToolPlan


@dataclass(frozen=True, slots=True)
class ChatCore:
    """What starting a chat turn needs, as a route hands it below itself (never the whole
    ``GatewayState``): the served model, the dispatcher, the programs' last turns, and the sealer
    of what clients send back (reasoning, compactions: ``gateway.state.sealing``)."""

    model: ServedModel
    dispatcher: Dispatcher
    turns: TurnTokens | None = None
    sealer: Sealer = field(default_factory=Sealer.random)

    async def start(
        self,
        request: ChatCompletionRequest,
        *,
        request_id: str,
        arrival: float,
        context: RequestContext,
        budget_param: str | None = None,
        thinking_params: ThinkingParams = CHAT_THINKING,
    ) -> ChatRun:
        """:func:`start_chat` on these services."""
        return await start_chat(
            self.model,
            self.dispatcher,
            request,
            turns=self.turns,
            request_id=request_id,
            arrival=arrival,
            context=context,
            budget_param=budget_param,
            thinking_params=thinking_params,
        )


async def start_chat(
    model: ServedModel,
    dispatcher: Dispatcher,
    request: ChatCompletionRequest,
    *,
    turns: TurnTokens | None,
    request_id: str,
    arrival: float,
    context: RequestContext,
    budget_param: str | None = None,
    thinking_params: ThinkingParams = CHAT_THINKING,
) -> ChatRun:
    """Validate ``request`` (400-class errors name the field), build its prompt, tool plan and
    sampling parameters, and dispatch it: the engine has it when this returns. ``turns``: the
    programs' last turns as tokens (None: not kept, ``gateway.programs.turn_tokens``). ``budget_param``:
    the API's name for max_tokens in its errors (Responses: ``max_output_tokens``); the server's
    output budget applies (:mod:`gateway.admission.output_budget`). A prompt too long for the context is refused by its
    characters before it is tokenized; a large one is rendered and tokenized on a worker thread,
    so the event loop (every other stream, ``/health``) never waits on it. A reasoning model's
    request gets its thinking budget (``request.thinking_token_budget`` or ``reasoning_effort``, 400s
    naming the fields ``thinking_params`` says: :func:`gateway.reasoning.requests.thinking_budget`) and the engine the
    thinking block to enforce."""
    model.check(request.model)
    request = with_template_defaults(request, model.template_kwargs)
    check_n(request.n)
    check_request_json(request)
    chars = message_chars(request.messages)
    check_prompt_chars(chars, model.max_model_len, model.tokenizer.max_token_bytes, "messages")
    program = program_tag(
        context,
        request.messages,
        tools_offered=bool(request.tools),
        prompt_cache_key=request.prompt_cache_key,
        user=request.user,
        adapter=request.model if request.model in model.adapters else "",
    )
    program_id = program.program_id if program is not None else None
    if chars > OFF_LOOP_CHARS:
        text, prompt, plan = await anyio.to_thread.run_sync(_prompt_and_plan, model, turns, request, program_id)
    else:
        text, prompt, plan = _prompt_and_plan(model, turns, request, program_id)
    requested, param = request.max_tokens, "max_tokens"
    if request.max_completion_tokens is not None:
        requested, param = request.max_completion_tokens, "max_completion_tokens"
    param = budget_param or param
    max_tokens = model.budget.resolve(
        requested, prompt_tokens=len(prompt), max_model_len=model.max_model_len, param=param
    )
    output_budget = max_tokens if max_tokens is not None else model.max_model_len - len(prompt)
    thinking = thinking_spec(model, request, prompt, output_budget, thinking_params)
    structured = plan.structured
    if structured is not None and plan.forced:  # the reply must end whole within its budget
        structured = msgspec.structs.replace(structured, max_tokens=output_budget)
    params = sampling_params(
        request,
        max_tokens=max_tokens,
        logprobs=chat_logprobs(request),
        vocab_size=model.vocab_size,
        structured=structured,
        defaults=model.sampling,
    )
    params = stops_outside_calls(params, plan)
    turn = None
    if turns is not None and program_id is not None and request.n == 1:
        turn = TurnStart(turns, program_id, text, prompt)
    job = Job(
        request_id,
        arrival,
        [prompt],
        params,
        request.n,
        program,
        turn,
        plan.constraint_param,
        param,
        request.model or model.name,
        plan,
        model.reasoning if thinking is not None else None,
        thinking,
        request.cache_salt or "",
    )
    generation = await dispatch(dispatcher, job, context, conversation=request.messages)
    return ChatRun(generation, plan)


def _prompt_and_plan(
    model: ServedModel, turns: TurnTokens | None, request: ChatCompletionRequest, program_id: str | None
) -> tuple[str, list[int], ToolPlan]:
    """The prompt's text and token ids (a program's turn starts with its last turn's own tokens:
    :mod:`gateway.programs.turn_tokens`), and the tool plan."""
    tokenizer = model.tokenizer
    text = chat_prompt_text(tokenizer, request)
    prompt = program_prompt(tokenizer, request, text, turns, program_id)
    return text, prompt, tool_plan(tokenizer, request, model.tool_call_parser, model.max_forced_tool_calls)
