"""Per-request state that lives on the device for the request's whole life,
indexed by a slot the request holds from admission to release."""

from __future__ import annotations

import torch

from agentgate.engine.runner.sampling.batch import SamplingBatch, SamplingFlags
from agentgate.engine.runner.sampling.noise import as_int64
from agentgate.engine.sampling_params import MAX_LOGIT_BIAS, MAX_STOP_TOKEN_IDS
from agentgate.engine.scheduling.scheduler_output import NewRequestData

# Stop ids plus the model's EOS ids, suppressed together under min_tokens.
MAX_STOP_IDS = MAX_STOP_TOKEN_IDS + 16
# The columns of the packed per-slot sampling parameters: one gather reads a
# batch's rows of each table.
FLOAT_PARAMS = ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty")
INT_PARAMS = ("top_k", "min_tokens")


class SlotState:
    """Persistent, slot-indexed device tensors.

    token_ids [S, L]: prompt tokens, then each sampled token (written by the
    post-update on the device); num_tokens [S]: known tokens; num_computed
    [S]: tokens with KV; num_prompt [S]; block_table [S, M]; the sampling
    parameters, packed by type into float_params [S, len(FLOAT_PARAMS)] and
    int_params [S, len(INT_PARAMS)]; seed [S]; stop_ids [S, MAX_STOP_IDS]
    (EOS and stop ids, suppressed while min_tokens is unmet); logit bias rows;
    and, allocated the first time a request uses penalties, output_counts
    [S, V] and prompt_mask [S, V].

    The host never reads these: `admit` writes a new request's rows from its
    own data with non-blocking copies, `sampling_batch` gathers a step's rows
    on the device.
    """

    def __init__(
        self, max_slots: int, max_model_len: int, max_blocks: int, vocab_size: int, device: torch.device
    ) -> None:
        self.max_slots, self.vocab_size, self.device = max_slots, vocab_size, device
        self._pinned = device.type == "cuda"

        def zeros(*shape: int, dtype: torch.dtype = torch.int32) -> torch.Tensor:
            return torch.zeros(*shape, dtype=dtype, device=device)

        # One spare column: a request scheduled once more after its last token
        # (its output is dropped) may write one token past max_model_len.
        self.token_ids = zeros(max_slots, max_model_len + 1)
        self.num_tokens = zeros(max_slots)
        self.num_computed = zeros(max_slots)
        self.num_prompt = zeros(max_slots)
        self.block_table = zeros(max_slots, max_blocks)
        self.float_params = zeros(max_slots, len(FLOAT_PARAMS), dtype=torch.float32)
        self.int_params = zeros(max_slots, len(INT_PARAMS))
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

    # -- writes --------------------------------------------------------------
    def upload(self, values: list, dtype: torch.dtype) -> torch.Tensor:
        """A host snapshot copied without blocking (pinned on CUDA; the
        caching host allocator keeps it until the copy is done)."""
        host = torch.tensor(values, dtype=dtype)
        if self._pinned:
            host = host.pin_memory()
        return host.to(self.device, non_blocking=True)

    def admit(self, slots: list[int], requests: list[NewRequestData]) -> None:
        """Write the rows of newly admitted ``requests`` at ``slots``: token
        history, counters, sampling parameters, stop ids, logit bias, and
        the penalty rows of those that use penalties. One packed copy and
        one index_copy per table, whatever the number of requests."""
        if not requests:
            return
        floats, ints, counters, seeds, stops, bias_ids, bias_values = [], [], [], [], [], [], []
        for slot, new in zip(slots, requests):
            p = new.params
            floats.append([getattr(p, name) for name in FLOAT_PARAMS])
            ints.append([max(p.top_k, 0), p.min_tokens])
            counters.append([len(new.token_ids), new.num_computed_tokens, new.num_prompt_tokens])
            seeds.append(as_int64(new.seed))
            stop = sorted(set(new.eos_token_ids) | set(p.stop_token_ids))[:MAX_STOP_IDS]
            stops.append(stop + [-1] * (MAX_STOP_IDS - len(stop)))
            bias = p.logit_bias or {}
            bias_ids.append(list(bias.keys()) + [-1] * (MAX_LOGIT_BIAS - len(bias)))
            bias_values.append(list(bias.values()) + [0.0] * (MAX_LOGIT_BIAS - len(bias)))
            self.token_ids[slot, : len(new.token_ids)].copy_(self.upload(new.token_ids, torch.int32), non_blocking=True)
            if p.has_penalties:
                self._reset_penalty_rows(slot, new)
        index = self.upload(slots, torch.long)
        self.float_params.index_copy_(0, index, self.upload(floats, torch.float32))
        self.int_params.index_copy_(0, index, self.upload(ints, torch.int32))
        counts = self.upload(counters, torch.int32)
        for column, table in enumerate((self.num_tokens, self.num_computed, self.num_prompt)):
            table.index_copy_(0, index, counts[:, column])
        self.seed.index_copy_(0, index, self.upload(seeds, torch.long))
        self.stop_ids.index_copy_(0, index, self.upload(stops, torch.long))
        if any(new.params.logit_bias for new in requests):
            self.bias_ids.index_copy_(0, index, self.upload(bias_ids, torch.long))
            self.bias_values.index_copy_(0, index, self.upload(bias_values, torch.float32))
        else:
            self.bias_ids.index_fill_(0, index, -1)

    def _reset_penalty_rows(self, slot: int, new: NewRequestData) -> None:
        self.ensure_penalty_tables()
        self.output_counts[slot].zero_()
        self.prompt_mask[slot].zero_()
        tokens = self.upload(new.token_ids, torch.long)
        self.prompt_mask[slot].index_fill_(0, tokens[: new.num_prompt_tokens], True)
        outputs = tokens[new.num_prompt_tokens :]
        self.output_counts[slot].index_add_(0, outputs, torch.ones_like(outputs, dtype=torch.int32))

    # -- reads ---------------------------------------------------------------
    def sampling_batch(
        self,
        idx_mapping: torch.Tensor,
        sample_rows: torch.Tensor,
        flags: SamplingFlags,
        offsets: torch.Tensor | None = None,
        draft_counts: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> SamplingBatch:
        """The parameters of the sampling rows (batch rows ``sample_rows``,
        whose slots are ``idx_mapping[sample_rows]``), gathered on the
        device. Only what ``flags`` say some row uses is gathered: a greedy
        batch without penalties, bias or min_tokens gathers nothing.

        With drafts (`runner.step_drafts`) a batch row samples at several rows:
        ``offsets`` [N] puts sampling row i at position ``num_tokens + offsets[i]``,
        and ``draft_counts`` (rows, tokens) adds the drafts before each row to its
        output counts."""
        sampled, penalties = not flags.all_greedy, flags.any_penalties
        slots = None
        if sampled or penalties or flags.any_logit_bias or flags.any_min_tokens:
            slots = idx_mapping.long()[sample_rows.long()]
        floats = self.float_params[slots] if sampled or penalties else None
        ints = self.int_params[slots] if (sampled and flags.any_top_k) or flags.any_min_tokens else None
        num_tokens = self.num_tokens[slots] if sampled or flags.any_min_tokens else None
        if num_tokens is not None and offsets is not None:
            num_tokens = num_tokens + offsets
        output_counts = self.output_counts[slots] if penalties else None
        if output_counts is not None and draft_counts is not None:
            rows, tokens = draft_counts
            ones = torch.ones_like(rows, dtype=output_counts.dtype)
            output_counts.index_put_((rows.long(), tokens.long()), ones, accumulate=True)

        def column(name: str, wanted: bool) -> torch.Tensor | None:
            if not wanted:
                return None
            if name in FLOAT_PARAMS:
                return floats[:, FLOAT_PARAMS.index(name)]
            return ints[:, INT_PARAMS.index(name)]

        suppressed = None
        if flags.any_min_tokens:
            unmet = (num_tokens - self.num_prompt[slots]) < column("min_tokens", True)
            suppressed = torch.where(unmet[:, None], self.stop_ids[slots], -1)
        return SamplingBatch(
            flags=flags,
            temperature=column("temperature", sampled),
            top_k=column("top_k", sampled and flags.any_top_k),
            top_p=column("top_p", sampled and flags.any_top_p),
            min_p=column("min_p", sampled and flags.any_min_p),
            seed=self.seed[slots] if sampled else None,
            position=num_tokens.long() if sampled else None,
            presence_penalty=column("presence_penalty", penalties),
            frequency_penalty=column("frequency_penalty", penalties),
            repetition_penalty=column("repetition_penalty", penalties),
            output_counts=output_counts,
            prompt_mask=self.prompt_mask[slots] if penalties else None,
            logit_bias_ids=self.bias_ids[slots] if flags.any_logit_bias else None,
            logit_bias_values=self.bias_values[slots] if flags.any_logit_bias else None,
            suppressed_ids=suppressed,
            allowed_bitmask=None,
        )
