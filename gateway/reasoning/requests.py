"""A chat request to a reasoning model, as the chat core starts it: the server's template defaults
under the request's own ``chat_template_kwargs``, and the thinking block the engine enforces
(:class:`~engine.front.protocol.ThinkingSpec`: the parser's tags, whether the rendered prompt opened
the block, the budget of :mod:`gateway.reasoning.budgets`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from agentgate.engine.front.protocol import ThinkingSpec
from agentgate.gateway.api_types.openai import ChatCompletionRequest
from agentgate.gateway.reasoning.budgets import thinking_budget

if TYPE_CHECKING:
    from agentgate.gateway.served_model import ServedModel


@dataclass(frozen=True, slots=True)
class ThinkingParams:
    """An API's names for the request's thinking budget and effort, which its 400s name."""

    budget: str = "thinking_token_budget"
    effort: str = "reasoning_effort"


CHAT_THINKING = ThinkingParams()
RESPONSES_THINKING = ThinkingParams(effort="reasoning.effort")


def with_template_defaults(request: ChatCompletionRequest, defaults: dict[str, Any]) -> ChatCompletionRequest:
    """``request`` with ``defaults`` (``--default-chat-template-kwargs``) under its own
    ``chat_template_kwargs``."""
    if not defaults:
        return request
    merged = {**defaults, **(request.chat_template_kwargs or {})}
    return msgspec.structs.replace(request, chat_template_kwargs=merged)


def thinking_spec(
    model: ServedModel,
    request: ChatCompletionRequest,
    prompt: Sequence[int],
    max_tokens: int,
    params: ThinkingParams = CHAT_THINKING,
) -> ThinkingSpec | None:
    """What the engine enforces of ``request``'s thinking (None: the model has no reasoning parser;
    a budget asked of it is then a 400 naming the field). ``max_tokens``: the output budget the
    thinking shares with the answer."""
    budget = thinking_budget(
        request.thinking_token_budget,
        request.reasoning_effort,
        max_tokens,
        model.reasoning_budget,
        has_parser=model.reasoning is not None,
        budget_param=params.budget,
        effort_param=params.effort,
    )
    parser = model.reasoning
    if parser is None:
        return None
    tokenizer = model.tokenizer
    return parser.thinking_spec(
        lambda text: tokenizer.encode(text, add_special_tokens=False),
        prompt,
        lambda ids: tokenizer.decode(ids, skip_special_tokens=False),
        budget,
    )
