"""Draft proposers: tokens a request is likely to produce next, from tokens
already seen, behind one interface (``--speculative ngram|suffix|off|auto``)."""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Sequence

from agentgate.engine.config import SPECULATIVE_MODES
from agentgate.engine.speculative.continuation_index import ContinuationIndex

MIN_NGRAM = 2  # shortest context that may be matched
MAX_NGRAM = 8  # longest context matched (the longest match wins)
GLOBAL_MAX_TOKENS = 1 << 16  # recent outputs of one tenant's requests kept for the suffix proposer
ALL_TENANTS_MAX_TOKENS = 2 * GLOBAL_MAX_TOKENS  # past this, the least recently active tenant's index goes


class Proposer(ABC):
    """Sees each request's known tokens as they are confirmed and proposes
    the tokens likely to follow. Drafts are only ever guesses: the runner
    verifies every one against the target model."""

    @abstractmethod
    def start(self, request_id: str, prompt_token_ids: Sequence[int], tenant: str = "") -> None:
        """A request begins (its prompt is known); ``tenant``: its API key's, whose requests alone
        its drafts may come from."""

    @abstractmethod
    def extend(self, request_id: str, token_ids: Sequence[int]) -> None:
        """The request confirmed ``token_ids`` (its next outputs)."""

    @abstractmethod
    def propose(self, request_id: str, context: Sequence[int], k: int) -> list[int]:
        """Up to ``k`` tokens to follow ``context`` (the request's known
        tokens; only the last ``MAX_NGRAM`` are read)."""

    @abstractmethod
    def finish(self, request_id: str) -> None:
        """The request is over (finished or aborted)."""


class NgramProposer(Proposer):
    """Prompt lookup: the continuation of the most recent earlier occurrence
    of the request's last n tokens (longest n first) in its own prompt and
    output."""

    def __init__(self) -> None:
        self._own: dict[str, ContinuationIndex] = {}

    def start(self, request_id: str, prompt_token_ids: Sequence[int], tenant: str = "") -> None:
        index = ContinuationIndex(MIN_NGRAM, MAX_NGRAM, max_tokens=1 << 62)
        index.append(request_id, prompt_token_ids)
        self._own[request_id] = index

    def extend(self, request_id: str, token_ids: Sequence[int]) -> None:
        index = self._own.get(request_id)
        if index is not None:
            index.append(request_id, token_ids)

    def propose(self, request_id: str, context: Sequence[int], k: int) -> list[int]:
        index = self._own.get(request_id)
        return index.lookup(context[-MAX_NGRAM:], k)[0] if index is not None else []

    def finish(self, request_id: str) -> None:
        self._own.pop(request_id, None)


class SuffixProposer(NgramProposer):
    """Prompt lookup plus a bounded index per tenant over the recent outputs of that tenant's
    requests (each stored with the end of its prompt, so the turn from prompt to output is
    learnt too); the longer match of the two wins, the request's own on a tie. A request drafts
    only from its own tenant's outputs, so nothing another key's requests wrote reaches its
    drafts, nor their acceptance timing. Finished outputs stay until evicted, oldest first, once
    ``global_max_tokens`` are stored for the tenant; past ``all_tenants_max_tokens`` in all, the
    least recently active tenant's index goes whole."""

    def __init__(
        self, global_max_tokens: int = GLOBAL_MAX_TOKENS, all_tenants_max_tokens: int = ALL_TENANTS_MAX_TOKENS
    ) -> None:
        super().__init__()
        self.global_max_tokens = global_max_tokens
        self.all_tenants_max_tokens = all_tenants_max_tokens
        self._tenants: OrderedDict[str, ContinuationIndex] = OrderedDict()  # least recently active first
        self._total_tokens = 0  # stored in all tenants' indexes
        # A key per request life (a request id may come back after it finished), and its tenant.
        self._keys: dict[str, tuple[str, int]] = {}
        self._counter = itertools.count()

    def _append(self, tenant: str, key: int, token_ids: Sequence[int]) -> None:
        index = self._tenants.get(tenant)
        if index is None:
            index = self._tenants[tenant] = ContinuationIndex(MIN_NGRAM, MAX_NGRAM, self.global_max_tokens)
        self._tenants.move_to_end(tenant)
        before = index.num_tokens
        index.append(key, token_ids)  # may evict its own oldest
        self._total_tokens += index.num_tokens - before
        while len(self._tenants) > 1 and self._total_tokens > self.all_tenants_max_tokens:
            self._total_tokens -= self._tenants.popitem(last=False)[1].num_tokens

    def start(self, request_id: str, prompt_token_ids: Sequence[int], tenant: str = "") -> None:
        super().start(request_id, prompt_token_ids)
        key = next(self._counter)
        self._keys[request_id] = (tenant, key)
        self._append(tenant, key, prompt_token_ids[-MAX_NGRAM:])

    def extend(self, request_id: str, token_ids: Sequence[int]) -> None:
        super().extend(request_id, token_ids)
        entry = self._keys.get(request_id)
        if entry is not None:
            self._append(entry[0], entry[1], token_ids)

    def propose(self, request_id: str, context: Sequence[int], k: int) -> list[int]:
        tail = context[-MAX_NGRAM:]
        index = self._own.get(request_id)
        own, own_len = index.lookup(tail, k) if index is not None else ([], 0)
        entry = self._keys.get(request_id)
        tenant_index = self._tenants.get(entry[0]) if entry is not None else None
        shared, shared_len = tenant_index.lookup(tail, k) if tenant_index is not None else ([], 0)
        if shared_len > own_len or (shared_len == own_len and len(shared) > len(own)):
            return shared
        return own

    def finish(self, request_id: str) -> None:
        super().finish(request_id)
        self._keys.pop(request_id, None)  # its outputs stay in its tenant's index until evicted


def make_proposer(mode: str) -> Proposer | None:
    """The proposer for a resolved mode (``auto`` is resolved by the engine)."""
    if mode == "ngram":
        return NgramProposer()
    if mode == "suffix":
        return SuffixProposer()
    if mode == "off":
        return None
    raise ValueError(f"speculative must be one of {SPECULATIVE_MODES}, got {mode!r}")
