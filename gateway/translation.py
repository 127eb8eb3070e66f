"""What the APIs that translate onto the chat core share (the Responses API's items,
the Anthropic Messages API's content blocks): the text of content parts and the chat
request their messages become (new object ids: ``gateway.api_types.ids``). Neither API
reads through the other's modules.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentgate.gateway.api_types.openai import ChatCompletionRequest, ChatMessage
from agentgate.gateway.errors import BadRequestError


def text_of(content: Any, param: str, kinds: frozenset[str]) -> str:
    """A message's content: a string, or its text parts (of ``kinds``) joined; 400 naming the
    part otherwise (this model reads text only)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequestError("content must be a string or a list of content parts", param=param)
    texts = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        text = part.get("text", part.get("refusal")) if kind in kinds else None
        if not isinstance(text, str):
            raise BadRequestError(
                f"content of type {kind!r} is not supported (this model reads text only)", param=f"{param}[{i}]"
            )
        texts.append(text)
    return "".join(texts)


def chat_request(messages: list[dict[str, Any]], **fields: Any) -> ChatCompletionRequest:
    """The chat core's request of ``messages`` (plain dicts) and ``fields``; a message that is not
    a chat message is a 400 on ``input``."""
    try:
        decoded = msgspec.convert(messages, list[ChatMessage])
    except msgspec.ValidationError as exc:  # a stored chain is ours; this is the client's input
        raise BadRequestError(f"invalid input: {exc}", param="input") from None
    return ChatCompletionRequest(messages=decoded, **fields)
