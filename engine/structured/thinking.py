"""Thinking the engine enforces (DESIGN.md "Reasoning"): one request's thinking block, in front of its
grammar.

A request to a reasoning model carries a :class:`~engine.front.protocol.ThinkingSpec`: its parser's
start and end token sequences, whether the prompt already opened the block, and an optional thinking
budget. The request's :class:`ThinkingGate` takes the place of its grammar (``Request.grammar``: the
scheduler marks its rows constrained, the core fills their bitmask, the speculator asks it for forced
tokens, each confirmed token is accepted by it) and wraps the request's own grammar, if any, which
starts only after the thinking ends. Phases:

- **opening** (the prompt did not open the block): at the start of the output the model may write the
  start sequence (token for token); anything else means no thinking, and the grammar starts at once.
  Under a grammar, the first token is the grammar's or the start sequence's first, and a start begun
  is forced whole; it is offered only where the block could still close with room for the grammar.
- **thinking**: unconstrained, but the sampler turns an end-of-turn token (EOS or a stop id) into the
  end sequence's first token (`Redirects`): a reply never ends inside an open block. The engine closes
  the block itself once ``budget`` thinking tokens are written, or when what is left of ``max_tokens``
  would no longer hold the end sequence plus the grammar's shortest completion (its closing's
  ``minimum``; nothing without a budgeted grammar).
- **closing**: the end sequence, forced one token a row (and offered as jump-forward drafts). The
  model's own first end token starts it too: after the sampler's redirect the engine cannot tell that
  token from an end-of-turn, and for the usual single-token ``</think>`` they mean the same.
- **done**: the grammar decides (with the budget left: ``max_tokens`` minus the tokens written so
  far), or nothing but this: the first token after a block that closed may not end the turn (there
  is an answer: a model that never closes the block by itself, its thinking closed at its end-of-turn,
  would otherwise end at once).

Thinking tokens are those written inside the block (start and end sequences excluded); what the
budget counts. The reasoning tokens reported for the reply are every output token up to the end
sequence's last, start and end included: what is not the answer.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, replace

import msgspec
import torch

from agentgate.engine.errors import InvalidRequestError
from agentgate.engine.front.protocol import ThinkingSpec
from agentgate.engine.request import Request
from agentgate.engine.sampling_params import StructuredOutput
from agentgate.engine.structured.structured_output import _bit, _only


class Phase(enum.Enum):
    OPENING = "opening"
    THINKING = "thinking"
    CLOSING = "closing"
    DONE = "done"


class ClosedBy(str, enum.Enum):
    """Who ended the thinking."""

    MODEL = "model"  # its own end token, or its end-of-turn turned into one
    BUDGET = "budget"  # the thinking budget was spent
    ROOM = "room"  # what was left of max_tokens would no longer hold the end and the grammar's minimum


@dataclass(frozen=True, slots=True)
class _State:
    """Where the block stands after ``written`` output tokens. ``matched``: start tokens written
    (opening) or end tokens written (closing)."""

    phase: Phase
    written: int = 0
    thought: int = 0
    matched: int = 0
    closed_by: ClosedBy | None = None
    reasoning_tokens: int = 0


def validate_thinking(spec: ThinkingSpec, vocab_size: int) -> None:
    """InvalidRequestError naming ``thinking`` for a spec the engine cannot keep."""

    def bad(why: str) -> InvalidRequestError:
        return InvalidRequestError(f"thinking {why}", "thinking")

    if not spec.end_token_ids:
        raise bad("needs the end sequence's tokens")
    if not spec.prompt_opened and not spec.start_token_ids:
        raise bad("needs the start sequence's tokens when the prompt did not open the block")
    if any(not 0 <= t < vocab_size for t in (*spec.start_token_ids, *spec.end_token_ids)):
        raise bad(f"token ids must be in [0, {vocab_size})")
    if spec.budget is not None and spec.budget < 0:
        raise bad(f"budget must be non-negative, got {spec.budget}")


def open_gate(spec: ThinkingSpec, request: Request, vocab_size: int) -> tuple[ThinkingGate, StructuredOutput | None]:
    """The request's gate, and the grammar spec to compile for after its thinking: a budgeted one
    (``StructuredOutput.max_tokens``) whose budget leaves room for the end sequence when the prompt
    opened the block, so a budget that cannot hold the end and the shortest reply is refused at once.
    InvalidRequestError (naming ``thinking`` or ``max_tokens``) when the spec cannot be kept."""
    validate_thinking(spec, vocab_size)
    structured = request.params.structured
    end = len(spec.end_token_ids) if spec.prompt_opened else 0
    if request.max_tokens < end + 1:
        raise InvalidRequestError(
            f"max_tokens ({request.max_tokens}) cannot hold the thinking's end sequence ({end} tokens) "
            "and an answer: a reply never ends inside an open thinking block",
            "max_tokens",
        )
    if structured is not None and structured.max_tokens is not None and end:
        structured = msgspec.structs.replace(structured, max_tokens=max(1, structured.max_tokens - end))
    end_of_turn = request.eos_token_ids | set(request.params.stop_token_ids)
    return ThinkingGate(spec, request.max_tokens, end_of_turn), structured


class Redirects:
    """The sampling rows of one step whose end-of-turn tokens the sampler turns into another token
    (the end sequence's first, in an open thinking block), as the runner's tensors."""

    def __init__(self) -> None:
        self._rows: dict[int, tuple[tuple[int, ...], int]] = {}

    def add(self, row: int, tokens: Iterable[int], to: int) -> None:
        self._rows[row] = (tuple(tokens), to)

    def tensors(self, num_rows: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(from [rows, S] int64, -1 padded; to [rows] int64, -1 none), None when no row redirects."""
        if not self._rows:
            return None
        width = max(1, max(len(tokens) for tokens, _ in self._rows.values()))
        sources = torch.full((num_rows, width), -1, dtype=torch.long)
        targets = torch.full((num_rows,), -1, dtype=torch.long)
        for row, (tokens, to) in self._rows.items():
            sources[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
            targets[row] = to
        return sources, targets


class ThinkingGate:
    """One request's thinking block and, after it, its grammar (``inner``; set by
    :meth:`attach` once compiled). Has the interface of ``RequestGrammar`` the engine uses."""

    def __init__(self, spec: ThinkingSpec, max_tokens: int, end_of_turn: Iterable[int]) -> None:
        self.spec = spec
        self.max_tokens = max_tokens
        self.end_of_turn = tuple(sorted(set(end_of_turn)))
        self.inner = None  # RequestGrammar
        self.state = _State(Phase.THINKING if spec.prompt_opened else Phase.OPENING)

    def attach(self, grammar) -> None:  # noqa: ANN001 - RequestGrammar
        """The request's grammar, which starts when the thinking ends."""
        self.inner = grammar

    # -- what the reply reports -------------------------------------------------------------
    @property
    def budget_cut(self) -> bool:
        return self.inner is not None and self.inner.budget_cut

    @property
    def unnarrowed(self) -> dict:
        """The grammar's rows of the last fill that its budget narrowed (``RequestGrammar.unnarrowed``)."""
        return self.inner.unnarrowed if self.inner is not None else {}

    def note_overridden(self, rows: Iterable[int]) -> None:
        """As ``RequestGrammar.note_overridden``: the rows where the budget removed the model's best."""
        if self.inner is not None:
            self.inner.note_overridden(rows)

    @property
    def closed_by(self) -> ClosedBy | None:
        return self.state.closed_by

    @property
    def closed_by_engine(self) -> bool:
        """The engine closed the thinking (budget spent, or no room left), not the model."""
        return self.state.closed_by in (ClosedBy.BUDGET, ClosedBy.ROOM)

    @property
    def reasoning_tokens(self) -> int:
        """Output tokens of the thinking so far, start and end sequences included."""
        s = self.state
        return s.reasoning_tokens if s.phase is Phase.DONE else (s.written if s.phase is not Phase.OPENING else 0)

    @property
    def thinking_done(self) -> bool:
        return self.state.phase is Phase.DONE

    # -- the state machine ----------------------------------------------------------------
    def _reserve(self) -> int:
        """Tokens the grammar needs after the thinking: its shortest completion when budgeted."""
        inner = self.inner
        return inner.minimum if inner is not None and inner.budget is not None else 0

    def _must_close(self, s: _State) -> ClosedBy | None:
        """Whether the next token of a thinking block must start its end sequence, and why."""
        if self.spec.budget is not None and s.thought >= self.spec.budget:
            return ClosedBy.BUDGET
        if self.max_tokens - s.written <= len(self.spec.end_token_ids) + self._reserve():
            return ClosedBy.ROOM
        return None

    def _may_open(self, s: _State) -> bool:
        """Under a grammar: whether the block could still open and close with room for it."""
        spec = self.spec
        return self.max_tokens - s.written > len(spec.start_token_ids) + len(spec.end_token_ids) + self._reserve()

    def _next(self, s: _State, token: int) -> _State:
        """The state after the output token ``token``."""
        spec, written = self.spec, s.written + 1
        if s.phase is Phase.OPENING:
            if token == spec.start_token_ids[s.matched]:
                if s.matched + 1 == len(spec.start_token_ids):
                    return _State(Phase.THINKING, written)
                return replace(s, written=written, matched=s.matched + 1)
            return _State(Phase.DONE, written)  # no thinking: the reply begins here
        if s.phase is Phase.THINKING:
            why = self._must_close(s)
            if why is None and token != spec.end_token_ids[0]:
                return replace(s, written=written, thought=s.thought + 1)
            s = replace(s, phase=Phase.CLOSING, closed_by=why or ClosedBy.MODEL)
        if s.phase is Phase.CLOSING:
            matched = s.matched + 1
            if matched == len(spec.end_token_ids):
                return replace(s, phase=Phase.DONE, written=written, matched=matched, reasoning_tokens=written)
            return replace(s, written=written, matched=matched)
        return replace(s, written=written)

    def _forced(self, s: _State) -> int | None:
        """The one token the next row may take, if the block forces one."""
        spec = self.spec
        if s.phase is Phase.CLOSING:
            return spec.end_token_ids[s.matched]
        if s.phase is Phase.THINKING and self._must_close(s) is not None:
            return spec.end_token_ids[0]
        if s.phase is Phase.OPENING and s.matched and self.inner is not None:
            return spec.start_token_ids[s.matched]  # a start begun under a grammar is written whole
        return None

    def _start_grammar(self, s: _State) -> None:
        """The thinking ended after ``s.written`` tokens: the grammar's budget is what is left."""
        inner = self.inner
        if inner is not None and inner.budget is not None:
            inner.budget = self.max_tokens - s.written

    # -- the RequestGrammar interface -------------------------------------------------------
    def accept(self, token: int) -> bool:
        """Advance past a confirmed token; False if the grammar (after the thinking) forbids it."""
        s = self.state
        if s.phase is Phase.DONE:
            return self.inner is None or self.inner.accept(token)
        after = self._next(s, token)
        self.state = after
        if after.phase is Phase.DONE and s.phase is Phase.OPENING:  # no thinking: this token is the reply's
            self._start_grammar(s)
            return self.inner is None or self.inner.accept(token)
        if after.phase is Phase.DONE:
            self._start_grammar(after)
        return True

    def fill(
        self, bitmask: torch.Tensor, row: int, drafts: tuple[int, ...] = (), redirects: Redirects | None = None
    ) -> None:
        """Fill ``bitmask[row]`` and the rows after each draft (as ``RequestGrammar.fill``); note in
        ``redirects`` the rows of an open block, whose end-of-turn tokens become its end."""
        s = self.state
        for offset in range(len(drafts) + 1):
            at = row + offset
            if s.phase is Phase.DONE:
                self._fill_grammar(bitmask, at, drafts[offset:], s)
                return
            forced = self._forced(s)
            if forced is not None:
                _only(bitmask, at, forced)
            elif s.phase is Phase.OPENING and self.inner is not None:  # the grammar's first token, or the start's
                start = self.spec.start_token_ids[0]
                rest = drafts[offset:] if offset < len(drafts) and drafts[offset] != start else ()
                self._fill_grammar(bitmask, at, rest, s)
                may_open = self._may_open(s)
                if may_open:
                    bitmask[at, start >> 5] |= _bit(start)
                if rest or not may_open:
                    return
            elif s.phase is Phase.THINKING and redirects is not None and self.end_of_turn:
                redirects.add(at, self.end_of_turn, self.spec.end_token_ids[0])
            if offset < len(drafts):
                if forced is not None and drafts[offset] != forced:
                    return  # the draft cannot match: nothing after it is accepted
                s = self._next(s, drafts[offset])

    def _fill_grammar(self, bitmask: torch.Tensor, row: int, drafts: tuple[int, ...], s: _State) -> None:
        """The grammar's rows (none: unconstrained), as if it had started after ``s.written`` tokens."""
        inner = self.inner
        if inner is None:
            if s.closed_by is not None and s.written == s.reasoning_tokens and s.written < self.max_tokens:
                for token in self.end_of_turn:  # the answer's first token: not the end of the turn
                    bitmask[row, token >> 5] &= ~_bit(token)
            return
        if inner.budget is None or self.state.phase is Phase.DONE:
            inner.fill(bitmask, row, drafts)
            return
        kept = inner.budget  # the thinking ends within this step's drafts: the budget it will have
        inner.budget = self.max_tokens - s.written
        try:
            inner.fill(bitmask, row, drafts)
        finally:
            inner.budget = kept

    def forced_tokens(self, limit: int) -> list[int]:
        """Jump-forward drafts: the rest of an end (or start) sequence being written; after the
        thinking, the grammar's."""
        if limit <= 0:
            return []
        s = self.state
        if s.phase is Phase.DONE:
            return self.inner.forced_tokens(limit) if self.inner is not None else []
        forced: list[int] = []
        while len(forced) < limit and s.phase is not Phase.DONE and (token := self._forced(s)) is not None:
            forced.append(token)
            s = self._next(s, token)
        return forced
