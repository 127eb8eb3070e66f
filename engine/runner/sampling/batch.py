"""The sampler's input and output: per-row tensors plus host-side flags."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torch import Tensor

from agentgate.engine.sampling_params import SamplingParams


@dataclass(frozen=True)
class SamplingFlags:
    """Host-side facts about a batch's sampling rows, derived from their
    parameters (never read from the device). They only let the sampler and
    the runners skip work, so a flag may be True when no row needs the
    feature (the result is the same, only slower) but must not be False when
    one does."""

    all_greedy: bool
    any_top_k: bool
    any_top_p: bool
    any_min_p: bool
    any_penalties: bool
    any_logit_bias: bool
    any_min_tokens: bool
    max_num_logprobs: int  # -1 = no row wants logprobs; 0 = sampled token only; k = top-k too

    @classmethod
    def of(cls, params: Sequence[SamplingParams]) -> SamplingFlags:
        """The flags of a batch whose sampling rows have ``params``."""
        return cls(
            all_greedy=all(p.temperature == 0.0 for p in params),
            any_top_k=any(p.top_k > 0 for p in params),
            any_top_p=any(p.top_p < 1.0 for p in params),
            any_min_p=any(p.min_p > 0.0 for p in params),
            any_penalties=any(p.has_penalties for p in params),
            any_logit_bias=any(bool(p.logit_bias) for p in params),
            any_min_tokens=any(p.min_tokens > 0 for p in params),
            max_num_logprobs=max((p.logprobs for p in params if p.logprobs is not None), default=-1),
        )


@dataclass
class SamplingBatch:
    """Per-row sampling inputs; every tensor is on the logits' device.

    ``flags`` says which features any row uses. A tensor the flags rule out
    may be None (greedy batches skip gathering what only sampled rows read):
    ``temperature``, ``seed`` and ``position`` when ``all_greedy``, ``top_k``
    / ``top_p`` / ``min_p`` without their flag, the three penalty factors
    without ``any_penalties``.
    """

    flags: SamplingFlags
    temperature: Tensor | None  # [N] float32; 0 = greedy
    top_k: Tensor | None  # [N] int32; 0 (or -1, or >= V) = off
    top_p: Tensor | None  # [N] float32; 1.0 = off
    min_p: Tensor | None  # [N] float32; 0.0 = off
    seed: Tensor | None  # [N] int64; every request has one (the engine draws one when the user gave none)
    position: Tensor | None  # [N] int64; index in the whole sequence (prompt + output) of the token sampled
    presence_penalty: Tensor | None  # [N] float32
    frequency_penalty: Tensor | None  # [N] float32
    repetition_penalty: Tensor | None  # [N] float32; 1.0 = off
    output_counts: Tensor | None  # [N, V] int32: how often each token was generated so far
    prompt_mask: Tensor | None  # [N, V] bool: token occurs in the prompt (repetition penalty)
    logit_bias_ids: Tensor | None  # [N, B] int64, -1 padded
    logit_bias_values: Tensor | None  # [N, B] float32
    suppressed_ids: Tensor | None  # [N, S] int64, -1 padded: tokens forbidden at this step
    allowed_bitmask: Tensor | None  # [N, ceil(V'/32)] int32, xgrammar layout; all -1 = unconstrained
    # A row that samples one of its redirect_from ids emits its redirect_to id instead (an end-of-turn
    # inside a thinking block becomes the block's end: engine.structured.thinking).
    redirect_from: Tensor | None = None  # [N, R] int64, -1 padded
    redirect_to: Tensor | None = None  # [N] int64; -1 = none
    # The grammars' own masks before a forced-call budget narrowed ``allowed_bitmask`` (never less than it
    # allows; None when no row was narrowed): the sampler says where the budget removed the best token.
    unnarrowed_bitmask: Tensor | None = None  # [N, ceil(V'/32)] int32


@dataclass
class SamplerOutput:
    token_ids: Tensor  # [N] int64
    logprobs: Tensor | None  # [N] float32, raw logprob of the sampled token
    top_token_ids: Tensor | None  # [N, K] int64, highest first
    top_logprobs: Tensor | None  # [N, K] float32, descending
    overridden: Tensor | None = None  # [N] bool: the best token under unnarrowed_bitmask is one allowed_bitmask removed
