"""The sampler's input and output: per-row tensors plus host-side flags."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass
class SamplingBatch:
    """Per-row sampling inputs; every tensor is on the logits' device.

    The boolean flags and ``max_num_logprobs`` are facts the caller derives
    from its own host bookkeeping (never read from the device); they only let
    the sampler skip work, so a flag may be True when no row needs the feature
    (the result is the same, only slower) but must not be False when one does.
    """

    temperature: Tensor  # [N] float32; 0 = greedy
    top_k: Tensor  # [N] int32; 0 (or -1, or >= V) = off
    top_p: Tensor  # [N] float32; 1.0 = off
    min_p: Tensor  # [N] float32; 0.0 = off
    seed: Tensor  # [N] int64; every request has one (the engine draws one when the user gave none)
    position: Tensor  # [N] int64; index in the whole sequence (prompt + output) of the token sampled
    presence_penalty: Tensor  # [N] float32
    frequency_penalty: Tensor  # [N] float32
    repetition_penalty: Tensor  # [N] float32; 1.0 = off
    output_counts: Tensor | None  # [N, V] int32: how often each token was generated so far
    prompt_mask: Tensor | None  # [N, V] bool: token occurs in the prompt (repetition penalty)
    logit_bias_ids: Tensor | None  # [N, B] int64, -1 padded
    logit_bias_values: Tensor | None  # [N, B] float32
    suppressed_ids: Tensor | None  # [N, S] int64, -1 padded: tokens forbidden at this step
    allowed_bitmask: Tensor | None  # [N, ceil(V'/32)] int32, xgrammar layout; all -1 = unconstrained
    # Host-side facts, derived by the caller from its own bookkeeping:
    all_greedy: bool
    any_top_k: bool
    any_top_p: bool
    any_min_p: bool
    any_penalties: bool
    max_num_logprobs: int  # -1 = no row wants logprobs; 0 = sampled token only; k = top-k too


@dataclass
class SamplerOutput:
    token_ids: Tensor  # [N] int64
    logprobs: Tensor | None  # [N] float32, raw logprob of the sampled token
    top_token_ids: Tensor | None  # [N, K] int64, highest first
    top_logprobs: Tensor | None  # [N, K] float32, descending
