"""Incremental detokenizing: token ids in as they are sampled, new text out, never half a character."""

from __future__ import annotations

import codecs
from collections.abc import Iterable

from agentgate.engine.text.tokenizer import Tokenizer


class IncrementalDetokenizer:
    """Turns one request's sampled tokens into text, a push at a time.

    It works on each token's bytes (``Tokenizer.token_bytes``) through an
    incremental UTF-8 decoder, so a push costs O(new tokens) whatever the
    output's length, and the bytes of a character that byte-level tokens split
    (emoji, CJK) are held back until the character completes. Invalid bytes
    become U+FFFD where the backend's lossy decode puts them, so for byte-level
    tokenizers the pushes and the flush concatenate to exactly
    ``tokenizer.decode(all_ids, skip_special_tokens)``. (For byte-fallback
    SentencePiece tokenizers the one difference is the first token's leading
    space: ``decode`` strips it, this keeps it, as the text continues a prompt.)

    Special tokens are dropped when ``skip_special_tokens``, else emitted as
    their text. Ids past the vocabulary produce nothing, as in ``decode``.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True) -> None:
        self._token_bytes = tokenizer.token_bytes
        self._skip = tokenizer.special_token_ids if skip_special_tokens else frozenset()
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pieces: list[str] = []
        self.num_chars = 0
        """Length of ``text``."""

    def push(self, new_token_ids: Iterable[int]) -> str:
        """Add tokens; return the text they complete (possibly "", while a character is incomplete)."""
        table, skip, size = self._token_bytes, self._skip, len(self._token_bytes)
        data = b"".join(table[i] for i in new_token_ids if 0 <= i < size and i not in skip)
        return self._emit(self._utf8.decode(data))

    def flush(self) -> str:
        """End of output: return what was held back, an incomplete character becoming U+FFFD."""
        return self._emit(self._utf8.decode(b"", final=True))

    def _emit(self, text: str) -> str:
        if text:
            self._pieces.append(text)
            self.num_chars += len(text)
        return text

    @property
    def text(self) -> str:
        """All text emitted so far (joined on access, so reading it each push would be quadratic; see ``tail``)."""
        if len(self._pieces) > 1:
            self._pieces = ["".join(self._pieces)]
        return self._pieces[0] if self._pieces else ""

    def tail(self, num_chars: int) -> str:
        """The last ``num_chars`` characters of ``text`` (all of it if shorter), in O(num_chars).

        For stop strings: a stop string ``s`` that ends inside the text a push
        returned (``new``) lies within ``tail(len(new) + len(s) - 1)``, and a
        match at index ``j`` of that window is at ``num_chars - len(window) + j``
        in ``text``.
        """
        parts: list[str] = []
        need = num_chars
        for piece in reversed(self._pieces):
            if need <= 0:
                break
            parts.append(piece[-need:])
            need -= len(piece)
        return "".join(reversed(parts))
