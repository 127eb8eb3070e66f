"""The ``llama3_json`` tool-call format: the reply *is* the calls, ``{"name": ..., "parameters": {...}}``,
optionally after ``<|python_tag|>``, several separated by ``;`` (Llama 3.x)."""

from __future__ import annotations

import enum
from collections.abc import Callable

from agentgate.gateway.tools.json_scanner import ObjectScanner, ScanEvent, partial_tag, skip_ws
from agentgate.gateway.tools.parser_base import StreamingToolParser


class _L(enum.Enum):
    START = enum.auto()  # leading whitespace
    TAG = enum.auto()  # after <|python_tag|>
    JSON = enum.auto()
    RAW = enum.auto()  # a named call whose JSON broke: the rest of the reply
    AFTER = enum.auto()  # after a call
    SEP = enum.auto()  # after ';'
    CONTENT = enum.auto()  # the rest is content


class Llama3JsonToolParser(StreamingToolParser):
    """Llama 3.x JSON calls: a reply that *starts* with a call object (after optional
    ``<|python_tag|>``) is calls, ``;``-separated; any other reply is content.

    Text after the last call is content (left-stripped); a dangling ``;`` at
    the end is dropped. A reply that starts with JSON that is not a call (no
    ``"name"``) is content, verbatim. A call that is not at the start ("Sure:
    {...}") is content too (vLLM's non-streaming path would search for it;
    its streaming path would not). A named call whose JSON breaks takes the
    rest of the reply as its raw arguments: there is no tag to stop at.
    """

    name = "llama3_json"
    PYTHON_TAG = "<|python_tag|>"

    def __init__(self, *, id_factory: Callable[[], str] | None = None) -> None:
        super().__init__(id_factory=id_factory)
        self._state = _L.START
        self._steps = {
            _L.START: self._start_step,
            _L.TAG: self._tag_step,
            _L.JSON: self._json_state,
            _L.RAW: self._raw_step,
            _L.AFTER: self._after_step,
            _L.SEP: self._sep_step,
            _L.CONTENT: self._content_step,
        }

    def _advance(self, final: bool) -> None:
        while self._steps[self._state](final):
            pass

    def _in_call(self) -> bool:
        return self._state is _L.JSON or self._state is _L.RAW

    def _expect_object(self, final: bool, *, tag_allowed: bool) -> bool:
        """At a place where a call object may begin (the start, after the tag, after ';')."""
        t = self._text
        i = self._pos = skip_ws(t, self._pos)
        if i == len(t):
            if final:
                self._state = _L.CONTENT
            return final
        if t[i] == "{":
            self._scanner = ObjectScanner(i)
            self._state = _L.JSON
        elif tag_allowed and t.startswith(self.PYTHON_TAG, i):
            self._pos = i + len(self.PYTHON_TAG)
            self._state = _L.TAG
        elif tag_allowed and not final and partial_tag(t, i, self.PYTHON_TAG):
            return False
        else:
            self._state = _L.CONTENT
        return True

    def _start_step(self, final: bool) -> bool:
        return self._expect_object(final, tag_allowed=True)

    def _tag_step(self, final: bool) -> bool:
        return self._expect_object(final, tag_allowed=False)

    def _sep_step(self, final: bool) -> bool:
        i = skip_ws(self._text, self._pos)
        if i == len(self._text) and final:
            self._emit_from = self._pos = i  # a dangling ';' is dropped
            return False
        return self._expect_object(final, tag_allowed=False)

    def _content_step(self, final: bool) -> bool:
        self._pos = len(self._text)
        self._content(self._pos)
        return False

    def _json_state(self, final: bool) -> bool:
        sc = self._scanner
        assert sc is not None
        event, named = self._json_step()
        if event is ScanEvent.NAME:
            return True
        if event is ScanEvent.CLOSED and named:
            self._pos = self._emit_from = sc.end
            self._state = _L.AFTER
        elif event is ScanEvent.ERROR and named:
            self._pos = sc.error_at
            self._state = _L.RAW
        elif event is ScanEvent.MORE and not final:
            return False
        elif event is ScanEvent.MORE and named:
            self._raw_step(final)
        else:  # not a call: the rest of the reply is content
            self._state = _L.CONTENT
        return True

    def _raw_step(self, final: bool) -> bool:
        self._pos = n = len(self._text)
        if final:
            self._arguments(self._raw_arguments(n))
            self._emit_from = n
            self._state = _L.AFTER
        return False

    def _after_step(self, final: bool) -> bool:
        t = self._text
        i = self._pos = skip_ws(t, self._pos)
        if i == len(t):
            self._emit_from = i
            return False
        self._emit_from = i
        if t[i] == ";":
            self._pos = i + 1
            self._state = _L.SEP
        else:
            self._state = _L.CONTENT
        return True
