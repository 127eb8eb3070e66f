"""The scheduler's side of speculative decoding: which requests draft, how
many tokens, and the counters /metrics shows."""

from __future__ import annotations

from agentgate.engine.request import Request
from agentgate.engine.speculative.draft_length import DraftLength
from agentgate.engine.speculative.proposers import MAX_NGRAM, Proposer
from agentgate.engine.step_rows import EXACT_DECODE_REQUESTS

DEFAULT_MAX_DRAFT = 6
# Draft tokens one step carries at most, across its requests (EngineConfig.speculative_step_tokens).
CPU_STEP_DRAFTS = 8  # a CPU verify row costs ~1/5 of a one-token step (int4, AVX2; see the report of issue 15)
CUDA_STEP_DRAFTS = 256  # a GPU step reads the weights once: rows are nearly free up to a few hundred
# --speculative auto on a CPU drafts only while this many requests decode or fewer: spec_bench (overlap
# runner, int4, 2 cores, tool-calling agents) measured 2.01x output tok/s at 1 agent, 1.11x at 4, 0.85x at 16.
# Those are the small steps, whose every decode token (drafts included) is computed as a lone
# request's is (`engine.step_rows`): drafts verified there change no greedy token.
CPU_AUTO_MAX_BATCH = EXACT_DECODE_REQUESTS


class Speculator:
    """Feeds a proposer the requests' confirmed tokens and hands the
    scheduler each decoding request's draft.

    A request drafts only when a draft can be verified exactly and cheaply:
    it is decoding (its known tokens are all computed but the last), has no
    step in flight and wants no logprobs. Under a grammar that forces the
    next text, the forced tokens are the draft (jump-forward); otherwise the
    proposer's. Drafts never run past ``max_tokens``.
    """

    def __init__(
        self,
        proposer: Proposer,
        max_draft: int = DEFAULT_MAX_DRAFT,
        max_step_drafts: int = 1 << 30,
        max_batch: int | None = None,
    ) -> None:
        self.proposer = proposer
        self.max_draft = max_draft
        self.max_step_drafts = max_step_drafts
        self.max_batch = max_batch  # None: draft at any batch size
        self._lengths: dict[str, DraftLength] = {}
        self.num_drafted_tokens = 0
        self.num_accepted_tokens = 0
        self.num_forced_tokens = 0  # drafted by grammar jump-forward

    def start(self, request: Request) -> None:
        # Drafts per tenant and per LoRA adapter: an adapter's outputs draft only for its own requests.
        lora = request.lora
        tenant = request.tenant if lora is None else f"{request.tenant}\0lora:{lora.uid}"
        self.proposer.start(request.request_id, request.all_token_ids, tenant)
        self._lengths[request.request_id] = DraftLength(self.max_draft)

    def step_drafts(self, num_decoding: int) -> int:
        """How many draft tokens a step with ``num_decoding`` decoding requests may carry: none
        above ``max_batch``, where verifying costs more than the drafts save."""
        if self.max_batch is not None and num_decoding > self.max_batch:
            return 0
        return self.max_step_drafts

    def draft(self, request: Request, limit: int) -> list[int]:
        """At most ``limit`` tokens to verify after the request's next input."""
        length = self._lengths.get(request.request_id)
        if (
            limit <= 0
            or length is None
            or request.num_output_placeholders
            or request.num_computed_tokens != request.num_tokens - 1
            or request.params.logprobs is not None
        ):
            return []
        room = min(request.max_tokens - len(request.output_token_ids) - 1, limit)
        if room <= 0:
            return []
        if request.grammar is not None:
            forced = request.grammar.forced_tokens(min(room, self.max_draft))
            if forced:
                self.num_forced_tokens += len(forced)
                return forced
        k = min(length.next(), room)
        if k <= 0:
            return []
        return self.proposer.propose(request.request_id, _tail(request, MAX_NGRAM), k)

    def verified(self, request: Request, num_drafted: int, num_accepted: int) -> None:
        """The runner accepted ``num_accepted`` of the request's ``num_drafted`` drafts."""
        self.num_drafted_tokens += num_drafted
        self.num_accepted_tokens += num_accepted
        length = self._lengths.get(request.request_id)
        if length is not None:
            length.observe(num_drafted, num_accepted)

    def confirmed(self, request: Request, token_ids: list[int]) -> None:
        """The request's next known tokens."""
        self.proposer.extend(request.request_id, token_ids)

    def finish(self, request_id: str) -> None:
        self.proposer.finish(request_id)
        self._lengths.pop(request_id, None)


def _tail(request: Request, n: int) -> list[int]:
    """The request's last ``n`` known tokens, without joining prompt and output."""
    outputs = request.output_token_ids
    if len(outputs) >= n:
        return outputs[-n:]
    return request.prompt_token_ids[-(n - len(outputs)) :] + outputs
