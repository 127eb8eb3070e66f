"""A test proposer that knows the right continuation and spoils some of it,
so verification sees full, partial and failed drafts in every mix."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from agentgate.engine.speculative import Proposer


class OracleProposer(Proposer):
    """Proposes ``truth(request_id, context)``'s tokens, each draft cut at a
    random length and, at random, with one token replaced by a wrong one."""

    def __init__(self, truth: Callable[[str, list[int], int], list[int]], seed: int, vocab: int) -> None:
        self.truth = truth
        self.rng = random.Random(seed)
        self.vocab = vocab
        self.known: dict[str, list[int]] = {}
        self.num_proposals = 0

    def start(self, request_id: str, prompt_token_ids: Sequence[int], tenant: str = "") -> None:
        self.known[request_id] = list(prompt_token_ids)

    def extend(self, request_id: str, token_ids: Sequence[int]) -> None:
        self.known[request_id].extend(token_ids)

    def propose(self, request_id: str, context: Sequence[int], k: int) -> list[int]:
        known = self.known[request_id]
        assert list(context) == known[-len(context) :], "the proposer saw different tokens than confirmed"
        draft = self.truth(request_id, known, k)[: self.rng.randint(0, k)]
        if draft and self.rng.random() < 0.4:
            draft[self.rng.randrange(len(draft))] = self.rng.randrange(self.vocab)
        self.num_proposals += bool(draft)
        return draft

    def finish(self, request_id: str) -> None:
        self.known.pop(request_id, None)
