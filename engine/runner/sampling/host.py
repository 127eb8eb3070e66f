"""Builds a SamplingBatch on the host from per-row Python state (the sync
runner's way; the overlapped runner gathers the same fields on the device)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agentgate.engine.runner.sampling.batch import SamplingBatch, SamplingFlags
from agentgate.engine.runner.sampling.noise import as_int64
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
    """The batch of ``rows``, built on the host and copied over; tensors the
    flags rule out (see `SamplingBatch`) are not built."""
    params = [r.params for r in rows]
    flags = SamplingFlags.of(params)
    output_counts = prompt_mask = None
    if flags.any_penalties:
        output_counts = torch.zeros(len(rows), vocab_size, dtype=torch.int32)
        prompt_mask = torch.zeros(len(rows), vocab_size, dtype=torch.bool)
        for i, r in enumerate(rows):
            outputs = torch.tensor(r.token_ids[r.num_prompt_tokens :], dtype=torch.long)
            output_counts[i].index_add_(0, outputs, torch.ones_like(outputs, dtype=torch.int32))
            prompt_mask[i, torch.tensor(r.token_ids[: r.num_prompt_tokens], dtype=torch.long)] = True
        output_counts, prompt_mask = output_counts.to(device), prompt_mask.to(device)

    bias_ids = bias_values = None
    if flags.any_logit_bias:
        bias_ids = _padded([list((p.logit_bias or {}).keys()) for p in params], -1, torch.long).to(device)
        bias_values = _padded([list((p.logit_bias or {}).values()) for p in params], 0.0, torch.float32).to(device)

    suppressed = []
    for r in rows:
        num_outputs = len(r.token_ids) - r.num_prompt_tokens
        blocked = sorted(r.eos_token_ids | set(r.params.stop_token_ids)) if num_outputs < r.params.min_tokens else []
        suppressed.append(blocked)
    suppressed_ids = _padded(suppressed, -1, torch.long).to(device) if any(suppressed) else None

    sampled = not flags.all_greedy

    def column(values: list, dtype: torch.dtype, wanted: bool) -> torch.Tensor | None:
        return torch.tensor(values, dtype=dtype, device=device) if wanted else None

    return SamplingBatch(
        flags=flags,
        temperature=column([p.temperature for p in params], torch.float32, sampled),
        top_k=column([max(p.top_k, 0) for p in params], torch.int32, sampled and flags.any_top_k),
        top_p=column([p.top_p for p in params], torch.float32, sampled and flags.any_top_p),
        min_p=column([p.min_p for p in params], torch.float32, sampled and flags.any_min_p),
        seed=column([as_int64(r.seed) for r in rows], torch.long, sampled),
        position=column([r.position for r in rows], torch.long, sampled),
        presence_penalty=column([p.presence_penalty for p in params], torch.float32, flags.any_penalties),
        frequency_penalty=column([p.frequency_penalty for p in params], torch.float32, flags.any_penalties),
        repetition_penalty=column([p.repetition_penalty for p in params], torch.float32, flags.any_penalties),
        output_counts=output_counts,
        prompt_mask=prompt_mask,
        logit_bias_ids=bias_ids,
        logit_bias_values=bias_values,
        suppressed_ids=suppressed_ids,
        allowed_bitmask=None,
    )
