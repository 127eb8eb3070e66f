"""How a budgeted reply closes (``engine.structured.structured_output``: replies that fit their budget): from
where a grammar matcher stands, the shortest way the engine finds to end the structure, in the
model's tokens: close the string, the container, the required keys with their shortest values,
the markup the grammar forces, then the end-of-sequence token.
"""

from __future__ import annotations

import torch
import xgrammar as xgr

_MAX_CLOSING_CHARS = 800
_IN_STRING = '"' + "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ -_.:/@+"
_OUTSIDE = '}],"0[{ntf123456789-.e: \n' + "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ<>/_"
_OPENING = frozenset("{[,")
_RISKY = frozenset("{[,<;\n")  # what may open a container, a member or another call (a separator)


class JsonStringState:
    """Whether the text so far ends inside a JSON string (and right after a backslash in one)."""

    __slots__ = ("in_string", "escaped")

    def __init__(self, in_string: bool = False, escaped: bool = False) -> None:
        self.in_string, self.escaped = in_string, escaped

    def copy(self) -> JsonStringState:
        return JsonStringState(self.in_string, self.escaped)

    def feed(self, text: str) -> None:
        for ch in text:
            if self.escaped:
                self.escaped = False
            elif ch == "\\" and self.in_string:
                self.escaped = True
            elif ch == '"':
                self.in_string = not self.in_string


def _opens_after_quote(text: str) -> bool:
    """Whether ``text``, read from inside a JSON string, ends the string and then holds a character
    that opens a container or another member (``","`` does, ``", "`` inside the string does not)."""
    state = JsonStringState(in_string=True)
    for ch in text:
        if not state.in_string and ch in _OPENING:
            return True
        state.feed(ch)
    return False


class Closer:
    """Ways to close a structure from where a matcher stands, in the vocabulary's tokens.

    :meth:`closing` walks characters on a fork of the matcher, greedily and JSON-aware: what
    the grammar forces (jump-forward) as it comes, else the first character the grammar takes
    from an order that ends things first (inside a string: the quote, then letters and digits;
    outside: ``}`` ``]`` ``,`` then the shortest value starts), until the grammar may end. The
    text is spelled with the tokenizer and ends with the end-of-sequence token; a spelling
    the grammar does not take (never seen) is no closing (None).
    """

    def __init__(self, tokenizer, decoded_vocab: list[bytes], vocab_size: int) -> None:  # noqa: ANN001 - Tokenizer
        self._encode = tokenizer.encode
        texts = [token.decode("utf-8", errors="replace") for token in decoded_vocab[:vocab_size]]
        self.texts = texts + [""] * (vocab_size - len(texts))  # each token's text (a piece of UTF-8: U+FFFD)
        opening = torch.zeros(vocab_size, dtype=torch.bool)
        for token, text in enumerate(self.texts):
            if not _OPENING.isdisjoint(text):
                opening[token] = True
        self.allowed_unless_opening = _bool_to_bitmask(~opening)
        # Inside a string only what follows a closing quote opens anything: a "," in a sentence is text.
        opens_from_string = torch.tensor([_opens_after_quote(text) for text in self.texts], dtype=torch.bool)
        self.allowed_in_string_unless_opening = _bool_to_bitmask(~opens_from_string)
        risky = torch.tensor([not _RISKY.isdisjoint(text) for text in self.texts], dtype=torch.bool)
        self.risky = _bool_to_bitmask(risky)
        self.stop_token = max(tokenizer.eos_token_ids)

    def closing(self, matcher: xgr.GrammarMatcher, state: JsonStringState) -> list[int] | None:
        """Tokens that end the reply from ``matcher``'s state (the end token last), or None."""
        fork = matcher.fork()
        state = state.copy()
        text: list[str] = []
        size = 0
        while not fork.is_completed():
            forced = fork.find_jump_forward_string()
            if forced:
                if not fork.accept_string(forced):
                    return None
                piece = forced
            else:
                order = _IN_STRING if state.in_string else _OUTSIDE
                piece = next((ch for ch in order if fork.accept_string(ch)), "")
                if not piece:
                    return None
            state.feed(piece)
            text.append(piece)
            size += len(piece)
            if size > _MAX_CLOSING_CHARS:
                return None
        tokens = self._encode("".join(text), add_special_tokens=False) if text else []
        check = matcher.fork()
        if not all(check.accept_token(t) for t in tokens) or not check.is_completed():
            return None
        return [*tokens, self.stop_token]


class Budgeted:
    """A compiled grammar with the budget a request's reply must end within."""

    __slots__ = ("compiled", "budget", "closer", "minimum")

    def __init__(self, compiled: xgr.CompiledGrammar, budget: int, closer: Closer, minimum: int) -> None:
        self.compiled, self.budget, self.closer, self.minimum = compiled, budget, closer, minimum


def _bool_to_bitmask(allowed: torch.Tensor) -> torch.Tensor:
    """A bool vector over the vocabulary as one int32 bitmask row (xgrammar's layout)."""
    words = (allowed.numel() + 31) // 32
    padded = torch.zeros(words * 32, dtype=torch.int64)
    padded[: allowed.numel()] = allowed.to(torch.int64)
    weights = torch.tensor([1 << i for i in range(32)], dtype=torch.int64)
    packed = (padded.view(words, 32) * weights).sum(dim=1)
    return torch.where(packed >= 1 << 31, packed - (1 << 32), packed).to(torch.int32)
