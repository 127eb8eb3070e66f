"""Tool-call parsing: the model's tool-call markup -> OpenAI ``tool_calls``, streamed or not.

The base class of the parsers; one module per format (``gateway.tools.hermes``,
``gateway.tools.llama3_json``), chosen by ``gateway.tools.parser_registry``.

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

import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import ClassVar

from agentgate.gateway.tools.deltas import (
    Delta,
    FunctionDelta,
    ParsedOutput,
    ToolCallDelta,
    accumulate,
    new_tool_call_id,
)
from agentgate.gateway.tools.json_scanner import (
    ARGUMENT_KEYS,
    WS,
    ObjectScanner,
    ScanEvent,
    arguments_of,
    canonical_arguments,
)


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
        self._scanner: ObjectScanner | None = None
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

    def _json_step(self) -> tuple[ScanEvent, bool]:
        """Advance the open call object. Returns the event and, for CLOSED, whether it was a call.

        Emits the header at NAME and the arguments when a named object closes.
        """
        sc = self._scanner
        assert sc is not None
        event = sc.advance(self._text)
        if event is ScanEvent.NAME:
            self._header(sc.name)  # type: ignore[arg-type]
            return event, True
        if event is ScanEvent.CLOSED:
            try:
                obj = json.loads(self._text[sc.start : sc.end], strict=False)
            except (ValueError, RecursionError):
                obj = None
            if sc.name is not None:
                self._arguments(arguments_of(obj) if isinstance(obj, dict) else self._raw_arguments(sc.end))
                return event, True
            name = obj.get("name") if isinstance(obj, dict) else None
            if isinstance(name, str) and name:  # a call that named itself after its arguments
                self._header(name)
                self._arguments(arguments_of(obj))  # type: ignore[arg-type]
                return event, True
            return event, False
        return event, sc.name is not None

    def _raw_arguments(self, end: int) -> str:
        """Arguments of a named call whose JSON broke: the raw text of its arguments value up to ``end``."""
        sc = self._scanner
        assert sc is not None
        start = next((sc.value_starts[k] for k in ARGUMENT_KEYS if k in sc.value_starts), None)
        raw = self._text[sc.start if start is None else start : end].strip(WS)
        if start is not None:
            try:
                return canonical_arguments(json.loads(raw, strict=False))
            except (ValueError, RecursionError):
                pass
        return raw
