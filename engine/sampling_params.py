"""Per-request sampling parameters, validated before they reach the engine loop."""

from __future__ import annotations

import msgspec

from agentgate.engine.errors import InvalidRequestError

MAX_LOGPROBS = 20
MAX_STOP_TOKEN_IDS = 32
MAX_LOGIT_BIAS = 300


class StructuredOutput(msgspec.Struct, omit_defaults=True, kw_only=True):
    """A constraint on the output, enforced by a token bitmask at sampling.
    Exactly one field is set: a JSON schema (as JSON text), any JSON object,
    a regular expression, an EBNF grammar, or an xgrammar structural tag (as
    JSON text: how tool calls are forced)."""

    json_schema: str | None = None
    json_object: bool = False
    regex: str | None = None
    grammar: str | None = None
    structural_tag: str | None = None
    # The reply must end whole within this many tokens (the request's max_tokens): the grammar
    # never starts what it cannot close and closes in time (engine/structured/structured_output.py). Set for
    # a reply that is nothing but the structure (a forced tool call, a response_format).
    max_tokens: int | None = None

    def kind(self) -> tuple[str, str]:
        """(kind, spec) of the one constraint set; InvalidRequestError otherwise."""
        chosen = [
            (name, value)
            for name, value in (
                ("json_schema", self.json_schema),
                ("json_object", "{}" if self.json_object else None),
                ("regex", self.regex),
                ("grammar", self.grammar),
                ("structural_tag", self.structural_tag),
            )
            if value is not None
        ]
        if len(chosen) != 1:
            raise InvalidRequestError("a structured output sets exactly one constraint", "structured")
        return chosen[0]


BUDGET_TOO_SMALL = "the output budget cannot hold the shortest reply the grammar allows"
"""How the engine's refusal of a ``StructuredOutput.max_tokens`` below the grammar's shortest reply begins."""


def budget_error(budget: int, minimum: int) -> str:
    """The engine's refusal of a budget below the shortest reply (``minimum`` tokens, the end included)."""
    return f"{BUDGET_TOO_SMALL}: {budget} tokens, the shortest takes {minimum}"


def parse_budget_error(message: str) -> tuple[int, int] | None:
    """(budget, minimum) of a :func:`budget_error` message; None for any other."""
    if not message.startswith(BUDGET_TOO_SMALL + ": "):
        return None
    words = message.split()
    return int(words[-6]), int(words[-1])


class SamplingParams(msgspec.Struct, omit_defaults=True, kw_only=True):
    """How to sample one request's tokens (OpenAI + vLLM semantics).

    temperature 0 means greedy. ``seed`` fixes the noise: the token sampled at
    a position depends only on (seed, position, logits), never on the batch.
    ``logprobs`` None means none; 0 means the sampled token's logprob only;
    k > 0 adds the top-k alternatives.

    ``stop``, ``include_stop_str_in_output`` and ``skip_special_tokens`` act
    on text, so the front end applies them (the engine sees token ids only).
    ``structured`` constrains the output by a grammar (see StructuredOutput).
    """

    max_tokens: int | None = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: dict[int, float] | None = None
    logprobs: int | None = None
    min_tokens: int = 0
    ignore_eos: bool = False
    stop_token_ids: list[int] = msgspec.field(default_factory=list)
    stop: list[str] = msgspec.field(default_factory=list)
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    structured: StructuredOutput | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def has_penalties(self) -> bool:
        """Whether any of the presence, frequency or repetition penalties acts."""
        return self.presence_penalty != 0.0 or self.frequency_penalty != 0.0 or self.repetition_penalty != 1.0

    def validate(self, vocab_size: int | None = None) -> SamplingParams:
        """Raise InvalidRequestError naming the first bad field; return self."""

        def bad(param: str, why: str) -> InvalidRequestError:
            return InvalidRequestError(f"{param} {why}", param=param)

        if self.max_tokens is not None and self.max_tokens < 1:
            raise bad("max_tokens", f"must be at least 1, got {self.max_tokens}")
        if not 0.0 <= self.temperature <= 100.0:
            raise bad("temperature", f"must be in [0, 100], got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise bad("top_p", f"must be in (0, 1], got {self.top_p}")
        if self.top_k < -1:
            raise bad("top_k", f"must be -1, 0 (off) or positive, got {self.top_k}")
        if not 0.0 <= self.min_p <= 1.0:
            raise bad("min_p", f"must be in [0, 1], got {self.min_p}")
        if not -2.0 <= self.presence_penalty <= 2.0:
            raise bad("presence_penalty", f"must be in [-2, 2], got {self.presence_penalty}")
        if not -2.0 <= self.frequency_penalty <= 2.0:
            raise bad("frequency_penalty", f"must be in [-2, 2], got {self.frequency_penalty}")
        if not 0.0 < self.repetition_penalty <= 2.0:
            raise bad("repetition_penalty", f"must be in (0, 2], got {self.repetition_penalty}")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_LOGPROBS:
            raise bad("logprobs", f"must be in [0, {MAX_LOGPROBS}], got {self.logprobs}")
        if self.min_tokens < 0:
            raise bad("min_tokens", f"must be non-negative, got {self.min_tokens}")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise bad("min_tokens", f"({self.min_tokens}) must not exceed max_tokens ({self.max_tokens})")
        if self.seed is not None and not -(2**63) <= self.seed < 2**64:
            raise bad("seed", "must fit in 64 bits")
        if self.structured is not None:
            self.structured.kind()
        if any(not s for s in self.stop):
            raise bad("stop", "must not contain empty strings")
        if len(self.stop_token_ids) > MAX_STOP_TOKEN_IDS:
            raise bad("stop_token_ids", f"may hold at most {MAX_STOP_TOKEN_IDS} ids")
        if self.logit_bias and len(self.logit_bias) > MAX_LOGIT_BIAS:
            raise bad("logit_bias", f"may hold at most {MAX_LOGIT_BIAS} entries")
        for token in self.stop_token_ids:
            if token < 0 or (vocab_size is not None and token >= vocab_size):
                raise bad("stop_token_ids", f"holds {token}, outside the vocabulary")
        for token, bias in (self.logit_bias or {}).items():
            if token < 0 or (vocab_size is not None and token >= vocab_size):
                raise bad("logit_bias", f"has token {token}, outside the vocabulary")
            if not -100.0 <= bias <= 100.0:
                raise bad("logit_bias", f"value for token {token} must be in [-100, 100], got {bias}")
        return self
