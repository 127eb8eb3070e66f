"""Anthropic-shaped error bodies on the Anthropic routes (``/v1/messages...``).

The gateway raises its errors one way (:mod:`gateway.errors`, OpenAI's body);
this pure-ASGI middleware rewrites the JSON error responses of the Anthropic
routes, whoever answered them (authentication, body limit, rate limit,
validation, the route itself), into Anthropic's
``{"type": "error", "error": {"type", "message"}}`` with the same status (the
field an error is about leads its message, as in Anthropic's).
Other routes and successful responses pass through untouched.
"""

from __future__ import annotations

import msgspec
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentgate.gateway.formats.anthropic import anthropic_error

PREFIX = "/v1/messages"


class AnthropicErrorMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(PREFIX):
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        chunks: list[bytes] = []

        async def rewrite(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start" and message["status"] >= 400:
                start = message
                return
            if start is None:
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            body = _anthropic_body(start["status"], b"".join(chunks))
            replaced = (b"content-length", b"content-type")
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() not in replaced]
            headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, rewrite)


def _anthropic_body(status: int, body: bytes) -> bytes:
    try:
        error = msgspec.json.decode(body)["error"]
        message = f"{error['param']}: {error['message']}" if error.get("param") else error["message"]
    except (msgspec.DecodeError, KeyError, TypeError, AttributeError):
        message = body.decode("utf-8", "replace") or f"HTTP {status}"
    return msgspec.json.encode(anthropic_error(status, message))
