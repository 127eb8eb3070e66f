"""Tool-call parsing: the model's tool-call markup -> OpenAI ``tool_calls``, streamed or not.

Two formats:

- ``hermes``: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, one
  block per call (SmolLM2, Qwen2.5, Qwen3, Hermes; also what
  :mod:`gateway.tools.render` teaches a model whose template has no tool support).
- ``llama3_json``: the reply *is* the calls: ``{"name": ..., "parameters": {...}}``,
  optionally after ``<|python_tag|>``, several separated by ``;`` (Llama 3.x).

One state machine per format serves both modes: :meth:`StreamingToolParser.parse`
is ``feed(text) + finish()`` accumulated, so the non-streaming result *is* the
streaming one. The machine decides from the text seen so far and only ever waits
at the end of its buffer (a possible tag prefix, an unfinished JSON token), so
whatever way the text is chunked the same decisions are taken at the same
places: the accumulated content and tool calls are identical.

What streams when:

- Content streams as soon as it cannot be part of a call. Held back: a trailing
  run of whitespace (whitespace around a call is dropped: text before a call is
  right-stripped, text after one left-stripped) and a possible tag prefix.
- A call's header (index, id, type, name) goes out as soon as the name is known:
  the call's JSON so far is valid and its top-level ``"name"`` string is complete.
- Its arguments go out in one fragment when the call's JSON object closes, as
  ``json.dumps(arguments, ensure_ascii=False)`` (default separators, the form
  ``tojson`` renders back into the next prompt). Arguments given as a JSON
  string holding an object are decoded first; absent or null arguments are
  ``"{}"``; ``parameters`` is accepted for ``arguments``.

Malformed markup loses no text. Before the name is known, anything that does not
turn out to be a valid call (not JSON, JSON without a name, ``<tool_call>`` in
prose) stays content, verbatim. After the name went out the call stands; if its
JSON then breaks (or the text ends inside it), its arguments are the raw text the
model wrote for them (canonicalised if that alone is a JSON object), up to the
next ``</tool_call>`` / ``<tool_call>`` or the end. That may be invalid JSON, as
OpenAI's own arguments may be ("the model does not always generate valid JSON");
with constrained decoding (``tool_choice`` required/named) it cannot happen.
"""

from __future__ import annotations

import enum
import json
import re
import secrets
import string
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from agentgate.gateway.tools.render import template_supports_tools

__all__ = [
    "TOOL_PARSERS",
    "Delta",
    "FunctionDelta",
    "HermesToolParser",
    "Llama3JsonToolParser",
    "ParsedOutput",
    "StreamingToolParser",
    "ToolCall",
    "ToolCallDelta",
    "accumulate",
    "finish_reason",
    "new_tool_call_id",
    "select_tool_parser",
]

_ID_ALPHABET = string.ascii_letters + string.digits


def new_tool_call_id() -> str:
    """``call_`` + 24 random alphanumerics, the shape OpenAI's ids have."""
    return "call_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(24))


# --- results -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One complete call. ``arguments`` is a JSON string, as in OpenAI's ``function.arguments``."""

    id: str
    name: str
    arguments: str

    def to_openai(self) -> dict[str, Any]:
        """The entry of an assistant message's ``tool_calls``."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True, slots=True)
class ParsedOutput:
    """A whole reply: the text that is not a call, and the calls in order.

    ``content`` is None when there are calls and no other text (what OpenAI
    sends); a reply without calls keeps its text, even an empty one.
    """

    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class FunctionDelta:
    name: str | None = None
    arguments: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """One ``choices[].delta.tool_calls[]`` entry: the first for a call carries id, type and name."""

    index: int
    function: FunctionDelta
    id: str | None = None
    type: Literal["function"] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index}
        if self.id is not None:
            out["id"] = self.id
        if self.type is not None:
            out["type"] = self.type
        fn = {k: v for k, v in (("name", self.function.name), ("arguments", self.function.arguments)) if v is not None}
        out["function"] = fn
        return out


@dataclass(frozen=True, slots=True)
class Delta:
    """What one ``chat.completion.chunk`` carries in ``choices[].delta``: content or tool-call pieces."""

    content: str | None = None
    tool_calls: tuple[ToolCallDelta, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The OpenAI ``delta`` object (without ``role``, which the route adds to the first chunk)."""
        out: dict[str, Any] = {}
        if self.content is not None:
            out["content"] = self.content
        if self.tool_calls:
            out["tool_calls"] = [t.to_dict() for t in self.tool_calls]
        return out


def accumulate(deltas: Iterable[Delta]) -> ParsedOutput:
    """Fold deltas the way OpenAI clients do: concatenate content and, per index, arguments."""
    content: list[str] = []
    calls: dict[int, list[str]] = {}  # index -> [id, name, arguments]
    for d in deltas:
        if d.content:
            content.append(d.content)
        for t in d.tool_calls:
            entry = calls.setdefault(t.index, ["", "", ""])
            if t.id:
                entry[0] = t.id
            if t.function.name:
                entry[1] += t.function.name
            if t.function.arguments:
                entry[2] += t.function.arguments
    tool_calls = [ToolCall(*calls[i]) for i in sorted(calls)]
    text = "".join(content)
    return ParsedOutput(content=None if tool_calls and not text else text, tool_calls=tool_calls)


def finish_reason(engine_reason: str | None, *, tool_calls: bool) -> str | None:
    """``"tool_calls"`` when the reply made calls and ended normally; otherwise the engine's reason.

    A reply cut off by ``max_tokens`` stays ``"length"`` even with calls, as in
    vLLM: its last call may be incomplete.
    """
    return "tool_calls" if tool_calls and engine_reason == "stop" else engine_reason


# --- an incremental validator for one JSON object -----------------------------

_WS = " \t\n\r"
_DIGITS = "0123456789"
_NUMBER_CHARS = frozenset("0123456789+-.eE")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_PLAIN_STRING_RUN = re.compile(r'[^"\\]*')
_ESCAPES = frozenset('"\\/bfnrt')
_HEX = frozenset("0123456789abcdefABCDEF")
_LITERALS = {"t": "true", "f": "false", "n": "null"}
_ARGUMENT_KEYS = ("arguments", "parameters")


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


class _Event(enum.Enum):
    MORE = enum.auto()  # needs more text
    NAME = enum.auto()  # the top-level "name" string just completed: ``scanner.name``
    CLOSED = enum.auto()  # the object closed at ``scanner.end``
    ERROR = enum.auto()  # not JSON at ``scanner.error_at``


class _ObjectScanner:
    """Validates, char by char and resumably, the JSON object that starts at ``text[start] == "{"``.

    As strict as ``json.loads(strict=False)`` minus NaN/Infinity: raw control
    characters are allowed inside strings (small models write raw newlines).
    Tracks the top-level keys to report the ``"name"`` string and where the
    arguments value begins.
    """

    __slots__ = ("start", "pos", "stack", "mode", "token_start", "is_key", "escape", "literal", "key", "name",
                 "value_starts", "end", "error_at")  # fmt: skip

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

    def advance(self, text: str) -> _Event:
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
                            return _Event.NAME
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
            if c in _WS:
                i += 1
                continue
            if mode is M.AFTER_VALUE:
                if c == ",":
                    self.mode = M.KEY if self.stack[-1] == "}" else M.VALUE
                elif c == self.stack[-1]:
                    if self._close():
                        self.end = self.pos = i + 1
                        return _Event.CLOSED
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
                        return _Event.CLOSED
                else:
                    return self._error(i)
            else:  # VALUE or VALUE_OR_END
                if c == "]" and mode is M.VALUE_OR_END:
                    self._close()  # an array is never the outermost container
                    i += 1
                    continue
                if len(self.stack) == 1 and self.key in _ARGUMENT_KEYS:
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
        return _Event.MORE

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

    def _error(self, i: int) -> _Event:
        self.error_at = self.pos = i
        return _Event.ERROR


def _canonical_arguments(value: Any) -> str:
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


def _arguments_of(call: dict[str, Any]) -> str:
    key = next((k for k in _ARGUMENT_KEYS if k in call), None)
    return _canonical_arguments(None if key is None else call[key])


def _rstrip_index(text: str, lo: int, hi: int) -> int:
    """Start of the whitespace run that ends ``text[lo:hi]``."""
    while hi > lo and text[hi - 1] in _WS:
        hi -= 1
    return hi


def _skip_ws(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i] in _WS:
        i += 1
    return i


def _partial(text: str, i: int, *tags: str) -> bool:
    """``text[i:]`` is a proper prefix of one of ``tags`` (the rest may still arrive)."""
    rest = text[i:]
    return any(len(rest) < len(tag) and tag.startswith(rest) for tag in tags)


# --- the parsers ---------------------------------------------------------------


class StreamingToolParser(ABC):
    """Turns one reply's text into OpenAI deltas. One instance per choice; feed it, then finish it.

    ``feed(delta_text)`` returns the deltas that text makes certain (content
    deltas merged); ``finish()`` flushes what was held back, at the end of the
    reply. ``parse(text)`` is the non-streaming form. ``id_factory`` makes the
    call ids (``call_<random>`` by default; inject a deterministic one in tests).
    """

    name: ClassVar[str]

    def __init__(self, *, id_factory: Callable[[], str] | None = None) -> None:
        self._new_id = id_factory or new_tool_call_id
        self._text = ""
        self._pos = 0  # next char to read
        self._emit_from = 0  # content before this index has been emitted or dropped
        self._scanner: _ObjectScanner | None = None
        self._out: list[Delta] = []
        self._calls = 0
        self._finished = False

    @classmethod
    def parse(cls, text: str, *, id_factory: Callable[[], str] | None = None) -> ParsedOutput:
        """The whole reply at once; equal to accumulating ``feed(text)`` + ``finish()`` however chunked."""
        parser = cls(id_factory=id_factory)
        return accumulate([*parser.feed(text), *parser.finish()])

    @property
    def num_tool_calls(self) -> int:
        """Calls started so far (their headers went out)."""
        return self._calls

    def feed(self, delta_text: str) -> list[Delta]:
        if self._finished:
            raise RuntimeError("feed() after finish()")
        if delta_text:
            if not self._in_call():
                self._compact()
            self._text += delta_text
            self._advance(final=False)
        return self._take()

    def finish(self) -> list[Delta]:
        if not self._finished:
            self._finished = True
            self._advance(final=True)
        return self._take()

    @abstractmethod
    def _advance(self, final: bool) -> None:
        """Consume ``self._text`` from ``self._pos`` as far as it is decided (everything when ``final``)."""

    @abstractmethod
    def _in_call(self) -> bool:
        """Whether a call's JSON is open (its scanner holds indices into ``self._text``)."""

    def _compact(self) -> None:
        """Forget text that is emitted or dropped, so appending stays cheap on long replies.
        Outside a call only ``_pos`` and ``_emit_from`` index the text."""
        cut = min(self._pos, self._emit_from)
        if cut > 256:
            self._text = self._text[cut:]
            self._pos -= cut
            self._emit_from -= cut

    # -- emitting

    def _take(self) -> list[Delta]:
        out, self._out = self._out, []
        return out

    def _content(self, end: int) -> None:
        """Emit ``text[emit_from:end]`` as content."""
        if end > self._emit_from:
            piece = self._text[self._emit_from : end]
            if self._out and self._out[-1].content is not None:
                self._out[-1] = Delta(content=self._out[-1].content + piece)
            else:
                self._out.append(Delta(content=piece))
        self._emit_from = max(self._emit_from, end)

    def _header(self, name: str) -> None:
        call = ToolCallDelta(self._calls, FunctionDelta(name=name, arguments=""), id=self._new_id(), type="function")
        self._out.append(Delta(tool_calls=(call,)))
        self._calls += 1

    def _arguments(self, arguments: str) -> None:
        if arguments:
            self._out.append(Delta(tool_calls=(ToolCallDelta(self._calls - 1, FunctionDelta(arguments=arguments)),)))

    # -- one call's JSON object

    def _json_step(self) -> tuple[_Event, bool]:
        """Advance the open call object. Returns the event and, for CLOSED, whether it was a call.

        Emits the header at NAME and the arguments when a named object closes.
        """
        sc = self._scanner
        assert sc is not None
        event = sc.advance(self._text)
        if event is _Event.NAME:
            self._header(sc.name)  # type: ignore[arg-type]
            return event, True
        if event is _Event.CLOSED:
            try:
                obj = json.loads(self._text[sc.start : sc.end], strict=False)
            except (ValueError, RecursionError):
                obj = None
            if sc.name is not None:
                self._arguments(_arguments_of(obj) if isinstance(obj, dict) else self._raw_arguments(sc.end))
                return event, True
            name = obj.get("name") if isinstance(obj, dict) else None
            if isinstance(name, str) and name:  # a call that named itself after its arguments
                self._header(name)
                self._arguments(_arguments_of(obj))  # type: ignore[arg-type]
                return event, True
            return event, False
        return event, sc.name is not None

    def _raw_arguments(self, end: int) -> str:
        """Arguments of a named call whose JSON broke: the raw text of its arguments value up to ``end``."""
        sc = self._scanner
        assert sc is not None
        start = next((sc.value_starts[k] for k in _ARGUMENT_KEYS if k in sc.value_starts), None)
        raw = self._text[sc.start if start is None else start : end].strip(_WS)
        if start is not None:
            try:
                return _canonical_arguments(json.loads(raw, strict=False))
            except (ValueError, RecursionError):
                pass
        return raw


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
        self._steps = {_H.TEXT: self._text_step, _H.OPEN: self._open_step, _H.JSON: self._json_state,
                       _H.RAW: self._raw_step, _H.AFTER: self._after_step}  # fmt: skip

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
                self._content(n if final else _rstrip_index(t, self._emit_from, n))
                return False
            if t.startswith(tag, j):
                self._content(_rstrip_index(t, self._emit_from, j))  # whitespace before a call waits
                self._pos = j + len(tag)
                self._state = _H.OPEN
                return True
            if not final and _partial(t, j, tag):
                self._content(_rstrip_index(t, self._emit_from, j))
                self._pos = j
                return False
            i = j + 1

    def _open_step(self, final: bool) -> bool:
        i = self._pos = _skip_ws(self._text, self._pos)
        if i == len(self._text):
            if final:
                self._state = _H.TEXT  # flushes the tag as content
            return final
        if self._text[i] == "{":
            self._scanner = _ObjectScanner(i)
            self._state = _H.JSON
        else:  # "<tool_call>" in prose: it is content, read on after it
            self._state = _H.TEXT
        return True

    def _json_state(self, final: bool) -> bool:
        sc = self._scanner
        assert sc is not None
        event, named = self._json_step()
        if event is _Event.NAME:
            return True
        if event is _Event.CLOSED:
            self._pos = sc.end
            if named:
                self._emit_from = sc.end  # drops the whitespace held before the call
                self._state, self._close_tag_allowed = _H.AFTER, True
            else:
                self._state = _H.TEXT  # valid JSON but not a call: content, verbatim
            return True
        if event is _Event.ERROR:
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
            if not final and _partial(t, j, self.CLOSE_TAG, self.OPEN_TAG):
                self._pos = j
                return False
            i = j + 1

    def _end_raw(self, end: int, state: _H, *, close_tag_allowed: bool) -> None:
        self._arguments(self._raw_arguments(end))
        self._pos = self._emit_from = end
        self._state, self._close_tag_allowed = state, close_tag_allowed

    def _after_step(self, final: bool) -> bool:
        t, n = self._text, len(self._text)
        i = _skip_ws(t, self._pos)
        if self._close_tag_allowed and i < n:
            if t.startswith(self.CLOSE_TAG, i):
                self._close_tag_allowed = False
                i = _skip_ws(t, i + len(self.CLOSE_TAG))
            elif not final and _partial(t, i, self.CLOSE_TAG):
                self._pos = self._emit_from = i
                return False
        self._pos = self._emit_from = i
        if i == n:
            return False  # whitespace after a call is dropped, even at the end
        self._close_tag_allowed = False
        self._state = _H.TEXT
        return True


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
        self._steps = {_L.START: self._start_step, _L.TAG: self._tag_step, _L.JSON: self._json_state,
                       _L.RAW: self._raw_step, _L.AFTER: self._after_step, _L.SEP: self._sep_step,
                       _L.CONTENT: self._content_step}  # fmt: skip

    def _advance(self, final: bool) -> None:
        while self._steps[self._state](final):
            pass

    def _in_call(self) -> bool:
        return self._state is _L.JSON or self._state is _L.RAW

    def _expect_object(self, final: bool, *, tag_allowed: bool) -> bool:
        """At a place where a call object may begin (the start, after the tag, after ';')."""
        t = self._text
        i = self._pos = _skip_ws(t, self._pos)
        if i == len(t):
            if final:
                self._state = _L.CONTENT
            return final
        if t[i] == "{":
            self._scanner = _ObjectScanner(i)
            self._state = _L.JSON
        elif tag_allowed and t.startswith(self.PYTHON_TAG, i):
            self._pos = i + len(self.PYTHON_TAG)
            self._state = _L.TAG
        elif tag_allowed and not final and _partial(t, i, self.PYTHON_TAG):
            return False
        else:
            self._state = _L.CONTENT
        return True

    def _start_step(self, final: bool) -> bool:
        return self._expect_object(final, tag_allowed=True)

    def _tag_step(self, final: bool) -> bool:
        return self._expect_object(final, tag_allowed=False)

    def _sep_step(self, final: bool) -> bool:
        i = _skip_ws(self._text, self._pos)
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
        if event is _Event.NAME:
            return True
        if event is _Event.CLOSED and named:
            self._pos = self._emit_from = sc.end
            self._state = _L.AFTER
        elif event is _Event.ERROR and named:
            self._pos = sc.error_at
            self._state = _L.RAW
        elif event is _Event.MORE and not final:
            return False
        elif event is _Event.MORE and named:
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
        i = self._pos = _skip_ws(t, self._pos)
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


TOOL_PARSERS: dict[str, type[StreamingToolParser]] = {
    HermesToolParser.name: HermesToolParser,
    Llama3JsonToolParser.name: Llama3JsonToolParser,
}


def select_tool_parser(template: str | None, override: str | None = None) -> type[StreamingToolParser]:
    """The parser for a model's chat template, or the one named by ``override`` (a ``--tool-call-parser`` flag).

    A template without tool support gets ``hermes``: :func:`gateway.tools.render.render_chat_prompt`
    teaches such a model the ``<tool_call>`` markup. A tool-aware template that
    writes ``<tool_call>`` is ``hermes``; a Llama 3 one (``<|python_tag|>`` or
    ``<|start_header_id|>``) is ``llama3_json``; anything else defaults to ``hermes``.
    """
    if override is not None:
        try:
            return TOOL_PARSERS[override]
        except KeyError:
            raise ValueError(f"unknown tool-call parser {override!r}; known: {', '.join(TOOL_PARSERS)}") from None
    if template is None or not template_supports_tools(template) or "<tool_call>" in template:
        return HermesToolParser
    if "<|python_tag|>" in template or "<|start_header_id|>" in template:
        return Llama3JsonToolParser
    return HermesToolParser
