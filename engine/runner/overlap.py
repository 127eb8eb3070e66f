"""The overlapped runner (the MRv2 discipline): the GPU never waits for the host.

* Per-request state lives in persistent slot-indexed device tensors
  (`SlotState`); the host keeps its own mirror and never reads the device's.
* Each step's few bytes (idx_mapping, query lengths, sampling rows, staged
  block-table writes) are snapshotted into rotating host buffers and copied
  with one non-blocking transfer (`StepStaging`).
* Input preparation runs on the device (`input_prep`): input
  ids come from the slot's token history, where the post-update kernel wrote
  the token sampled at the previous step, so step N+1 can be launched before
  step N's tokens reach the host.
* Sampled tokens go back on a separate copy stream into a preallocated
  pinned ring with a reused event per slot (`OutputRing`); `wait` blocks on
  that event only. `execute` itself never synchronizes.
* Pure-decode batches replay CUDA graphs at bucketed sizes (`DecodeGraphs`);
  mixed and prefill batches run eagerly.
* Two steps in flight on CUDA, one on the CPU (`EngineConfig.steps_in_flight`):
  a CPU forward pass runs on the calling thread, so a second step in flight
  overlaps nothing and only delays each token, admissions and the freeing
  of finished requests by a step.
* Speculative drafts are verified as in the sync runner, with the accepted
  counts resolved on the device (`step_drafts`); the host reconciles its
  mirror when it waits for the step. The scheduler drafts only for a request
  with no step in flight, so with two steps in flight (CUDA) a request drafts
  only when its pipeline has drained; drafted steps run eagerly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from agentgate.engine.attention import AttentionMetadata
from agentgate.engine.attention.base import count_shared_prefix_blocks
from agentgate.engine.runner.base import TorchModelRunner
from agentgate.engine.runner.input_prep import apply_block_table_writes, post_update, prepare_inputs
from agentgate.engine.runner.output_ring import HostOutput, OutputRing
from agentgate.engine.runner.sampling.batch import SamplingBatch, SamplingFlags
from agentgate.engine.runner.sampling.sampler import sample
from agentgate.engine.runner.slot_state import SlotState
from agentgate.engine.runner.staging import StepStaging
from agentgate.engine.runner.step_batch import StepBatch, StepInputs
from agentgate.engine.runner.step_drafts import DraftPlan, StepDrafts, post_update_drafts, write_drafts
from agentgate.engine.scheduling.scheduler_output import ModelRunnerOutput, NewRequestData, SchedulerOutput
from agentgate.engine.speculative.verify import emitted_tokens
from agentgate.engine.step_rows import decode_rows


@dataclass
class _Live:
    """The host's mirror of one admitted request."""

    slot: int
    new: NewRequestData
    num_computed: int
    block_ids: list[int]  # the slot's block-table row


@dataclass
class _Verify:
    """A request that verified drafts this step: its mirror, drafts and first sampling row."""

    live: _Live
    drafts: tuple[int, ...]
    first_row: int


@dataclass
class _StepHandle:
    request_ids: list[str]
    output: HostOutput
    verifies: list[_Verify] | None = None  # None: no row drafted (one sampling row per request)


@dataclass
class _Deferred:
    """A launched step whose sampling waits for a grammar bitmask."""

    logits: torch.Tensor
    batch: StepBatch
    lives: list[_Live]
    request_ids: list[str]
    drafts: StepDrafts | None
    verifies: list[_Verify] | None
    result: _StepHandle | None = None


class OverlapRunner(TorchModelRunner):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        default_depth = 2 if self.device.type == "cuda" else 1
        self.max_steps_in_flight = self.config.steps_in_flight or default_depth
        self.slots = SlotState(
            self.config.max_num_seqs,
            self.kv_spec.max_model_len,
            self.max_blocks_per_seq,
            self.vocab_size,
            self.device,
        )
        self.staging = StepStaging(self.device)
        self._live: dict[str, _Live] = {}
        # With drafts a request samples at up to 1 + num_speculative_tokens rows.
        max_sampling_rows = self.config.max_num_seqs * (1 + self.config.num_speculative_tokens)
        self.outputs = OutputRing(min(max_sampling_rows, self.config.max_num_batched_tokens), self.device)

    # -- bookkeeping ---------------------------------------------------------
    def release(self, request_ids: list[str]) -> None:
        for request_id in request_ids:
            live = self._live.pop(request_id, None)
            if live is not None:
                self.slots.release(live.slot)

    def _admit(self, new_requests: list[NewRequestData], writes: list[list[int]]) -> None:
        """Give each new request a slot, write its slot state, and queue its
        block-table row."""
        if not new_requests:
            return
        slots = []
        for new in new_requests:
            slot = self.slots.acquire()
            slots.append(slot)
            self._live[new.request_id] = _Live(slot, new, new.num_computed_tokens, list(new.block_ids))
            writes[0].extend([slot] * len(new.block_ids))
            writes[1].extend(range(len(new.block_ids)))
            writes[2].extend(new.block_ids)
        self.slots.admit(slots, new_requests)

    # -- one step ------------------------------------------------------------
    @torch.inference_mode()
    def execute(self, step: SchedulerOutput) -> _StepHandle | _Deferred:
        self.release(step.released_request_ids)
        writes: list[list[int]] = [[], [], []]
        self._admit(step.new_requests, writes)
        for request_id, block_ids in step.new_block_ids.items():
            live = self._live[request_id]
            writes[0].extend([live.slot] * len(block_ids))
            writes[1].extend(range(len(live.block_ids), len(live.block_ids) + len(block_ids)))
            writes[2].extend(block_ids)
            live.block_ids.extend(block_ids)

        idx, lens, sample_rows, seq_lens_host, sampled_ids = [], [], [], [], []
        lives, sampling_lives = [], []
        plan = DraftPlan() if any(sched.draft_token_ids for sched in step.scheduled) else None
        verifies: list[_Verify] | None = [] if plan is not None else None
        num_tokens = 0
        for row, sched in enumerate(step.scheduled):
            live = self._live[sched.request_id]
            lives.append(live)
            idx.append(live.slot)
            lens.append(sched.num_tokens)
            num_tokens += sched.num_tokens
            if plan is not None:
                plan.add_row(live.slot, live.num_computed, num_tokens, sched.draft_token_ids, sched.samples)
            live.num_computed += sched.num_tokens
            seq_lens_host.append(live.num_computed)
            if sched.samples:
                if verifies is not None:
                    verifies.append(_Verify(live, sched.draft_token_ids, len(sample_rows)))
                sample_rows.extend([row] * (1 + len(sched.draft_token_ids)))
                sampling_lives.extend([live] * (1 + len(sched.draft_token_ids)))
                sampled_ids.append(sched.request_id)
        num_rows = len(idx)
        staged = self.staging.stage([idx, lens, sample_rows, *writes, *(plan.arrays() if plan else [])])
        idx_d, lens_d, rows_d, w_rows, w_cols, w_vals = staged[:6]
        if writes[0]:
            apply_block_table_writes(self.slots.block_table, w_rows, w_cols, w_vals)
        drafts = None
        if plan is not None:
            drafts, token_writes = DraftPlan.staged(staged[6:])
            write_drafts(self.slots.token_ids, token_writes)
        batch = StepBatch(idx_d, lens_d, rows_d, num_tokens)

        pure_decode = num_tokens == num_rows
        with self.lora_rows([(live.new.lora, n) for live, n in zip(lives, lens)]) as adapted:
            # A step with adapter rows runs eagerly: the graphs hold the base model alone.
            bucket = self.graphs.bucket_for(num_rows) if (self.graphs and pure_decode and not adapted) else None
            if bucket is not None:
                hidden, logits_indices = self._graph_forward(batch, bucket)
            else:
                shared = (
                    count_shared_prefix_blocks([live.block_ids for live in lives]) if self.reads_shared_prefix else 0
                )
                with decode_rows(step.num_decode_tokens, step.num_decode_requests):
                    hidden, logits_indices = self._eager_forward(batch, lens, seq_lens_host, shared)

        if not sample_rows:  # every row is a prefill chunk that does not finish its prompt
            post_update(batch, torch.empty(0, dtype=torch.long, device=self.device), self.slots)
            return _StepHandle([], HostOutput(torch.empty(0, dtype=torch.long), None, None, None, None))
        if drafts is not None:
            logits_indices = drafts.logits_indices.long()
        with decode_rows(len(sample_rows), len(sampled_ids)):  # every sampled row as a decode row, by request
            logits = self.model.compute_logits(hidden[logits_indices])
        if step.needs_bitmask:
            return _Deferred(logits, batch, sampling_lives, sampled_ids, drafts, verifies)
        return self._sample(logits, batch, sampling_lives, sampled_ids, None, drafts, verifies)

    @torch.inference_mode()
    def complete(
        self,
        handle: _Deferred,
        bitmask: torch.Tensor,
        redirect: tuple[torch.Tensor, torch.Tensor] | None = None,
        unnarrowed: torch.Tensor | None = None,
    ) -> None:
        """Sample a deferred step; the bitmasks (pinned on CUDA) are copied
        without blocking."""
        mask = bitmask.to(self.device, non_blocking=True)
        redirect_d = None if redirect is None else tuple(t.to(self.device) for t in redirect)
        handle.result = self._sample(
            handle.logits,
            handle.batch,
            handle.lives,
            handle.request_ids,
            mask,
            handle.drafts,
            handle.verifies,
            redirect_d,
            None if unnarrowed is None else unnarrowed.to(self.device, non_blocking=True),
        )

    def _sample(
        self,
        logits: torch.Tensor,
        step: StepBatch,
        lives: list[_Live],
        request_ids: list[str],
        bitmask: torch.Tensor | None,
        drafts: StepDrafts | None,
        verifies: list[_Verify] | None,
        redirect: tuple[torch.Tensor, torch.Tensor] | None = None,
        unnarrowed: torch.Tensor | None = None,
    ) -> _StepHandle:
        batch = self._sampling_batch(step, lives, drafts)
        batch.allowed_bitmask = bitmask
        batch.unnarrowed_bitmask = unnarrowed
        if redirect is not None:
            batch.redirect_from, batch.redirect_to = redirect
        result = sample(logits, batch)
        if drafts is None:
            post_update(step, result.token_ids, self.slots)
        else:
            post_update_drafts(step, drafts, result.token_ids, self.slots)
        return _StepHandle(request_ids, self.outputs.copy_out(result), verifies)

    def _graph_forward(self, step: StepBatch, bucket: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A pure-decode step through the bucket's CUDA graph: inputs
        prepared into the graphs' static buffers, then one replay."""
        graphs, num_rows = self.graphs, step.num_rows
        graphs.pad(num_rows)
        prepare_inputs(step, self.slots, self.kv_spec.block_size, graphs.inputs)
        torch.index_select(self.slots.block_table, 0, step.idx_mapping.long(), out=graphs.block_tables[:num_rows])
        return graphs.replay(num_rows, bucket), graphs.inputs.logits_indices[: step.num_sampling]

    def _eager_forward(
        self, step: StepBatch, lens: list[int], seq_lens_host: list[int], shared_prefix_blocks: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        inputs = StepInputs.empty(step.num_tokens, step.num_rows, step.num_sampling, self.device)
        s = self.slots
        prepare_inputs(step, s, self.kv_spec.block_size, inputs)
        max_blocks = -(-max(seq_lens_host) // self.kv_spec.block_size)
        meta = AttentionMetadata(
            slot_mapping=inputs.slot_mapping,
            query_start_loc=inputs.query_start_loc,
            seq_lens=inputs.seq_lens,
            block_tables=s.block_table.index_select(0, step.idx_mapping.long())[:, :max_blocks],
            max_query_len=max(lens),
            max_seq_len=max(seq_lens_host),
            query_start_loc_cpu=torch.from_numpy(np.cumsum([0, *lens], dtype=np.int32)),
            seq_lens_cpu=torch.tensor(seq_lens_host, dtype=torch.int32),
            shared_prefix_blocks=shared_prefix_blocks,
        )
        return self.model(inputs.input_ids, inputs.positions, meta, self.kv_caches), inputs.logits_indices

    def _sampling_batch(self, step: StepBatch, lives: list[_Live], drafts: StepDrafts | None) -> SamplingBatch:
        """Gather the sampling rows' parameters from slot state, on the
        device; a greedy batch without other features gathers nothing."""
        flags = SamplingFlags.of([live.new.params for live in lives])
        if drafts is None:
            return self.slots.sampling_batch(step.idx_mapping, step.sample_rows, flags)
        return self.slots.sampling_batch(
            step.idx_mapping, step.sample_rows, flags, drafts.offsets, (drafts.count_rows, drafts.count_tokens)
        )

    def wait(self, handle: _StepHandle | _Deferred) -> ModelRunnerOutput:
        """The one synchronization: the output event of this step."""
        if isinstance(handle, _Deferred):
            assert handle.result is not None, "a constrained step was waited for before complete()"
            handle = handle.result
        out = handle.output
        if out.event is not None:
            out.event.synchronize()
        tokens = out.tokens.tolist()
        if handle.verifies is None:
            output = ModelRunnerOutput(handle.request_ids, tokens)
            rows = slice(None)
        else:
            output = self._verified(handle.request_ids, handle.verifies, tokens)
            rows = [verify.first_row for verify in handle.verifies]
        if out.logprobs is not None:  # rows that want logprobs never draft: their first row is their only one
            output.logprobs = out.logprobs[rows].tolist()
            if out.top_ids is not None:
                output.top_token_ids = out.top_ids[rows].tolist()
                output.top_logprobs = out.top_logprobs[rows].tolist()
        if out.overridden is not None:
            output.overridden_rows = set(out.overridden.nonzero().flatten().tolist())
        return output

    def _verified(self, request_ids: list[str], verifies: list[_Verify], tokens: list[int]) -> ModelRunnerOutput:
        """The tokens each request emits (as `post_update_drafts` decided on the device), and the
        host mirror of each that drafted taken back to its accepted tokens and their blocks."""
        block_size = self.kv_spec.block_size
        firsts, extras = [], []
        for verify in verifies:
            k = len(verify.drafts)
            emitted = emitted_tokens(verify.drafts, tokens[verify.first_row : verify.first_row + k + 1])
            firsts.append(emitted[0])
            extras.append(emitted[1:])
            if k:
                live = verify.live
                live.num_computed -= k + 1 - len(emitted)
                del live.block_ids[-(-live.num_computed // block_size) :]
        return ModelRunnerOutput(request_ids, firsts, extras)
