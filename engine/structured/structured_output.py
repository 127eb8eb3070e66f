"""Constrained decoding with xgrammar: grammars compiled off the step loop,
one matcher per request, and the token bitmask the sampler applies.

Grammars compile on a few threads (xgrammar releases the GIL), shared fairly
by tenants (``engine.structured.compile_pool``), so a request waits for its
grammar without stalling the engine loop or another key's grammars; compiled
grammars are cached by their spec and the request's cache salt, least recently
used first out past :data:`GRAMMAR_CACHE_BYTES` (specs are the clients': each
entry counts its salt, its spec and its compiled grammar's own size; xgrammar's
own cache is off). The salt keeps tenants apart as the prefix cache does (a
request's ``cache_salt``, the key's digest under ``--prefix-cache-isolation
key``): a salted request compiles its own grammar and never finds another salt's,
so a compile's time reveals nothing of what other salts sent; unsalted requests
share. A request's matcher accepts each token as the step that sampled it resolves.

**Replies that fit their budget.** A spec with ``max_tokens`` (a forced tool
call, a response_format: the reply is nothing but the structure) must end whole
within that many tokens. The engine knows, at every step, a way to close the
structure from where it is: ``engine.structured.grammar_closing.Closer`` finds one (a
JSON-aware greedy walk over characters on a fork of the matcher: close the
string, the container, the required keys with their shortest values, the markup
the grammar forces) and spells it in the model's tokens, the end-of-sequence
token included. Then:

- admission: a budget below the closing of the empty reply (the shortest
  reply: one minimal call) is refused before anything runs
  (:func:`~engine.sampling_params.budget_error`);
- caution: within :data:`CAUTION` tokens of the closing, tokens that hold a
  character opening a container or another member (``{``, ``[``, ``,``; inside
  a string only after a quote that ends it: ``","`` ends one member and starts
  the next, while a ``,`` in the string's text opens nothing) are masked unless
  the closing itself starts with one, so the closing cannot grow by more than
  a few tokens a step (never start what cannot close);
- closing: within :data:`MARGIN` tokens of it, the closing is forced, one token
  a step (offered as jump-forward drafts too), and the reply ends on the end
  token, whole, before ``max_tokens``.

**Said to be cut.** Where the budget narrowed what the grammar allowed (the closing forced, or
tokens masked for caution), the sampler also takes the best token under the grammar's own mask
(:attr:`RequestGrammar.unnarrowed`, ``SamplingBatch.unnarrowed_bitmask``); where the budget had
removed that token, the reply is not what the model would have written: a value or call the
budget closed. :attr:`RequestGrammar.budget_cut` says so, and the engine ends such a reply with
``length``, not ``stop`` (``engine.token_events``): the front ends report it as cut (``length``,
Responses ``incomplete``, Anthropic ``max_tokens``), its arguments whole JSON all the same. A
narrowing the model's own choice never ran into (issue 48: the last ~34 tokens before the budget
are always narrowed, a reply that fits in them is still the model's) keeps ``stop``, as does a
reply the budget never narrowed: its calls are the model's own. ``tests/gateway/test_tools_live.py``
checks both ways against the same requests with room to spare; ``loadtests/forced_budget_sweep.py``
counts them.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterable
from concurrent.futures import Future
from functools import cached_property, partial
from pathlib import Path

import torch
import xgrammar as xgr

from agentgate.engine.byte_lru import ByteLRU, str_bytes
from agentgate.engine.errors import InvalidRequestError
from agentgate.engine.sampling_params import StructuredOutput, budget_error
from agentgate.engine.structured.compile_pool import FairCompilePool
from agentgate.engine.structured.grammar_closing import Budgeted, Closer, JsonStringState

GRAMMAR_CACHE_BYTES = 256 << 20
"""Compiled grammars kept, by cache salt and spec: their text and the compiled size counted."""
MINIMUM_CACHE_BYTES = 16 << 20
"""Shortest-reply lengths kept, by cache salt and spec: their text counted."""

GrammarKey = tuple[str, str, str]
"""(cache salt, kind, spec): what a compiled grammar is cached by ("" salt: shared by unsalted requests)."""

MARGIN = 4
"""Tokens beyond the closing's own at which a budgeted reply starts writing it: room for the
closing to grow by a token's worth (a key begun, a string escaped) between two looks."""
CAUTION = 16
"""Tokens beyond ``MARGIN`` within which nothing that opens a container or another member is
started unless the closing needs it."""
_LOOK_EVERY = 8
"""Tokens between two looks at the closing while the budget is far from it."""
_MAX_CHECKED = 64
"""Most allowed risky tokens checked one by one (more: inside a string, where they are content)."""


class GrammarCompiler:
    """Compiles StructuredOutput specs for one tokenizer/vocabulary, on ``workers`` threads fair per
    tenant (``engine.structured.compile_pool``)."""

    def __init__(
        self,
        tokenizer_path: Path,
        vocab_size: int,
        max_threads: int = 2,
        *,
        workers: int = 4,
        cache_bytes: int = GRAMMAR_CACHE_BYTES,
        minimum_bytes: int = MINIMUM_CACHE_BYTES,
    ) -> None:
        self.tokenizer_path = tokenizer_path
        self.vocab_size = vocab_size
        self._pool = FairCompilePool(workers)
        self._max_threads = max_threads
        # Used by the workers and the engine's thread: under the lock (a compile itself runs outside it).
        self._lock = threading.Lock()
        self._build_lock = threading.Lock()  # the compiler and closer are built once, by one worker
        self._cache: ByteLRU[GrammarKey, xgr.CompiledGrammar] = ByteLRU(cache_bytes)
        self._minimum: ByteLRU[GrammarKey, int] = ByteLRU(minimum_bytes)  # shortest reply's tokens, per salt and spec
        self.num_compiles = 0  # grammars compiled (not found cached), under the lock

    @cached_property
    def _compiler(self) -> xgr.GrammarCompiler:
        from agentgate.engine.text.tokenizer import load_tokenizer

        tokenizer = self._tokenizer = load_tokenizer(self.tokenizer_path)
        vocab_type = {
            "byte_level": xgr.VocabType.BYTE_LEVEL,
            "byte_fallback": xgr.VocabType.BYTE_FALLBACK,
        }.get(tokenizer.vocab_type, xgr.VocabType.RAW)
        info = self._info = xgr.TokenizerInfo(
            tokenizer.encoded_vocab,
            vocab_type,
            vocab_size=self.vocab_size,
            stop_token_ids=sorted(tokenizer.eos_token_ids),
            add_prefix_space=tokenizer.add_prefix_space,
        )
        return xgr.GrammarCompiler(info, max_threads=self._max_threads, cache_enabled=False)

    def submit(
        self, spec: StructuredOutput, tenant: str = "", cache_salt: str = ""
    ) -> Future[xgr.CompiledGrammar | Budgeted]:
        """The compiled grammar (cached by ``cache_salt`` and spec; a cached one is a done future at
        once); with ``spec.max_tokens`` a :class:`Budgeted` one, or InvalidRequestError when the
        budget cannot hold the shortest reply. ``tenant``: whose compile it is (its fair share of the
        workers); ``cache_salt``: the request's (``Request.cache_root``'s), so that only requests of
        the same salt share a compiled grammar (the module docstring)."""
        key = (cache_salt, *spec.kind())
        if spec.max_tokens is None:
            with self._lock:
                compiled = self._cache.get(key)
            if compiled is not None:
                done: Future[xgr.CompiledGrammar | Budgeted] = Future()
                done.set_result(compiled)
                return done
        return self._pool.submit(tenant, partial(self._ready, key, spec.max_tokens))

    def compiling(self, tenant: str) -> int:
        """Compiles of ``tenant`` running now (one past its wait's bound still runs: the module docstring)."""
        return self._pool.running(tenant)

    def _ready(self, key: GrammarKey, budget: int | None) -> xgr.CompiledGrammar | Budgeted:
        """On a worker: the grammar of ``key`` (compiled unless cached meanwhile), budgeted when ``budget``."""
        with self._lock:
            grammar = self._cache.get(key)
        if grammar is None:
            with self._build_lock:
                self._compiler  # noqa: B018 - the first compile builds it
            _, kind, spec = key
            grammar = self._compile(kind, spec)
            with self._lock:
                self.num_compiles += 1
                self._cache.put(key, grammar, str_bytes(*key) + grammar.memory_size_bytes)
        if budget is None:
            return grammar
        with self._build_lock:
            closer = self.closer
        with self._lock:
            minimum = self._minimum.get(key)
        if minimum is None:
            path = closer.closing(xgr.GrammarMatcher(grammar), JsonStringState())
            minimum = len(path) if path is not None else 0
            with self._lock:
                self._minimum.put(key, minimum, str_bytes(*key) + sys.getsizeof(minimum))
        if minimum > budget:
            raise InvalidRequestError(budget_error(budget, minimum), "max_tokens")
        return Budgeted(grammar, budget, closer, minimum)

    @cached_property
    def closer(self) -> Closer:
        """How budgeted replies close, for this vocabulary."""
        self._compiler  # noqa: B018 - loads the tokenizer
        return Closer(self._tokenizer, self._info.decoded_vocab, self.vocab_size)

    def _compile(self, kind: str, spec: str) -> xgr.CompiledGrammar:
        compiler = self._compiler
        try:
            if kind == "json_schema":
                return compiler.compile_json_schema(spec, any_whitespace=False)
            if kind == "json_object":  # OpenAI's json_object: an object, not any JSON value
                return compiler.compile_json_schema('{"type": "object"}', any_whitespace=False)
            if kind == "regex":
                return compiler.compile_regex(spec)
            if kind == "grammar":
                return compiler.compile_grammar(spec)
            return compiler.compile_structural_tag(json.loads(spec))
        except Exception as exc:
            raise InvalidRequestError(f"invalid {kind.replace('_', ' ')}: {exc}", "structured") from exc

    def shutdown(self) -> None:
        self._pool.shutdown()


class RequestGrammar:
    """One request's position in its grammar (and, budgeted, how far it is from its end)."""

    def __init__(self, compiled: xgr.CompiledGrammar | Budgeted) -> None:
        self.budget: int | None = None
        if isinstance(compiled, Budgeted):
            self.budget, self.closer, self.minimum = compiled.budget, compiled.closer, compiled.minimum
            self._closing_len = compiled.minimum  # tokens of the closing when last looked at
            compiled = compiled.compiled
        self.matcher = xgr.GrammarMatcher(compiled)
        self.num_accepted = 0
        self._state = JsonStringState()
        self._closing: list[int] | None = None  # being written: the rest of the closing
        self.num_closing_tokens = 0  # tokens the closing wrote (not the model's choice)
        # This step's rows the budget narrowed: row -> (position: tokens accepted before it, the
        # grammar's own row before the narrowing); and the positions where that removed the model's best.
        self._narrowed: dict[int, tuple[int, torch.Tensor]] = {}
        self._overridden: set[int] = set()
        self.budget_cut = False  # the budget removed a token the model would have taken (module docstring)

    def accept(self, token: int) -> bool:
        """Advance past a sampled token; False if the grammar forbids it."""
        if self.matcher.is_terminated():
            return True  # the grammar is done; the request ends on this token
        if not self.matcher.accept_token(token):
            return False
        if self.num_accepted in self._overridden:
            self.budget_cut = True
        self.num_accepted += 1
        if self.budget is not None:
            self._state.feed(self.closer.texts[token])
            if self._closing:
                if self._closing[0] == token:
                    self._closing.pop(0)
                    self.num_closing_tokens += 1
                else:
                    self._closing = None  # cannot happen: the bitmask allows its next token only
        return True

    def fill(self, bitmask: torch.Tensor, row: int, drafts: tuple[int, ...] = ()) -> None:
        """Fill ``bitmask[row]`` with the tokens allowed next and, for each
        draft the grammar admits, the following row with those allowed after
        it (the matcher is rolled back after). Rows past a draft the grammar
        forbids stay as they are: that draft cannot match the target's
        token, so nothing after it is accepted."""
        self._fill_one(bitmask, row)
        self._narrowed.clear()
        self._overridden.clear()
        state = self._state.copy() if self.budget is not None else None
        if state is not None:
            self._fit_noting(bitmask, row, 0, state)
        advanced = 0
        for offset, token in enumerate(drafts, 1):
            if self.matcher.is_terminated() or not self.matcher.accept_token(token):
                break
            advanced += 1
            self._fill_one(bitmask, row + offset)
            if state is not None:
                state.feed(self.closer.texts[token])
                self._fit_noting(bitmask, row + offset, offset, state)
        if advanced:
            self.matcher.rollback(advanced)

    def _fit_noting(self, bitmask: torch.Tensor, row: int, offset: int, state: JsonStringState) -> None:
        """`_fit`, noting the row (and its position) when it took a token the grammar allowed there."""
        before = bitmask[row].clone()
        self._fit(bitmask, row, offset, state)
        if not torch.equal(before, bitmask[row]):
            self._narrowed[row] = (self.num_accepted + offset, before)

    @property
    def unnarrowed(self) -> dict[int, torch.Tensor]:
        """The rows of the last fill the budget narrowed: each as the grammar alone allowed it."""
        return {row: before for row, (_, before) in self._narrowed.items()}

    def note_overridden(self, rows: Iterable[int]) -> None:
        """The step of the last fill was sampled: ``rows`` (sampling rows of the step) are those
        whose best token under the grammar's own mask the budget had removed. Their positions mark
        the reply cut when it takes them (``accept``)."""
        rows = set(rows)
        self._overridden = {position for row, (position, _) in self._narrowed.items() if row in rows}
        self._narrowed.clear()

    def _fit(self, bitmask: torch.Tensor, row: int, offset: int, state: JsonStringState) -> None:
        """Narrow ``bitmask[row]`` (the token after ``offset`` drafts) so the reply ends within its
        budget: the closing's next token once the budget is down to it, nothing that opens more
        a little before (see the module docstring)."""
        if self.matcher.is_terminated():
            return
        left = self.budget - self.num_accepted - offset  # tokens left, this one included
        if self._closing is not None:
            if offset < len(self._closing):
                _only(bitmask, row, self._closing[offset])
            return
        near = left <= self._closing_len + MARGIN + CAUTION + self.minimum + _LOOK_EVERY  # another call: minimum
        if not near and (self.num_accepted + offset) % _LOOK_EVERY:
            return
        closing = self.closer.closing(self.matcher, state)
        if closing is None:
            return  # no way to close found: the grammar alone decides (a cut reply is dropped whole)
        if offset == 0:
            self._closing_len = len(closing)
        if left <= len(closing) + MARGIN:
            _only(bitmask, row, closing[0])
            if offset == 0:
                self._closing = closing
            return
        first = bitmask[row, closing[0] >> 5].item() & _bit(closing[0])
        if left <= len(closing) + MARGIN + CAUTION:
            in_text = state.in_string and not state.escaped  # where "{[," are the string's own characters
            bitmask[row] &= (
                self.closer.allowed_in_string_unless_opening if in_text else self.closer.allowed_unless_opening
            )
        if left <= len(closing) + MARGIN + CAUTION + self.minimum:  # a new call (the shortest reply) may not fit
            self._drop_unclosable(bitmask, row, left, state)
        bitmask[row, closing[0] >> 5] |= first

    def _drop_unclosable(self, bitmask: torch.Tensor, row: int, left: int, state: JsonStringState) -> None:
        """Mask each allowed token that may open a member or another call (a separator) after which
        the reply could not close within ``left`` tokens, checked one by one when they are few."""
        risky = _tokens(bitmask[row] & self.closer.risky)
        if len(risky) > _MAX_CHECKED:
            return
        stop = set(self.matcher.stop_token_ids)
        may_end = self.matcher.is_completed()  # where whitespace may be a separator: another call
        for token in risky:
            if token in stop or (not may_end and not self.closer.texts[token].strip()):
                continue  # the end; or whitespace inside the structure, which closes as it stood
            fork = self.matcher.fork()
            if not fork.accept_token(token):
                continue
            after = state.copy()
            after.feed(self.closer.texts[token])
            closing = self.closer.closing(fork, after)
            if closing is None or 1 + len(closing) + MARGIN > left:
                bitmask[row, token >> 5] &= ~_bit(token)

    def forced_tokens(self, limit: int) -> list[int]:
        """Jump-forward: up to ``limit`` tokens spelling the continuation the
        grammar forces from here (none when it admits more than one). They
        are drafts, verified like any other: the output stays what decoding
        token by token gives, whatever tokenization of the forced text the
        model itself prefers."""
        if limit <= 0 or self.matcher.is_terminated():
            return []
        if self._closing:
            return self._closing[:limit]  # the closing being written is forced too
        return self.matcher.find_jump_forward_tokens()[:limit]

    def _fill_one(self, bitmask: torch.Tensor, row: int) -> None:
        if self.matcher.is_terminated():
            bitmask[row].fill_(-1)
        else:
            self.matcher.fill_next_token_bitmask(bitmask, row)


def unnarrowed_bitmask(bitmask: torch.Tensor, rows: dict[int, torch.Tensor]) -> torch.Tensor | None:
    """The step's mask before any budget narrowed it (``SamplingBatch.unnarrowed_bitmask``): ``bitmask``
    with each narrowed row as its grammar alone allowed it (never less than the narrowed row allows);
    None when no row was narrowed."""
    if not rows:
        return None
    full = bitmask.clone().pin_memory() if bitmask.is_pinned() else bitmask.clone()
    for row, before in rows.items():
        full[row] |= before
    return full


def new_bitmask(num_rows: int, vocab_size: int, pinned: bool) -> torch.Tensor:
    """An all-allowed bitmask (every bit set) for ``num_rows`` rows."""
    words = (vocab_size + 31) // 32
    return torch.full((num_rows, words), -1, dtype=torch.int32, pin_memory=pinned)


def _bit(token: int) -> int:
    """``token``'s bit in its int32 bitmask word (xgrammar's layout), as a signed int32."""
    bit = 1 << (token & 31)
    return bit - (1 << 32) if bit >= 1 << 31 else bit


def _tokens(words: torch.Tensor) -> list[int]:
    """The tokens whose bits are set in one bitmask row."""
    if not bool(words.any()):
        return []
    bits = (words.to(torch.int64)[:, None] >> torch.arange(32)) & 1
    return bits.flatten().nonzero().flatten().tolist()


def _only(bitmask: torch.Tensor, row: int, token: int) -> None:
    """Allow ``token`` alone in ``bitmask[row]``."""
    bitmask[row].zero_()
    bitmask[row, token >> 5] = _bit(token)
