"""OpenAI-compatible generation routes: chat completions, completions, models.

Chat completions take ``tools``, ``tool_choice``, ``parallel_tool_calls`` and
``response_format``: the prompt presents the tools, the reply's tool-call
markup becomes ``tool_calls``, and forced calls and response formats are
enforced by constrained decoding (see :func:`gateway.prompts.tool_plan`).
"""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from agentgate.gateway.errors import BadRequestError
from agentgate.gateway.generation import Generation
from agentgate.gateway.middleware import request_id_of
from agentgate.gateway.prompts import (
    chat_logprobs,
    chat_prompt,
    check_context,
    check_n,
    completion_prompts,
    sampling_params,
    tool_plan,
)
from agentgate.gateway.responses import ChatFormat, CompletionFormat
from agentgate.gateway.schemas import ChatCompletionRequest, CompletionRequest, ModelCard, ModelList, decode_body, encode
from agentgate.gateway.state import GatewayState
from agentgate.gateway.streaming import stream_generation

JSON = "application/json"


async def chat_completions(request: Request) -> Response:
    arrival = time.monotonic()
    gw: GatewayState = request.state.gateway
    body = decode_body(await request.body(), ChatCompletionRequest)
    gw.check_model(body.model)
    check_n(body.n)
    prompt = chat_prompt(gw.tokenizer, body)
    plan = tool_plan(gw.tokenizer, body, getattr(gw.settings, "tool_call_parser", None))
    max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    check_context(len(prompt), max_tokens, gw.max_model_len, "messages")
    params = sampling_params(
        body, max_tokens=max_tokens, logprobs=chat_logprobs(body), vocab_size=gw.vocab_size, structured=plan.structured
    )
    gen = gw.start(request_id_of(request.scope), arrival, [prompt], params, body.n)
    gen.constraint_param = plan.constraint_param
    include_usage = body.stream_options is not None and body.stream_options.include_usage
    fmt = ChatFormat(gen, body.model or gw.model_name, include_usage=include_usage, tools=plan)
    if body.stream:
        return stream_generation(gen, fmt, prime=plan.structured is not None)
    return await _complete(request, gen, fmt.body)


async def completions(request: Request) -> Response:
    arrival = time.monotonic()
    gw: GatewayState = request.state.gateway
    body = decode_body(await request.body(), CompletionRequest)
    gw.check_model(body.model)
    check_n(body.n)
    if body.echo and body.logprobs is not None:
        raise BadRequestError("`echo` with `logprobs` needs prompt logprobs, which this server does not compute",
                              param="echo")  # fmt: skip
    if body.suffix:
        raise BadRequestError("`suffix` is not supported", param="suffix")
    prompts = completion_prompts(gw.tokenizer, body, gw.vocab_size)
    max_tokens = 16 if body.max_tokens is None else body.max_tokens
    for prompt in prompts:
        check_context(len(prompt), max_tokens, gw.max_model_len, "prompt")
    params = sampling_params(body, max_tokens=max_tokens, logprobs=body.logprobs, vocab_size=gw.vocab_size)
    gen = gw.start(request_id_of(request.scope), arrival, prompts, params, body.n)
    include_usage = body.stream_options is not None and body.stream_options.include_usage
    fmt = CompletionFormat(gen, body.model or gw.model_name, include_usage=include_usage, echo=body.echo)
    if body.stream:
        return stream_generation(gen, fmt)
    return await _complete(request, gen, fmt.body)


async def _complete(request: Request, gen: Generation, render) -> Response:
    """Run a non-streaming request to its end; a client that leaves meanwhile aborts it."""
    try:
        await gen.collect(request.receive)
    finally:
        gen.close()
    if gen.disconnected:
        return Response(status_code=499)  # nobody is listening any more
    if gen.error is not None:
        raise gen.error
    return Response(render(), media_type=JSON)


async def models(request: Request) -> Response:
    gw: GatewayState = request.state.gateway
    cards = [ModelCard(name, gw.created, gw.max_model_len, gw.model_root) for name in gw.model_names]
    return Response(encode(ModelList(cards)), media_type=JSON)


routes = [
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/v1/completions", completions, methods=["POST"]),
    Route("/v1/models", models, methods=["GET"]),
]
