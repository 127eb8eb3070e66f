"""What a generation's choices yield and what the formats write from: a leaf of plain values.

:class:`ChoiceEvent` is what one engine output adds to a choice, its text and the reply
pieces the choice read from it (``gateway.choice`` makes them, ``gateway.formats`` writes
them); :class:`FinishedChoice` is what a whole (non-streaming) body reads of a choice that
ran to its end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

from agentgate.engine.front.protocol import TokenLogprobs
from agentgate.engine.sampling_params import SamplingParams
from agentgate.gateway.tools.deltas import Delta, ParsedOutput


class ChoiceEvent(NamedTuple):
    """What one engine output adds to a choice; ``matched_stop``: on its last event, the stop
    string that ended it (finish reason ``stop``), if one did. ``deltas``: the reply's content
    and tool-call pieces the choice read from ``text`` through its tool plan
    (``gateway.replies.ReplyReader``); ``reply_finish``: on the last event, the finish reason
    as the APIs report it (``tool_calls`` when the reply made calls and ended normally)."""

    text: str
    token_ids: list[int]
    logprobs: list[TokenLogprobs] | None
    finish_reason: str | None
    matched_stop: str | None = None
    deltas: Sequence[Delta] = ()
    reply_finish: str | None = None


class FinishedChoice(Protocol):
    """A choice collected to its end (``gateway.generation.Choice``), as a whole body reads it."""

    index: int
    prompt_index: int
    params: SamplingParams
    finish_reason: str | None
    reply_finish: str | None  # as the APIs report it (ChoiceEvent.reply_finish)
    token_ids: list[int]
    logprobs: list[TokenLogprobs]

    @property
    def text(self) -> str: ...

    @property
    def reply(self) -> ParsedOutput: ...

    @property
    def matched_stop(self) -> str | None: ...
