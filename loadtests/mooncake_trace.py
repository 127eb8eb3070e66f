"""The Mooncake trace format (Mooncake's FAST'25 traces; AIPerf's ``mooncake_trace``): reading one,
scaling it to this machine, its sessions, and the prompt text its block hashes stand for.

Each JSONL line is one request: ``timestamp`` (milliseconds from the trace's start),
``input_length`` and ``output_length`` (tokens) and ``hash_ids``, one id per 512-token block of
the prompt, equal ids standing for equal blocks (so a shared prefix is a shared run of ids). As
AIPerf reads multi-turn traces, a line may carry ``session_id`` (its session's turns are its lines
in file order) and ``delay`` (milliseconds after the session's previous reply; without it, a later
turn goes at its ``timestamp`` or when the previous reply ends, whichever is later). A line
without ``session_id`` is a session of one turn. A line with fewer ``hash_ids`` than its blocks
has the missing blocks to itself; ``hash_ids`` past its blocks are not used.

Scaling (``length_divisor`` N, ``time_scale`` M): every length is divided by N (a block becomes
512 / N tokens, so N divides 512) and every time multiplied by M.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from agentgate.engine.text.tokenizer import Tokenizer

BLOCK_TOKENS = 512
SYNTHETIC_TRACE = Path(__file__).parent / "traces" / "agent_sessions.jsonl"


class TraceError(ValueError):
    """A trace line that is not a Mooncake request; the message names the line."""


@dataclass(frozen=True)
class TraceTurn:
    """One request of the trace, scaled: lengths in tokens, times in seconds."""

    line: int
    timestamp_s: float | None
    delay_s: float | None
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]


@dataclass(frozen=True)
class TraceSession:
    session_id: str
    turns: tuple[TraceTurn, ...]

    @property
    def start_s(self) -> float:
        return self.turns[0].timestamp_s or 0.0

    @property
    def final_tokens(self) -> int:
        """The last turn's prompt and reply: the conversation's size at its end."""
        return self.turns[-1].input_tokens + self.turns[-1].output_tokens


def read_trace(path: str | Path, length_divisor: int = 1, time_scale: float = 1.0) -> list[TraceSession]:
    """The sessions of a trace file, scaled, ordered by their first turn's time."""
    with Path(path).open(encoding="utf-8") as lines:
        return parse_trace(lines, length_divisor, time_scale)


def parse_trace(lines: Iterable[str], length_divisor: int = 1, time_scale: float = 1.0) -> list[TraceSession]:
    if length_divisor < 1 or BLOCK_TOKENS % length_divisor:
        raise TraceError(f"the length divisor must divide {BLOCK_TOKENS} (a block's tokens), got {length_divisor}")
    if time_scale <= 0:
        raise TraceError(f"the time scale must be positive, got {time_scale}")
    sessions: dict[str, list[TraceTurn]] = {}
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        row = _row(number, text)
        key = str(row["session_id"]) if row.get("session_id") is not None else f"line-{number}"
        turns = sessions.setdefault(key, [])
        turns.append(_turn(number, row, first=not turns, divisor=length_divisor, scale=time_scale))
    ordered = [TraceSession(key, tuple(turns)) for key, turns in sessions.items()]
    return sorted(ordered, key=lambda s: s.start_s)


def _row(number: int, text: str) -> dict:
    try:
        row = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"line {number}: not JSON ({exc.msg})") from None
    if not isinstance(row, dict):
        raise TraceError(f"line {number}: a request is a JSON object")
    return row


def _turn(number: int, row: dict, first: bool, divisor: int, scale: float) -> TraceTurn:
    def length(name: str) -> int:
        value = row.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise TraceError(f"line {number}: '{name}' must be a positive integer, got {value!r}")
        return value

    def seconds(name: str) -> float | None:
        value = row.get(name)
        if value is None:
            return None
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise TraceError(f"line {number}: '{name}' must be milliseconds >= 0, got {value!r}")
        return value / 1000 * scale

    input_length, output_length = length("input_length"), length("output_length")
    timestamp, delay = seconds("timestamp"), seconds("delay")
    if first and timestamp is None:
        raise TraceError(f"line {number}: a session's first request needs a 'timestamp'")
    if not first and timestamp is None and delay is None:
        raise TraceError(f"line {number}: a later turn needs a 'delay' or a 'timestamp'")
    blocks = math.ceil(input_length / BLOCK_TOKENS)
    given = row.get("hash_ids") or []
    if not isinstance(given, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in given):
        raise TraceError(f"line {number}: 'hash_ids' must be a list of integers")
    own = [own_block(number, i) for i in range(len(given), blocks)]
    return TraceTurn(
        line=number,
        timestamp_s=timestamp,
        delay_s=None if first else delay,
        input_tokens=max(1, round(input_length / divisor)),
        output_tokens=max(1, round(output_length / divisor)),
        hash_ids=tuple(given[:blocks]) + tuple(own),
    )


def own_block(line: int, index: int) -> int:
    """The id of block ``index`` (below 100,000) that only line ``line`` has: ids below zero never occur
    in a trace. Indexes from 50,000 are the replay's own extra text (:meth:`PromptText.growth`)."""
    return -(line * 100_000 + index) - 1


class PromptText:
    """The text a run of block hashes stands for: each id a fixed sequence of words that are one
    token each (with their leading space), so a block is exactly its tokens, texts with a common
    run of ids share that prefix token for token, and a block cut short is a prefix of itself.
    ``salt`` makes one round's blocks differ from another's (no round hits the last one's cache)."""

    def __init__(self, tokenizer: Tokenizer, block_tokens: int, salt: str = "") -> None:
        self.block_tokens = block_tokens
        self.salt = salt
        self._words = single_token_words(tokenizer)
        self._blocks: dict[int, list[str]] = {}

    def _block(self, hash_id: int) -> list[str]:
        if hash_id not in self._blocks:
            rng = random.Random(f"{self.salt}/{hash_id}")
            self._blocks[hash_id] = rng.choices(self._words, k=self.block_tokens)
        return self._blocks[hash_id]

    def _words_of(self, hash_ids: Iterable[int], tokens: int) -> list[str]:
        words: list[str] = []
        for hash_id in hash_ids:
            if len(words) >= tokens:
                break
            words += self._block(hash_id)
        return words[:tokens]

    def prompt(self, turn: TraceTurn) -> str:
        """A session's first prompt: the turn's blocks, cut at its input tokens."""
        return "".join(" " + w for w in self._words_of(turn.hash_ids, turn.input_tokens))

    def growth(self, previous: TraceTurn, turn: TraceTurn) -> str:
        """What a later turn adds past its previous prompt and reply (the tool's result, replayed):
        its tokens beyond both, at least one, from the blocks the previous turn did not have."""
        tokens = max(1, turn.input_tokens - previous.input_tokens - previous.output_tokens)
        seen = set(previous.hash_ids)
        new = [h for h in turn.hash_ids if h not in seen]
        # Past the trace's own new blocks, the turn's extra text comes from blocks only it has.
        extra = (own_block(turn.line, 50_000 + i) for i in range(math.ceil(tokens / self.block_tokens)))
        return "".join(" " + w for w in self._words_of([*new, *extra], tokens))


def single_token_words(tokenizer: Tokenizer, limit: int = 4096) -> list[str]:
    """Lower-case words that, after a space, encode as one token of ``tokenizer`` (lowest ids first)."""
    words: list[str] = []
    for token_id, raw in enumerate(tokenizer.token_bytes):
        piece = raw.decode("utf-8", errors="replace")
        word = piece[1:]
        if piece[:1] != " " or not (3 <= len(word) <= 10 and word.isascii() and word.isalpha() and word.islower()):
            continue
        if tokenizer.encode(piece, add_special_tokens=False) == [token_id]:
            words.append(word)
            if len(words) >= limit:
                break
    if len(words) < 64:
        raise TraceError(f"the tokenizer has only {len(words)} one-token words; a prompt cannot be synthesized")
    return words
