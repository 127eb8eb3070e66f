"""A Messages request's ``thinking`` and ``output_config.effort``, checked and read.

- ``{"type": "enabled", "budget_tokens": N}``: a budget of N thinking tokens. Thinking and answer
  share ``max_tokens`` (Anthropic's rule), so N must be less than ``max_tokens``: otherwise a 400
  naming ``thinking.budget_tokens``. Anthropic's own floor of 1,024 is not kept: small models
  think in tens of tokens.
- ``{"type": "disabled"}``: no thinking (on a reasoning model, a budget of 0: the engine closes
  the block at once).
- ``{"type": "adaptive"}``: the model decides how much to think, within the budget of
  ``output_config.effort`` (default ``high``; Anthropic's ``xhigh`` and ``max`` are read as ``high``,
  the top of the effort table: docs/anthropic-thinking.md). On a model without reasoning it is
  accepted and does nothing.
- absent: the server's ``--reasoning-budget``, if any.

``display`` (``summarized`` / ``omitted``) is accepted; the thinking is always returned whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentgate.gateway.errors import BadRequestError
from agentgate.gateway.reasoning.requests import ThinkingParams

MODES = ("enabled", "disabled", "adaptive")
EFFORTS = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}
DEFAULT_EFFORT = "high"
MESSAGES_THINKING = ThinkingParams(budget="thinking.budget_tokens", effort="output_config.effort")


@dataclass(frozen=True, slots=True)
class ThinkingRequest:
    """What a request asked of the thinking: ``mode`` (one of :data:`MODES`, or None: nothing
    asked), an explicit ``budget_tokens``, or an ``effort`` (the budgets module's name)."""

    mode: str | None = None
    budget_tokens: int | None = None
    effort: str | None = None


def thinking_request(thinking: Any, output_config: Any, max_tokens: int) -> ThinkingRequest:
    """The request's ``thinking`` and ``output_config`` read (see the module doc); 400 naming the field."""
    effort = _effort(output_config)
    if thinking is None:
        return ThinkingRequest(effort=effort)
    if not isinstance(thinking, dict):
        raise BadRequestError("`thinking` must be an object", param="thinking")
    mode = thinking.get("type")
    if mode not in MODES:
        raise BadRequestError(f"thinking.type must be one of {', '.join(MODES)}, got {mode!r}", param="thinking.type")
    if mode == "disabled":
        return ThinkingRequest(mode, budget_tokens=0)
    if mode == "adaptive":
        return ThinkingRequest(mode, effort=effort or DEFAULT_EFFORT)
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
        raise BadRequestError(
            f"thinking.budget_tokens must be a positive integer, got {budget!r}", param="thinking.budget_tokens"
        )
    if budget >= max_tokens:
        raise BadRequestError(
            f"thinking.budget_tokens ({budget}) must be less than max_tokens ({max_tokens}): thinking and answer "
            "share max_tokens, so the answer needs room",
            param="thinking.budget_tokens",
        )
    return ThinkingRequest(mode, budget_tokens=budget)


def chat_fields(asked: ThinkingRequest, reasoning: bool) -> dict[str, Any]:
    """The chat request's ``thinking_token_budget`` / ``reasoning_effort`` for what was ``asked``,
    on a model with reasoning (``reasoning``) or without: there, only an explicit budget is passed
    on (and refused by the budgets module, naming ``thinking.budget_tokens``); disabled and
    adaptive thinking, and an effort, do nothing."""
    if asked.mode == "enabled":
        return {"thinking_token_budget": asked.budget_tokens}
    if not reasoning:
        return {}
    if asked.budget_tokens is not None:
        return {"thinking_token_budget": asked.budget_tokens}
    return {"reasoning_effort": asked.effort} if asked.effort is not None else {}


def _effort(output_config: Any) -> str | None:
    if output_config is None:
        return None
    if not isinstance(output_config, dict):
        raise BadRequestError("`output_config` must be an object", param="output_config")
    effort = output_config.get("effort")
    if effort is None:
        return None
    if effort not in EFFORTS:
        raise BadRequestError(
            f"output_config.effort must be one of {', '.join(EFFORTS)}, got {effort!r}", param="output_config.effort"
        )
    return EFFORTS[effort]
