"""vLLM's /tokenize and /detokenize."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from agentgate.gateway.api_types.openai import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
    decode_body,
    encode,
)
from agentgate.gateway.app_state import GatewayState
from agentgate.gateway.errors import BadRequestError
from agentgate.gateway.prompts import render_messages

JSON = "application/json"


async def tokenize(request: Request) -> Response:
    gw: GatewayState = request.state.gateway
    body = decode_body(await request.body(), TokenizeRequest)
    gw.model.check(body.model)
    tokenizer = gw.model.tokenizer
    if (body.prompt is None) == (body.messages is None):
        raise BadRequestError("give either `prompt` or `messages`", param="prompt")
    if body.messages is not None:
        # the prompt chat completions would build (tools presented, past calls rendered back)
        text = render_messages(
            tokenizer,
            body.messages,
            tools=body.tools,
            add_generation_prompt=body.add_generation_prompt,
            template_kwargs=gw.model.template_kwargs,
        )
        ids = tokenizer.encode(text, add_special_tokens=bool(body.add_special_tokens))  # the template writes them
    else:
        add_special = True if body.add_special_tokens is None else body.add_special_tokens
        ids = tokenizer.encode(body.prompt, add_special_tokens=add_special)
    assert isinstance(ids, list)
    strs = [tokenizer.id_to_token(i) or "" for i in ids] if body.return_token_strs else None
    return Response(encode(TokenizeResponse(len(ids), gw.model.max_model_len, ids, strs)), media_type=JSON)


async def detokenize(request: Request) -> Response:
    gw: GatewayState = request.state.gateway
    body = decode_body(await request.body(), DetokenizeRequest)
    gw.model.check(body.model)
    vocab = gw.model.tokenizer.vocab_size
    if any(not 0 <= t < vocab for t in body.tokens):
        raise BadRequestError(f"token ids must be in [0, {vocab})", param="tokens")
    text = gw.model.tokenizer.decode(body.tokens, skip_special_tokens=False)
    return Response(encode(DetokenizeResponse(text)), media_type=JSON)


routes = [
    Route("/tokenize", tokenize, methods=["POST"]),
    Route("/detokenize", detokenize, methods=["POST"]),
]
