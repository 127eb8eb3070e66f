"""An incremental, resumable validator for the one JSON object a tool call is,
and the small text helpers the tool-call parsers share.

:class:`ObjectScanner` reads the object that starts at ``text[start] == "{"``
as the text grows, reporting when its top-level ``"name"`` string is complete
(a call's header can stream) and when the object closes or breaks.
"""

from __future__ import annotations

import enum
import json
import re
from typing import Any

WS = " \t\n\r"
_DIGITS = "0123456789"
_NUMBER_CHARS = frozenset("0123456789+-.eE")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_PLAIN_STRING_RUN = re.compile(r'[^"\\]*')
_ESCAPES = frozenset('"\\/bfnrt')
_HEX = frozenset("0123456789abcdefABCDEF")
_LITERALS = {"t": "true", "f": "false", "n": "null"}
ARGUMENT_KEYS = ("arguments", "parameters")


class _Mode(enum.Enum):
    VALUE = enum.auto()  # a value must follow (after ':' or ',' in an array)
    VALUE_OR_END = enum.auto()  # after '['
    KEY = enum.auto()  # after ',' in an object
    KEY_OR_END = enum.auto()  # after '{'
    COLON = enum.auto()
    AFTER_VALUE = enum.auto()
    STRING = enum.auto()
    NUMBER = enum.auto()
    LITERAL = enum.auto()


class ScanEvent(enum.Enum):
    MORE = enum.auto()  # needs more text
    NAME = enum.auto()  # the top-level "name" string just completed: ``scanner.name``
    CLOSED = enum.auto()  # the object closed at ``scanner.end``
    ERROR = enum.auto()  # not JSON at ``scanner.error_at``


class ObjectScanner:
    """Validates, char by char and resumably, the JSON object that starts at ``text[start] == "{"``.

    As strict as ``json.loads(strict=False)`` minus NaN/Infinity: raw control
    characters are allowed inside strings (small models write raw newlines).
    Tracks the top-level keys to report the ``"name"`` string and where the
    arguments value begins.
    """

    __slots__ = (
        "start",
        "pos",
        "stack",
        "mode",
        "token_start",
        "is_key",
        "escape",
        "literal",
        "key",
        "name",
        "value_starts",
        "end",
        "error_at",
    )

    def __init__(self, start: int) -> None:
        self.start = start
        self.pos = start + 1
        self.stack = ["}"]  # the closer each open container expects
        self.mode = _Mode.KEY_OR_END
        self.token_start = -1
        self.is_key = False
        self.escape = 0  # 0: none, 1: after a backslash, 2..5: reading \uXXXX digits
        self.literal = ""
        self.key: str | None = None  # the last top-level key
        self.name: str | None = None
        self.value_starts: dict[str, int] = {}
        self.end = -1
        self.error_at = -1

    def advance(self, text: str) -> ScanEvent:
        n = len(text)
        i = self.pos
        M = _Mode
        while i < n:
            mode = self.mode
            if mode is M.STRING:
                if self.escape == 0:
                    i = _PLAIN_STRING_RUN.match(text, i).end()  # type: ignore[union-attr]
                    if i == n:
                        break
                    if text[i] == '"':
                        i += 1
                        if self._string_done(text, i):
                            self.pos = i
                            return ScanEvent.NAME
                    else:
                        self.escape = 1
                        i += 1
                    continue
                c = text[i]
                if self.escape == 1:
                    if c == "u":
                        self.escape = 2
                    elif c in _ESCAPES:
                        self.escape = 0
                    else:
                        return self._error(i)
                else:
                    if c not in _HEX:
                        return self._error(i)
                    self.escape = 0 if self.escape == 5 else self.escape + 1
                i += 1
                continue
            c = text[i]
            if mode is M.NUMBER:
                if c in _NUMBER_CHARS:
                    i += 1
                    continue
                if not _NUMBER.fullmatch(text, self.token_start, i):
                    return self._error(i)
                self.mode = mode = M.AFTER_VALUE  # and read c as what follows the number
            elif mode is M.LITERAL:
                k = i - self.token_start
                if c != self.literal[k]:
                    return self._error(i)
                i += 1
                if k + 1 == len(self.literal):
                    self.mode = M.AFTER_VALUE
                continue
            if c in WS:
                i += 1
                continue
            if mode is M.AFTER_VALUE:
                if c == ",":
                    self.mode = M.KEY if self.stack[-1] == "}" else M.VALUE
                elif c == self.stack[-1]:
                    if self._close():
                        self.end = self.pos = i + 1
                        return ScanEvent.CLOSED
                else:
                    return self._error(i)
            elif mode is M.COLON:
                if c != ":":
                    return self._error(i)
                self.mode = M.VALUE
            elif mode is M.KEY or mode is M.KEY_OR_END:
                if c == '"':
                    self.mode, self.is_key, self.token_start = M.STRING, True, i
                elif c == "}" and mode is M.KEY_OR_END:
                    if self._close():
                        self.end = self.pos = i + 1
                        return ScanEvent.CLOSED
                else:
                    return self._error(i)
            else:  # VALUE or VALUE_OR_END
                if c == "]" and mode is M.VALUE_OR_END:
                    self._close()  # an array is never the outermost container
                    i += 1
                    continue
                if len(self.stack) == 1 and self.key in ARGUMENT_KEYS:
                    self.value_starts.setdefault(self.key, i)
                if c == "{":
                    self.stack.append("}")
                    self.mode = M.KEY_OR_END
                elif c == "[":
                    self.stack.append("]")
                    self.mode = M.VALUE_OR_END
                elif c == '"':
                    self.mode, self.is_key, self.token_start = M.STRING, False, i
                elif c == "-" or c in _DIGITS:
                    self.mode, self.token_start = M.NUMBER, i
                elif c in _LITERALS:
                    self.mode, self.token_start, self.literal = M.LITERAL, i, _LITERALS[c]
                else:
                    return self._error(i)
            i += 1
        self.pos = i
        return ScanEvent.MORE

    def _close(self) -> bool:
        """Close the innermost container; True when that was the object itself."""
        self.stack.pop()
        self.mode = _Mode.AFTER_VALUE
        return not self.stack

    def _string_done(self, text: str, end: int) -> bool:
        """A string ended at ``end``; True when it is the top-level name (the caller reports NAME)."""
        top = len(self.stack) == 1
        if self.is_key:
            self.mode = _Mode.COLON
            if top:
                self.key = json.loads(text[self.token_start : end], strict=False)
            return False
        self.mode = _Mode.AFTER_VALUE
        if top and self.key == "name" and self.name is None:
            name = json.loads(text[self.token_start : end], strict=False)
            if name:
                self.name = name
                return True
        return False

    def _error(self, i: int) -> ScanEvent:
        self.error_at = self.pos = i
        return ScanEvent.ERROR


def canonical_arguments(value: Any) -> str:
    """The arguments string for a decoded ``arguments`` value (see the module docstring)."""
    if value is None:
        return "{}"
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except ValueError:
            return value
        return json.dumps(decoded, ensure_ascii=False) if isinstance(decoded, dict) else value
    return json.dumps(value, ensure_ascii=False)


def arguments_of(call: dict[str, Any]) -> str:
    key = next((k for k in ARGUMENT_KEYS if k in call), None)
    return canonical_arguments(None if key is None else call[key])


def rstrip_index(text: str, lo: int, hi: int) -> int:
    """Start of the whitespace run that ends ``text[lo:hi]``."""
    while hi > lo and text[hi - 1] in WS:
        hi -= 1
    return hi


def skip_ws(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i] in WS:
        i += 1
    return i


def partial_tag(text: str, i: int, *tags: str) -> bool:
    """``text[i:]`` is a proper prefix of one of ``tags`` (the rest may still arrive)."""
    rest = text[i:]
    return any(len(rest) < len(tag) and tag.startswith(rest) for tag in tags)
