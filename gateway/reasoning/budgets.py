"""A request's thinking budget, in tokens, from what it asked for: an explicit budget (chat and
completions ``thinking_token_budget``, vLLM's name; Messages ``thinking.budget_tokens``), an effort
(chat ``reasoning_effort``, Responses ``reasoning.effort``) or the server's ``--reasoning-budget``.

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

from agentgate.gateway.errors import BadRequestError

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
