"""What a step's sampled tokens do to a request: confirmed up to the first that ends it, and
handed on as one :class:`TokenEvent` per request (``engine.scheduling.scheduler`` confirms them, with the
KV and the speculator's part; ``engine.core`` turns them into outputs)."""

from __future__ import annotations

from dataclasses import dataclass

from agentgate.engine.request import FinishReason, Request


@dataclass
class TokenEvent:
    """Tokens of a running request confirmed by one step (several when drafts
    were accepted; ``finish_reason`` set on its last)."""

    request: Request
    token_ids: list[int]
    row: int
    finish_reason: FinishReason | None


def confirm_tokens(request: Request, tokens: list[int]) -> tuple[list[int], FinishReason | None]:
    """Append ``tokens`` to the request's output up to the first that ends it (a stop, a token its
    grammar refuses); a stop after the grammar's budget narrowed the reply ends it with ``length``."""
    for count, token in enumerate(tokens, 1):
        request.output_token_ids.append(token)
        reason = request.check_stop(token)
        if request.grammar is not None and not request.grammar.accept(token):
            reason = FinishReason.ERROR  # cannot happen while the bitmask is applied
        if reason is FinishReason.STOP and request.grammar is not None and request.grammar.budget_cut:
            reason = FinishReason.LENGTH  # the budget closed it, not the model (engine.structured_output)
        if reason is not None:
            return tokens[:count], reason
    return tokens, None
