"""The Anthropic Messages API: ``POST /v1/messages`` (streamed or not) and
``POST /v1/messages/count_tokens``, on the chat core.

The request is translated onto a chat request
(:mod:`gateway.anthropic_api.translate`), run by :func:`~gateway.chat.start_chat`
like any chat completion (same prompt, tool plan, grammar and parsing), and
written back as Anthropic content blocks and events
(:mod:`gateway.formats.anthropic`). Keys come as ``x-api-key`` or Bearer
(``gateway.state.auth``); errors are Anthropic-shaped
(:mod:`gateway.http.anthropic_errors`). ``anthropic-beta`` values are accepted or refused by
name (:mod:`gateway.anthropic_api.betas`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from agentgate.gateway.anthropic_api.betas import check_betas
from agentgate.gateway.anthropic_api.mcp_loop import collect_message, message_format, start_connector, stream_message
from agentgate.gateway.anthropic_api.thinking_config import MESSAGES_THINKING, chat_fields, thinking_request
from agentgate.gateway.anthropic_api.translate import to_chat
from agentgate.gateway.api_types.anthropic import CountTokensRequest, Message, MessagesRequest, TokenCount
from agentgate.gateway.api_types.ids import new_id
from agentgate.gateway.api_types.openai import decode_body, encode
from agentgate.gateway.app_state import GatewayState
from agentgate.gateway.chat import start_chat
from agentgate.gateway.formats.anthropic import MessagesStream, message_blocks, message_usage, stop_reason
from agentgate.gateway.http.middleware import context_of, request_id_of
from agentgate.gateway.http.sse import collect_or_raise, stream_generation, stream_rounds, until_disconnect
from agentgate.gateway.prompts import chat_prompt

JSON = "application/json"


async def messages(request: Request) -> Response:
    arrival = time.monotonic()
    gw: GatewayState = request.state.gateway
    check_betas(request.headers.get("anthropic-beta"))
    body = decode_body(await request.body(), MessagesRequest)
    thinking = chat_fields(
        thinking_request(body.thinking, body.output_config, body.max_tokens), gw.model.reasoning is not None
    )
    if body.mcp_servers:
        return await _connector(request, gw, body, arrival)
    chat = to_chat(
        body,
        gw.sealer,
        max_tokens=body.max_tokens,
        stop=body.stop_sequences,
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        **thinking,
    )
    run = await start_chat(
        gw.model,
        gw.dispatcher,
        chat,
        turns=gw.turn_tokens,
        request_id=request_id_of(request.scope),
        arrival=arrival,
        context=context_of(request.scope),
        thinking_params=MESSAGES_THINKING,
    )
    message = Message(id=new_id("msg"), model=body.model)
    gen = run.generation
    if body.stream:
        message.usage = message_usage(gen.usage)
        fmt = MessagesStream(message, gw.sealer)
        prime = run.plan.structured is not None
        return stream_generation(gen, fmt, send_timeout=gw.settings.sse_send_timeout, prime=prime)
    if not await collect_or_raise(gen, request.receive):
        return Response(status_code=499)  # nobody is listening any more
    choice = gen.choices[0]
    message.content = message_blocks(choice.reply, gw.sealer)
    message.stop_reason = stop_reason(choice.reply_finish, choice.matched_stop)
    message.stop_sequence = choice.matched_stop if message.stop_reason == "stop_sequence" else None
    message.usage = message_usage(gen.usage)
    return Response(encode(message), media_type=JSON)


async def _connector(request: Request, gw: GatewayState, body: MessagesRequest, arrival: float) -> Response:
    """A request with ``mcp_servers``: the server runs their tools (:mod:`gateway.anthropic_api.mcp_loop`)."""
    loop = await start_connector(
        gw.chat,
        gw.mcp,
        body,
        request_id=request_id_of(request.scope),
        arrival=arrival,
        context=context_of(request.scope),
        max_tokens=body.max_tokens,
        stop=body.stop_sequences,
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
    )
    message = Message(id=new_id("msg"), model=body.model)
    if body.stream:
        message.usage = message_usage(loop.run.generation.usage)
        fmt = message_format(loop, message, gw.sealer)
        prime = loop.run.plan.structured is not None
        send_timeout = gw.settings.sse_send_timeout
        return stream_rounds(
            loop.run.generation, stream_message(loop, fmt), loop.close_round, send_timeout=send_timeout, prime=prime
        )

    async def watched(step: Callable[[], Awaitable[None]]) -> bool:
        return not await until_disconnect(request.receive, step)

    if not await collect_message(loop, message, watched):
        return Response(status_code=499)  # nobody is listening any more
    return Response(encode(message), media_type=JSON)


async def count_tokens(request: Request) -> Response:
    gw: GatewayState = request.state.gateway
    check_betas(request.headers.get("anthropic-beta"))
    body = decode_body(await request.body(), CountTokensRequest)
    gw.model.check(body.model)
    prompt = chat_prompt(gw.model.tokenizer, to_chat(body, gw.sealer))
    return Response(encode(TokenCount(len(prompt))), media_type=JSON)


routes = [
    Route("/v1/messages", messages, methods=["POST"]),
    Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
]
