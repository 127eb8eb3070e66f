"""The ``hermes`` tool-call format: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
one block per call (SmolLM2, Qwen2.5, Qwen3, Hermes; also what :mod:`gateway.tools.render`
teaches a model whose template has no tool support)."""

from __future__ import annotations

import enum
from collections.abc import Callable

from agentgate.gateway.tools.json_scanner import ObjectScanner, ScanEvent, partial_tag, rstrip_index, skip_ws
from agentgate.gateway.tools.parser_base import StreamingToolParser


class _H(enum.Enum):
    TEXT = enum.auto()
    OPEN = enum.auto()  # after <tool_call>, before its "{"
    JSON = enum.auto()
    RAW = enum.auto()  # a named call whose JSON broke: up to the next tag
    AFTER = enum.auto()  # after a call: whitespace and one optional </tool_call> are dropped


class HermesToolParser(StreamingToolParser):
    """``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` blocks anywhere in the reply.

    A block is ``<tool_call>``, whitespace, one JSON object, then optionally
    whitespace and ``</tool_call>`` (a missing closing tag is tolerated: Qwen
    may stop right after the JSON). Several blocks are parallel calls. Text
    between blocks is content.
    """

    name = "hermes"
    OPEN_TAG = "<tool_call>"
    CLOSE_TAG = "</tool_call>"

    def __init__(self, *, id_factory: Callable[[], str] | None = None) -> None:
        super().__init__(id_factory=id_factory)
        self._state = _H.TEXT
        self._close_tag_allowed = False
        self._steps = {
            _H.TEXT: self._text_step,
            _H.OPEN: self._open_step,
            _H.JSON: self._json_state,
            _H.RAW: self._raw_step,
            _H.AFTER: self._after_step,
        }

    def _advance(self, final: bool) -> None:
        while self._steps[self._state](final):
            pass

    def _in_call(self) -> bool:
        return self._state is _H.JSON or self._state is _H.RAW

    def _text_step(self, final: bool) -> bool:
        t, n, tag = self._text, len(self._text), self.OPEN_TAG
        i = self._pos
        while True:
            j = t.find("<", i)
            if j == -1:
                self._pos = n
                self._content(n if final else rstrip_index(t, self._emit_from, n))
                return False
            if t.startswith(tag, j):
                self._content(rstrip_index(t, self._emit_from, j))  # whitespace before a call waits
                self._pos = j + len(tag)
                self._state = _H.OPEN
                return True
            if not final and partial_tag(t, j, tag):
                self._content(rstrip_index(t, self._emit_from, j))
                self._pos = j
                return False
            i = j + 1

    def _open_step(self, final: bool) -> bool:
        i = self._pos = skip_ws(self._text, self._pos)
        if i == len(self._text):
            if final:
                self._state = _H.TEXT  # flushes the tag as content
            return final
        if self._text[i] == "{":
            self._scanner = ObjectScanner(i)
            self._state = _H.JSON
        else:  # "<tool_call>" in prose: it is content, read on after it
            self._state = _H.TEXT
        return True

    def _json_state(self, final: bool) -> bool:
        sc = self._scanner
        assert sc is not None
        event, named = self._json_step()
        if event is ScanEvent.NAME:
            return True
        if event is ScanEvent.CLOSED:
            self._pos = sc.end
            if named:
                self._emit_from = sc.end  # drops the whitespace held before the call
                self._state, self._close_tag_allowed = _H.AFTER, True
            else:
                self._state = _H.TEXT  # valid JSON but not a call: content, verbatim
            return True
        if event is ScanEvent.ERROR:
            self._pos = sc.error_at
            self._state = _H.RAW if named else _H.TEXT  # unnamed: content up to the error, read on from it
            return True
        if not final:
            return False
        if named:  # the reply ended inside a named call
            self._end_raw(len(self._text), _H.AFTER, close_tag_allowed=False)
        else:  # ... or inside something that never became one: content
            self._pos = sc.pos
            self._state = _H.TEXT
        return True

    def _raw_step(self, final: bool) -> bool:
        t, n = self._text, len(self._text)
        i = self._pos
        while True:
            j = t.find("<", i)
            if j == -1:
                self._pos = n
                if final:
                    self._end_raw(n, _H.AFTER, close_tag_allowed=False)
                return final
            if t.startswith(self.CLOSE_TAG, j):
                self._end_raw(j, _H.AFTER, close_tag_allowed=True)
                return True
            if t.startswith(self.OPEN_TAG, j):
                self._end_raw(j, _H.TEXT, close_tag_allowed=False)
                return True
            if not final and partial_tag(t, j, self.CLOSE_TAG, self.OPEN_TAG):
                self._pos = j
                return False
            i = j + 1

    def _end_raw(self, end: int, state: _H, *, close_tag_allowed: bool) -> None:
        self._arguments(self._raw_arguments(end))
        self._pos = self._emit_from = end
        self._state, self._close_tag_allowed = state, close_tag_allowed

    def _after_step(self, final: bool) -> bool:
        t, n = self._text, len(self._text)
        i = skip_ws(t, self._pos)
        if self._close_tag_allowed and i < n:
            if t.startswith(self.CLOSE_TAG, i):
                self._close_tag_allowed = False
                i = skip_ws(t, i + len(self.CLOSE_TAG))
            elif not final and partial_tag(t, i, self.CLOSE_TAG):
                self._pos = self._emit_from = i
                return False
        self._pos = self._emit_from = i
        if i == n:
            return False  # whitespace after a call is dropped, even at the end
        self._close_tag_allowed = False
        self._state = _H.TEXT
        return True
