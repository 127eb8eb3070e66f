"""Front-end output processing: incremental detokenizing and stop strings.

The engine streams token ids; for each request the front end turns them
into text deltas, holding back any tail that could be the start of a stop
string. A stop string ends the request (the caller aborts it in the engine)
with finish reason "stop"; the text is cut before it unless
``include_stop_str_in_output``.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentgate.engine.sampling_params import SamplingParams
from agentgate.engine.text.detokenizer import IncrementalDetokenizer
from agentgate.engine.text.tokenizer import Tokenizer


@dataclass
class TextDelta:
    text: str
    stopped: bool  # a stop string matched: the request is over


class OutputProcessor:
    """Text of one request, a step at a time."""

    def __init__(self, tokenizer: Tokenizer, params: SamplingParams) -> None:
        self._detok = IncrementalDetokenizer(tokenizer, params.skip_special_tokens)
        self._stops = [s for s in params.stop if s]
        self._include_stop = params.include_stop_str_in_output
        self._hold = max((len(s) for s in self._stops), default=1) - 1
        self._pending = ""  # decoded but not yet released (may start a stop string)
        self.stopped = False
        self.matched_stop: str | None = None  # the stop string that ended the text

    def push(self, token_ids: list[int], finished: bool = False) -> TextDelta:
        """Feed new tokens; ``finished`` when the engine has ended the request."""
        if self.stopped:
            return TextDelta("", True)
        self._pending += self._detok.push(token_ids)
        if finished:
            self._pending += self._detok.flush()
        if self._stops:
            cut = self._find_stop()
            if cut is not None:
                released, self._pending = self._pending[:cut], ""
                self.stopped = True
                return TextDelta(released, True)
        if finished or not self._hold:
            released, self._pending = self._pending, ""
        else:
            keep = min(self._hold, len(self._pending))
            released = self._pending[: len(self._pending) - keep]
            self._pending = self._pending[len(self._pending) - keep :]
        return TextDelta(released, False)

    def _find_stop(self) -> int | None:
        """Where to cut ``_pending`` for the earliest stop string in it."""
        best: tuple[int, int] | None = None
        for stop in self._stops:
            at = self._pending.find(stop)
            if at >= 0:
                end = at + len(stop) if self._include_stop else at
                if best is None or at < best[0]:
                    best = (at, end)
                    self.matched_stop = stop
        return None if best is None else best[1]
