"""OpenAI-compatible generation routes: chat completions, completions, models.

Chat completions run on the shared chat core (:mod:`gateway.chat`: prompt,
tool plan, grammar, dispatch, reply parsing); this module decodes OpenAI's
request and writes OpenAI's response (:mod:`gateway.formats.openai`). Chat
completions take ``tools``, ``tool_choice``, ``parallel_tool_calls`` and
``response_format``: the prompt presents the tools, the reply's tool-call
markup becomes ``tool_calls``, and forced calls and response formats are
enforced by constrained decoding (see :func:`gateway.prompts.tool_plan`).
"""

from __future__ import annotations

import time

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from agentgate.gateway.admission.bounds import OFF_LOOP_CHARS, check_prompt_chars
from agentgate.gateway.admission.output_budget import COMPLETIONS_DEFAULT
from agentgate.gateway.api_types.openai import (
    COMPLETION_REASONING_FIELDS,
    ChatCompletionRequest,
    CompletionRequest,
    ModelCard,
    ModelList,
    decode_body,
    encode,
)
from agentgate.gateway.app_state import GatewayState
from agentgate.gateway.chat import start_chat
from agentgate.gateway.dispatch import Job, dispatch
from agentgate.gateway.errors import BadRequestError
from agentgate.gateway.formats.openai import ChatFormat, CompletionFormat
from agentgate.gateway.generation import Generation
from agentgate.gateway.http.middleware import context_of, request_id_of
from agentgate.gateway.http.sse import collect_or_raise, stream_generation
from agentgate.gateway.prompts import check_n, completion_prompts, sampling_params

JSON = "application/json"


async def chat_completions(request: Request) -> Response:
    arrival = time.monotonic()
    gw: GatewayState = request.state.gateway
    body = decode_body(await request.body(), ChatCompletionRequest)
    run = await start_chat(
        gw.model,
        gw.dispatcher,
        body,
        turns=gw.turn_tokens,
        request_id=request_id_of(request.scope),
        arrival=arrival,
        context=context_of(request.scope),
    )
    include_usage = body.stream_options is not None and body.stream_options.include_usage
    gen = run.generation
    fmt = ChatFormat(
        gen.request_id,
        gen.created,
        body.model or gw.model.name,
        gw.model.tokenizer,
        num_choices=len(gen.choices),
        include_usage=include_usage,
    )
    if body.stream:
        return stream_generation(
            gen, fmt, send_timeout=gw.settings.sse_send_timeout, prime=run.plan.structured is not None
        )
    return await _complete(request, gen, fmt)


async def completions(request: Request) -> Response:
    arrival = time.monotonic()
    gw: GatewayState = request.state.gateway
    model = gw.model
    body = decode_body(await request.body(), CompletionRequest)
    model.check(body.model)
    check_n(body.n)
    if body.echo and body.logprobs is not None:
        raise BadRequestError(
            "`echo` with `logprobs` needs prompt logprobs, which this server does not compute", param="echo"
        )
    if body.suffix:
        raise BadRequestError("`suffix` is not supported", param="suffix")
    for name in COMPLETION_REASONING_FIELDS:
        if getattr(body, name) is not None:
            raise BadRequestError(
                f"`{name}` is not supported on /v1/completions: a raw prompt has no chat template and no "
                "reasoning parser reads it (use /v1/chat/completions)",
                param=name,
            )
    if body.best_of is not None and body.best_of != body.n:
        raise BadRequestError(
            "`best_of` other than `n` is not supported (this server scores no candidates)", param="best_of"
        )
    texts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
    chars = sum(len(t) for t in texts if isinstance(t, str))
    check_prompt_chars(
        max((len(t) for t in texts if isinstance(t, str)), default=0),
        model.max_model_len,
        model.tokenizer.max_token_bytes,
        "prompt",
    )
    if chars > OFF_LOOP_CHARS:
        prompts = await anyio.to_thread.run_sync(completion_prompts, model.tokenizer, body, model.vocab_size)
    else:
        prompts = completion_prompts(model.tokenizer, body, model.vocab_size)
    budgets = [
        model.budget.resolve(
            body.max_tokens,
            prompt_tokens=len(p),
            max_model_len=model.max_model_len,
            prompt_field="prompt",
            api_default=COMPLETIONS_DEFAULT,
        )
        for p in prompts
    ]
    max_tokens = min(b for b in budgets if b is not None)  # never None: completions have their own default
    params = sampling_params(
        body, max_tokens=max_tokens, logprobs=body.logprobs, vocab_size=model.vocab_size, defaults=model.sampling
    )
    # a session records the prompt as the user's message
    conversation = [{"role": "user", "content": body.prompt}] if isinstance(body.prompt, str) else []
    job = Job(
        request_id_of(request.scope),
        arrival,
        prompts,
        params,
        body.n,
        model=body.model or model.name,
        cache_salt=body.cache_salt or "",
    )
    gen = await dispatch(gw.dispatcher, job, context_of(request.scope), conversation=conversation)
    include_usage = body.stream_options is not None and body.stream_options.include_usage
    fmt = CompletionFormat(
        gen.request_id,
        gen.created,
        body.model or model.name,
        model.tokenizer,
        prompts,
        body.n,
        include_usage=include_usage,
        echo=body.echo,
    )
    if body.stream:
        return stream_generation(gen, fmt, send_timeout=gw.settings.sse_send_timeout)
    return await _complete(request, gen, fmt)


async def _complete(request: Request, gen: Generation, fmt: ChatFormat | CompletionFormat) -> Response:
    """Run a non-streaming request to its end; a client that leaves meanwhile aborts it."""
    if not await collect_or_raise(gen, request.receive):
        return Response(status_code=499)  # nobody is listening any more
    return Response(fmt.body(gen.choices, gen.usage), media_type=JSON)


async def models(request: Request) -> Response:
    model = request.state.gateway.model
    cards = [ModelCard(name, model.created, model.max_model_len, model.root) for name in model.names]
    cards += [ModelCard(name, model.created, model.max_model_len, name, parent=model.name) for name in model.adapters]
    return Response(encode(ModelList(cards)), media_type=JSON)


async def model_card(request: Request) -> Response:
    """One served model by name (404 ``model_not_found`` naming the served ones otherwise)."""
    model = request.state.gateway.model
    name = request.path_params["model_id"]
    model.check(name)
    if name in model.adapters:  # a LoRA adapter: its parent is the model
        card = ModelCard(name, model.created, model.max_model_len, name, parent=model.name)
    else:
        card = ModelCard(name, model.created, model.max_model_len, model.root)
    return Response(encode(card), media_type=JSON)


routes = [
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/v1/completions", completions, methods=["POST"]),
    Route("/v1/models", models, methods=["GET"]),
    Route("/v1/models/{model_id:path}", model_card, methods=["GET"]),
]
