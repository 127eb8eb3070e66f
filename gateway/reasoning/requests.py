"""A chat request to a reasoning model, as the chat core starts it: the server's template defaults
under the request's own ``chat_template_kwargs``, and the thinking block the engine enforces
(:class:`~engine.front.protocol.ThinkingSpec`: the parser's tags, whether the rendered prompt opened
the block, the budget below).

A request's thinking budget, in tokens, from what it asked for: an explicit budget (chat
``thinking_token_budget``, vLLM's name; Messages ``thinking.budget_tokens``), an effort (chat
``reasoning_effort``, Responses ``reasoning.effort``) or the server's ``--reasoning-budget``.
``/v1/completions`` refuses these fields (a raw prompt: no template, no parser; docs/reasoning.md).

Thinking and answer share ``max_tokens`` (Anthropic's rule): a budget must leave room for an answer,
so an explicit one of ``max_tokens`` or more is a 400 naming its field, and an effort is a share of
``max_tokens`` with a ceiling (:data:`EFFORT_BUDGETS`, stated in docs/reasoning.md):

========  ===========================  ======
effort    budget                       note
========  ===========================  ======
none      0                            the engine closes the block at once
minimal   min(64, max_tokens // 8)
low       min(512, max_tokens // 4)
medium    min(2048, max_tokens // 2)
high      min(8192, 3 * max_tokens // 4)
========  ===========================  ======

The server default is kept under half of ``max_tokens``. A budget (explicit or effort) on a model
without a reasoning parser is a 400 naming the field: the server cannot keep it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from agentgate.engine.front.protocol import ThinkingSpec
from agentgate.gateway.api_types.openai import ChatCompletionRequest
from agentgate.gateway.errors import BadRequestError

if TYPE_CHECKING:
    from agentgate.gateway.served_model import ServedModel


EFFORT_BUDGETS: dict[str, tuple[int, int, int]] = {
    # effort: (ceiling, numerator, denominator) of max_tokens
    "none": (0, 0, 1),
    "minimal": (64, 1, 8),
    "low": (512, 1, 4),
    "medium": (2048, 1, 2),
    "high": (8192, 3, 4),
}


def effort_budget(effort: str, max_tokens: int) -> int:
    """The budget of ``effort`` under ``max_tokens`` (always less than ``max_tokens``)."""
    ceiling, num, den = EFFORT_BUDGETS[effort]
    return min(ceiling, max_tokens * num // den)


def thinking_budget(
    explicit: int | None,
    effort: str | None,
    max_tokens: int,
    server_default: int | None,
    *,
    has_parser: bool,
    budget_param: str,
    effort_param: str,
) -> int | None:
    """The thinking budget a request gets (None: only ``max_tokens`` bounds the thinking).

    ``explicit`` wins over ``effort``, which wins over ``server_default``. 400s name the field:
    a negative budget or one of ``max_tokens`` or more (``budget_param``), an unknown effort
    (``effort_param``), either on a model without a reasoning parser (``has_parser`` false)."""
    if explicit is not None:
        if explicit < 0:
            raise BadRequestError(f"`{budget_param}` must be 0 or more, got {explicit}", param=budget_param)
        if explicit >= max_tokens:
            raise BadRequestError(
                f"`{budget_param}` ({explicit}) must be less than the output budget ({max_tokens} tokens): "
                "thinking and answer share it, so the answer needs room",
                param=budget_param,
            )
        _need_parser(has_parser, budget_param)
        return explicit
    if effort is not None:
        if effort not in EFFORT_BUDGETS:
            raise BadRequestError(
                f"`{effort_param}` must be one of {', '.join(EFFORT_BUDGETS)}, got {effort!r}", param=effort_param
            )
        _need_parser(has_parser, effort_param)
        return effort_budget(effort, max_tokens)
    if server_default is None or not has_parser:
        return None
    return min(server_default, max_tokens // 2)


def _need_parser(has_parser: bool, param: str) -> None:
    if not has_parser:
        raise BadRequestError(
            f"`{param}` needs a reasoning model: this server has no reasoning parser "
            "(its chat template opens no thinking block; see --reasoning-parser)",
            param=param,
        )


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


SUMMARIES = ("auto", "concise", "detailed")


def responses_reasoning(reasoning: Any) -> dict[str, Any]:
    """The Responses API's ``reasoning`` object, checked: ``effort`` (the budget's, see
    :func:`thinking_budget`) and ``summary`` (accepted; no summary is written: the
    reasoning item carries the whole text and an empty ``summary``), as the response echoes them."""
    if reasoning is None:
        return {"effort": None, "summary": None}
    if not isinstance(reasoning, dict):
        raise BadRequestError("`reasoning` must be an object", param="reasoning")
    effort = reasoning.get("effort")
    if effort is not None and not isinstance(effort, str):
        raise BadRequestError("`reasoning.effort` must be a string", param="reasoning.effort")
    summary = reasoning.get("summary", reasoning.get("generate_summary"))
    if summary is not None and summary not in SUMMARIES:
        raise BadRequestError(f"`reasoning.summary` must be one of {', '.join(SUMMARIES)}", param="reasoning.summary")
    return {"effort": effort, "summary": summary}
