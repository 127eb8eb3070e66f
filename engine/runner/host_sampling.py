"""Builds a SamplingBatch on the host from per-row Python state (the sync
runner's way; the overlapped runner gathers the same fields on the device)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agentgate.engine.runner.noise import as_int64
from agentgate.engine.runner.sampling_batch import SamplingBatch
from agentgate.engine.sampling_params import SamplingParams


@dataclass
class SamplingRow:
    """One row that samples this step."""

    params: SamplingParams
    seed: int
    eos_token_ids: frozenset[int]
    token_ids: list[int]  # every known token of the request
    num_prompt_tokens: int

    @property
    def position(self) -> int:
        """Sequence index of the token being sampled."""
        return len(self.token_ids)


def _padded(rows: list[list[int | float]], fill: int | float, dtype: torch.dtype) -> torch.Tensor:
    width = max(1, max(len(r) for r in rows))
    return torch.tensor([r + [fill] * (width - len(r)) for r in rows], dtype=dtype)


def build_sampling_batch(rows: list[SamplingRow], vocab_size: int, device: torch.device) -> SamplingBatch:
    params = [r.params for r in rows]
    any_penalties = any(
        p.presence_penalty != 0.0 or p.frequency_penalty != 0.0 or p.repetition_penalty != 1.0
        for p in params
    )
    output_counts = prompt_mask = None
    if any_penalties:
        output_counts = torch.zeros(len(rows), vocab_size, dtype=torch.int32)
        prompt_mask = torch.zeros(len(rows), vocab_size, dtype=torch.bool)
        for i, r in enumerate(rows):
            outputs = torch.tensor(r.token_ids[r.num_prompt_tokens :], dtype=torch.long)
            output_counts[i].index_add_(0, outputs, torch.ones_like(outputs, dtype=torch.int32))
            prompt_mask[i, torch.tensor(r.token_ids[: r.num_prompt_tokens], dtype=torch.long)] = True
        output_counts, prompt_mask = output_counts.to(device), prompt_mask.to(device)

    bias_ids = bias_values = None
    if any(p.logit_bias for p in params):
        bias_ids = _padded([list((p.logit_bias or {}).keys()) for p in params], -1, torch.long).to(device)
        bias_values = _padded([list((p.logit_bias or {}).values()) for p in params], 0.0, torch.float32).to(device)

    suppressed = []
    for r in rows:
        num_outputs = len(r.token_ids) - r.num_prompt_tokens
        blocked = sorted(r.eos_token_ids | set(r.params.stop_token_ids)) if num_outputs < r.params.min_tokens else []
        suppressed.append(blocked)
    suppressed_ids = _padded(suppressed, -1, torch.long).to(device) if any(suppressed) else None

    logprobs = [p.logprobs for p in params if p.logprobs is not None]
    return SamplingBatch(
        temperature=torch.tensor([p.temperature for p in params], dtype=torch.float32, device=device),
        top_k=torch.tensor([max(p.top_k, 0) for p in params], dtype=torch.int32, device=device),
        top_p=torch.tensor([p.top_p for p in params], dtype=torch.float32, device=device),
        min_p=torch.tensor([p.min_p for p in params], dtype=torch.float32, device=device),
        seed=torch.tensor([as_int64(r.seed) for r in rows], dtype=torch.long, device=device),
        position=torch.tensor([r.position for r in rows], dtype=torch.long, device=device),
        presence_penalty=torch.tensor([p.presence_penalty for p in params], dtype=torch.float32, device=device),
        frequency_penalty=torch.tensor([p.frequency_penalty for p in params], dtype=torch.float32, device=device),
        repetition_penalty=torch.tensor([p.repetition_penalty for p in params], dtype=torch.float32, device=device),
        output_counts=output_counts,
        prompt_mask=prompt_mask,
        logit_bias_ids=bias_ids,
        logit_bias_values=bias_values,
        suppressed_ids=suppressed_ids,
        allowed_bitmask=None,
        all_greedy=all(p.temperature == 0.0 for p in params),
        any_top_k=any(p.top_k > 0 for p in params),
        any_top_p=any(p.top_p < 1.0 for p in params),
        any_min_p=any(p.min_p > 0.0 for p in params),
        any_penalties=any_penalties,
        max_num_logprobs=max(logprobs, default=-1),
    )
