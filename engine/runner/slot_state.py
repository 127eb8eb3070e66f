"""Per-request state that lives on the device for the request's whole life,
indexed by a slot the request holds from admission to release."""

from __future__ import annotations

import torch

from agentgate.engine.sampling_params import MAX_LOGIT_BIAS, MAX_STOP_TOKEN_IDS

# Stop ids plus the model's EOS ids, suppressed together under min_tokens.
MAX_STOP_IDS = MAX_STOP_TOKEN_IDS + 16


class SlotState:
    """Persistent, slot-indexed device tensors.

    token_ids [S, L]: prompt tokens, then each sampled token (written by the
    post-update on the device); num_tokens [S]: known tokens; num_computed
    [S]: tokens with KV; num_prompt [S]; block_table [S, M]; the sampling
    parameters; stop_ids [S, MAX_STOP_IDS] (EOS and stop ids, suppressed
    while min_tokens is unmet); logit bias rows; and, allocated the first
    time a request uses penalties, output_counts [S, V] and prompt_mask [S, V].
    """

    def __init__(
        self, max_slots: int, max_model_len: int, max_blocks: int, vocab_size: int, device: torch.device
    ) -> None:
        self.max_slots, self.vocab_size, self.device = max_slots, vocab_size, device

        def zeros(*shape: int, dtype: torch.dtype = torch.int32) -> torch.Tensor:
            return torch.zeros(*shape, dtype=dtype, device=device)

        # One spare column: a request scheduled once more after its last token
        # (its output is dropped) may write one token past max_model_len.
        self.token_ids = zeros(max_slots, max_model_len + 1)
        self.num_tokens = zeros(max_slots)
        self.num_computed = zeros(max_slots)
        self.num_prompt = zeros(max_slots)
        self.block_table = zeros(max_slots, max_blocks)
        self.temperature = zeros(max_slots, dtype=torch.float32)
        self.top_p = zeros(max_slots, dtype=torch.float32)
        self.min_p = zeros(max_slots, dtype=torch.float32)
        self.presence_penalty = zeros(max_slots, dtype=torch.float32)
        self.frequency_penalty = zeros(max_slots, dtype=torch.float32)
        self.repetition_penalty = zeros(max_slots, dtype=torch.float32)
        self.top_k = zeros(max_slots)
        self.min_tokens = zeros(max_slots)
        self.seed = zeros(max_slots, dtype=torch.long)
        self.stop_ids = torch.full((max_slots, MAX_STOP_IDS), -1, dtype=torch.long, device=device)
        self.bias_ids = torch.full((max_slots, MAX_LOGIT_BIAS), -1, dtype=torch.long, device=device)
        self.bias_values = zeros(max_slots, MAX_LOGIT_BIAS, dtype=torch.float32)
        self.output_counts: torch.Tensor | None = None
        self.prompt_mask: torch.Tensor | None = None
        self._free = list(range(max_slots - 1, -1, -1))

    @property
    def num_free(self) -> int:
        return len(self._free)

    def acquire(self) -> int:
        return self._free.pop()

    def release(self, slot: int) -> None:
        self._free.append(slot)

    def ensure_penalty_tables(self) -> None:
        """Allocate the [S, V] penalty tables on first use (rows are reset
        when a request that needs them is admitted)."""
        if self.output_counts is None:
            self.output_counts = torch.zeros(self.max_slots, self.vocab_size, dtype=torch.int32, device=self.device)
            self.prompt_mask = torch.zeros(self.max_slots, self.vocab_size, dtype=torch.bool, device=self.device)
