"""A program's last turn kept as the tokens the model read and wrote, so that its next turn
starts with exactly those tokens and finds them all in the prefix cache.

A returning turn's prompt is rendered from the messages the client sends back, the reply
among them, and the prefix cache compares token ids. The re-rendered reply can differ from
what the model wrote: in text (the model chose JSON spacing that the canonical ``arguments``
string does not keep) or only in tokens (the model spelled ``search`` as ``s``, ``ear``,
``ch``; the tokenizer writes ``search``). Either way the cache stops at the first
difference, early in the reply: measured on the default model, a turn returning after a
forced call hit 528 of the 567 tokens its previous turn computed.

So when a turn of a program (``gateway.programs.tags``) ends on the model's end token, with one
choice of one prompt, this keeps its prompt text, its prompt and output token ids and the
reply as the client got it (content, and each call's name and arguments). The program's next
turn uses them when its last assistant message is that reply and the new prompt renders
everything before it as the kept prompt: the prompt is then the kept token ids followed by
the tokens of the text after the reply's end token. The model reads its reply as it wrote it
rather than the template's rendering of the same message. Anything else (an edited history,
other tools or options, another reply, a reply with reasoning, a template that does not line
up) tokenizes the whole prompt as before.

Kept per gateway process, least recently used first out past ``max_bytes`` (64 MiB), counted
in bytes as held in memory: the program id, the prompt text and the reply's strings as CPython
stores them (1, 2 or 4 bytes a character), 4 bytes a token id. A turn that returns through
another gateway process tokenizes as before.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgspec

from agentgate.engine.byte_lru import ByteLRU, str_bytes
from agentgate.engine.text.tokenizer import Tokenizer
from agentgate.gateway.api_types.openai import AssistantMessage
from agentgate.gateway.tools.json_scanner import canonical_arguments
from agentgate.gateway.tools.schema import to_builtins

ReplyKey = tuple[str, tuple[tuple[str, str], ...]]

DEFAULT_MAX_BYTES = 64 << 20


def reply_key(message: Mapping[str, Any]) -> ReplyKey | None:
    """What identifies an assistant reply across the client's round trip: its text and its
    calls' names and (canonical) arguments. None for a reply with reasoning: templates
    render past reasoning their own way (or drop it)."""
    if message.get("reasoning_content") or message.get("reasoning"):
        return None
    content = message.get("content")
    if not isinstance(content, str | None):
        return None
    calls = []
    for call in to_builtins(message.get("tool_calls") or []):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            return None
        calls.append((function["name"], canonical_arguments(function.get("arguments"))))
    return (content or "", tuple(calls))


@dataclass(frozen=True, slots=True)
class _Turn:
    prompt_text: str
    token_ids: array  # the prompt's, then the output's, the end token last
    end_text: str  # the end token as text
    reply: ReplyKey

    @property
    def size(self) -> int:
        """Bytes it holds: its strings as stored, its token ids."""
        content, calls = self.reply
        strings = str_bytes(self.prompt_text, self.end_text, content, *(text for call in calls for text in call))
        return strings + self.token_ids.itemsize * len(self.token_ids)


class Returning(NamedTuple):
    """A program's kept turn that a new prompt may continue (:meth:`TurnTokens.returning`)."""

    turn: _Turn
    last: int  # the index of the conversation's last assistant message: the kept reply


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, Mapping) else getattr(message, "role", None)


class TurnStart:
    """A program's turn on its way (one choice of one prompt): what :meth:`TurnTokens.remember`
    keeps of it once it ends."""

    __slots__ = ("store", "program_id", "prompt_text", "prompt_ids")

    def __init__(self, store: TurnTokens, program_id: str, prompt_text: str, prompt_ids: Sequence[int]) -> None:
        self.store = store
        self.program_id = program_id
        self.prompt_text = prompt_text
        self.prompt_ids = prompt_ids

    def ended(self, output_ids: Sequence[int], reply: AssistantMessage | None) -> None:
        """It ended with ``output_ids`` and ``reply`` (None: nothing kept of it)."""
        message = msgspec.to_builtins(reply) if reply is not None else {}
        self.store.remember(self.program_id, self.prompt_text, self.prompt_ids, output_ids, message)


class TurnTokens:
    """Programs' last turns (see the module docstring), for one model's ``tokenizer``; safe to
    use from worker threads."""

    def __init__(self, tokenizer: Tokenizer, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.tokenizer = tokenizer
        self._turns: ByteLRU[str, _Turn] = ByteLRU(max_bytes)
        self._lock = threading.Lock()

    def remember(
        self,
        program_id: str,
        prompt_text: str,
        prompt_ids: Sequence[int],
        output_ids: Sequence[int],
        reply: Mapping[str, Any],
    ) -> None:
        """Keep a turn whose ``output_ids`` ended on an end token, with ``reply``, the assistant
        message the client got; any other turn forgets the program's last one."""
        key = reply_key(reply)
        ended = bool(output_ids) and output_ids[-1] in self.tokenizer.eos_token_ids
        with self._lock:
            self._turns.pop(program_id)
            if key is None or not ended:
                return
            end_text = self.tokenizer.decode([output_ids[-1]], skip_special_tokens=False)
            if end_text:
                turn = _Turn(prompt_text, array("I", [*prompt_ids, *output_ids]), end_text, key)
                self._turns.put(program_id, turn, str_bytes(program_id) + turn.size)

    def returning(self, program_id: str, text: str, messages: Sequence[Any]) -> Returning | None:
        """The program's kept turn, when prompt ``text`` (rendered from ``messages``, dicts or the
        request's structs) may continue it: its prompt text leads ``text`` and the last assistant
        message is its reply; None otherwise. Its ``last``: that message's index."""
        with self._lock:
            turn = self._turns.get(program_id)
        if turn is None or not text.startswith(turn.prompt_text):
            return None
        last = next((k for k in range(len(messages) - 1, -1, -1) if _role(messages[k]) == "assistant"), None)
        if last is None or reply_key(to_builtins(messages[last])) != turn.reply:
            return None
        return Returning(turn, last)

    def prompt_ids(self, returning: Returning, text: str, through: str) -> list[int] | None:
        """The token ids of prompt ``text``, a turn :meth:`returning` found: the kept turn's own
        tokens, then the text after its end token; None when the texts do not line up.
        ``through``: ``messages[: returning.last + 1]`` rendered as ``text`` was, without a
        generation prompt."""
        turn = returning.turn
        cut = through.rfind(turn.end_text)
        if cut < len(turn.prompt_text) or not through.startswith(turn.prompt_text):
            return None
        cut += len(turn.end_text)
        if not text.startswith(through[:cut]):
            return None
        return turn.token_ids.tolist() + self.tokenizer.encode(text[cut:], add_special_tokens=False)

    @property
    def nbytes(self) -> int:
        return self._turns.nbytes

    def __len__(self) -> int:
        return len(self._turns)
