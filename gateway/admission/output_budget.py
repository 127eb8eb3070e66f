"""The output budget of a request: ``--max-tokens-default`` for requests that set none and
``--max-tokens-cap`` as a ceiling, on every API (chat completions' ``max_tokens`` /
``max_completion_tokens``, completions' ``max_tokens``, Responses' ``max_output_tokens``,
Anthropic's ``max_tokens``).

Why a default at all: a request without one would otherwise generate until the context is
full (8192 tokens on the CPU), minutes of a small model looping on a CPU for a client that
forgot the field. 2048 holds every reply an agent turn expects (a tool call takes 30 to 100
tokens, a long answer or a page of code some 1500) and ends a runaway reply within a minute
or so of the default model on a CPU. A default never makes a request fail: it is clipped to
what the context leaves after the prompt. An explicit value above the cap is a 400 naming
the parameter, as is one the context cannot hold, unless the operator says to lower it
(``--max-tokens-overflow clamp``): then the request runs with the room the context leaves (and
the cap), and a reply that room ended says so as any budget does (``length``, ``incomplete``,
``max_tokens``). Clients that always ask for more than a self-hosted model's context holds
(Claude Code asks 32,000 on every request) are served instead of refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentgate.gateway.admission.bounds import check_context
from agentgate.gateway.errors import BadRequestError

DEFAULT_MAX_TOKENS = 2048
"""``--max-tokens-default``: the output budget of a request that sets none (see the module docstring)."""

COMPLETIONS_DEFAULT = 16
"""OpenAI's documented default ``max_tokens`` of the legacy ``/v1/completions``."""


@dataclass(frozen=True, slots=True)
class OutputBudget:
    """``default``: tokens for a request that sets none (None: what the context leaves);
    ``cap``: most tokens any request may ask for (None: no cap but the context); ``clamp``: a
    request that asks for more than the cap or the context leaves runs with what they allow
    (``--max-tokens-overflow clamp``) instead of a 400."""

    default: int | None = DEFAULT_MAX_TOKENS
    cap: int | None = None
    clamp: bool = False

    @classmethod
    def from_flags(cls, default: int, cap: int | None, overflow: str = "refuse") -> OutputBudget:
        """From ``--max-tokens-default`` (0: none), ``--max-tokens-cap`` and ``--max-tokens-overflow``."""
        return cls(default or None, cap, overflow == "clamp")

    def resolve(
        self,
        requested: int | None,
        *,
        prompt_tokens: int,
        max_model_len: int,
        param: str = "max_tokens",
        prompt_field: str = "messages",
        api_default: int | None = None,
    ) -> int | None:
        """The max_tokens a request runs with (None: what the context leaves). 400 naming
        ``param`` when ``requested`` is above the cap or the context cannot hold it, and
        naming ``prompt_field`` when the prompt alone fills the context. ``api_default``:
        an API's own smaller default (``/v1/completions``: 16)."""
        if self.clamp and requested is not None:
            check_context(prompt_tokens, None, max_model_len, prompt_field, budget_param=param)
            return min(requested, max_model_len - prompt_tokens, *((self.cap,) if self.cap is not None else ()))
        if requested is not None and self.cap is not None and requested > self.cap:
            raise BadRequestError(
                f"`{param}` is {requested}, above this server's limit of {self.cap} output tokens per request "
                f"(--max-tokens-cap): ask for at most {self.cap}.",
                param=param,
            )
        check_context(prompt_tokens, requested, max_model_len, prompt_field, budget_param=param)
        if requested is not None:
            return requested
        budget = min((b for b in (self.default, self.cap, api_default) if b is not None), default=None)
        return None if budget is None else min(budget, max_model_len - prompt_tokens)

    def describe(self) -> str:
        """The start-up line's account of the budget."""
        default = f"{self.default:,}" if self.default is not None else "up to the context"
        cap = f"{self.cap:,}" if self.cap is not None else "none"
        overflow = ", overflow clamped" if self.clamp else ""
        return f"max_tokens default {default}, cap {cap}{overflow}"
