"""The classic runner: build the batch on the host, copy it, run the forward
pass, sample, copy the tokens back, synchronize. It is the correctness
reference and the baseline of the runner benchmark, so it gets what the
overlapped runner gets except the overlap: one pinned copy of the step's
arrays, and CUDA graphs for pure-decode batches (the same `DecodeGraphs`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from agentgate.engine.attention import AttentionMetadata
from agentgate.engine.attention.base import count_shared_prefix_blocks
from agentgate.engine.runner.base import TorchModelRunner
from agentgate.engine.runner.sampling.host import SamplingRow, build_sampling_batch
from agentgate.engine.runner.sampling.sampler import sample
from agentgate.engine.runner.staging import StepStaging
from agentgate.engine.scheduling.scheduler_output import ModelRunnerOutput, NewRequestData, SchedulerOutput
from agentgate.engine.speculative.verify import emitted_tokens
from agentgate.engine.step_rows import decode_rows


@dataclass
class _Verify:
    """A row that samples: its request, its drafts (maybe none) and its
    first sampling row; it samples at ``1 + len(drafts)`` rows."""

    request_id: str
    drafts: tuple[int, ...]
    first_row: int


@dataclass
class _Deferred:
    """A step whose sampling waits for a grammar bitmask."""

    logits: torch.Tensor
    rows: list[SamplingRow]
    groups: list[_Verify]
    output: ModelRunnerOutput | None = None


@dataclass
class _RequestState:
    new: NewRequestData
    token_ids: list[int]
    block_ids: list[int]
    num_computed: int


class SyncRunner(TorchModelRunner):
    max_steps_in_flight = 1

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._states: dict[str, _RequestState] = {}
        self.staging = StepStaging(self.device)

    def release(self, request_ids: list[str]) -> None:
        for request_id in request_ids:
            self._states.pop(request_id, None)

    def _apply_bookkeeping(self, step: SchedulerOutput) -> None:
        self.release(step.released_request_ids)
        for new in step.new_requests:
            self._states[new.request_id] = _RequestState(
                new, list(new.token_ids), list(new.block_ids), new.num_computed_tokens
            )
        for request_id, block_ids in step.new_block_ids.items():
            self._states[request_id].block_ids.extend(block_ids)

    @torch.inference_mode()
    def execute(self, step: SchedulerOutput) -> ModelRunnerOutput | _Deferred:
        self._apply_bookkeeping(step)
        block_size = self.kv_spec.block_size
        input_ids: list[int] = []
        positions: list[np.ndarray] = []
        slots: list[np.ndarray] = []
        seq_lens: list[int] = []
        query_start = [0]
        logits_rows: list[int] = []
        sampling_rows: list[SamplingRow] = []
        groups: list[_Verify] = []
        tables = [self._states[row.request_id].block_ids for row in step.scheduled]
        for row in step.scheduled:
            state = self._states[row.request_id]
            start, end = state.num_computed, state.num_computed + row.num_tokens
            input_ids.extend(state.token_ids[start:end])
            input_ids.extend(row.draft_token_ids)
            pos = np.arange(start, end, dtype=np.int64)
            table = np.asarray(state.block_ids, dtype=np.int64)
            positions.append(pos)
            slots.append(table[pos // block_size] * block_size + pos % block_size)
            seq_lens.append(end)
            query_start.append(query_start[-1] + row.num_tokens)
            state.num_computed = end
            if row.samples:
                drafts = row.draft_token_ids
                groups.append(_Verify(row.request_id, drafts, len(sampling_rows)))
                logits_rows.extend(range(query_start[-1] - 1 - len(drafts), query_start[-1]))
                new = state.new
                for i in range(len(drafts) + 1):  # position i sees the known tokens and drafts[:i]
                    history = state.token_ids if i == 0 else state.token_ids + list(drafts[:i])
                    sampling_rows.append(
                        SamplingRow(new.params, new.seed, new.eos_token_ids, history, new.num_prompt_tokens)
                    )
        num_rows = len(tables)
        width = max(len(t) for t in tables)
        block_tables = np.zeros((num_rows, width), dtype=np.int32)
        for i, table in enumerate(tables):
            block_tables[i, : len(table)] = table
        # The step's arrays cross in one copy from a pinned ring, as the
        # overlapped runner's do: the two runners differ in when they wait.
        staged = self.staging.stage(
            [
                input_ids,
                np.concatenate(positions),
                np.concatenate(slots),
                seq_lens,
                query_start,
                block_tables.reshape(-1),
                logits_rows,
            ]
        )
        rows_d = staged[6]
        loras = [(self._states[row.request_id].new.lora, row.num_tokens) for row in step.scheduled]
        with self.lora_rows(loras) as adapted:
            hidden = self._forward(step, tables, seq_lens, query_start, staged, adapted)
        if not sampling_rows:
            return ModelRunnerOutput([], [])
        with decode_rows(len(sampling_rows), len(groups)):  # every sampled row as a decode row, by request
            logits = self.model.compute_logits(hidden[rows_d.long()])
        if step.needs_bitmask:
            return _Deferred(logits, sampling_rows, groups)
        return self._sample(logits, sampling_rows, groups, None)

    def _forward(
        self,
        step: SchedulerOutput,
        tables: list[list[int]],
        seq_lens: list[int],
        query_start: list[int],
        staged: list[torch.Tensor],
        adapted: bool,
    ) -> torch.Tensor:
        """The step's forward pass: a CUDA graph for a pure-decode batch without adapters, else eager."""
        ids_d, pos_d, slots_d, lens_d, qsl_d, tables_d, _ = staged
        num_rows, num_tokens, width = len(tables), query_start[-1], max(len(t) for t in tables)
        # A step with adapter rows runs eagerly: the graphs hold the base model alone.
        bucket = self.graphs.bucket_for(num_rows) if self.graphs and num_tokens == num_rows and not adapted else None
        if bucket is not None:
            graphs = self.graphs
            graphs.pad(num_rows)
            static = graphs.inputs
            for dst, src in (
                (static.input_ids, ids_d),
                (static.positions, pos_d),
                (static.slot_mapping, slots_d),
                (static.seq_lens, lens_d),
            ):
                dst[:num_rows].copy_(src)
            static.query_start_loc[: num_rows + 1].copy_(qsl_d)
            graphs.block_tables[:num_rows, :width].copy_(tables_d.view(num_rows, width))
            hidden = graphs.replay(num_rows, bucket)
        else:
            meta = AttentionMetadata(
                slot_mapping=slots_d.long(),
                query_start_loc=qsl_d,
                seq_lens=lens_d,
                block_tables=tables_d.view(num_rows, width),
                max_query_len=max(r.num_tokens for r in step.scheduled),
                max_seq_len=max(seq_lens),
                query_start_loc_cpu=torch.tensor(query_start, dtype=torch.int32),
                seq_lens_cpu=torch.tensor(seq_lens, dtype=torch.int32),
                shared_prefix_blocks=count_shared_prefix_blocks(tables) if self.reads_shared_prefix else 0,
            )
            with decode_rows(step.num_decode_tokens, step.num_decode_requests):
                hidden = self.model(ids_d.long(), pos_d.long(), meta, self.kv_caches)
        return hidden

    @torch.inference_mode()
    def complete(
        self,
        handle: _Deferred,
        bitmask: torch.Tensor,
        redirect: tuple[torch.Tensor, torch.Tensor] | None = None,
        unnarrowed: torch.Tensor | None = None,
    ) -> None:
        handle.output = self._sample(handle.logits, handle.rows, handle.groups, bitmask, redirect, unnarrowed)

    def _sample(
        self,
        logits: torch.Tensor,
        rows: list[SamplingRow],
        groups: list[_Verify],
        bitmask: torch.Tensor | None,
        redirect: tuple[torch.Tensor, torch.Tensor] | None = None,
        unnarrowed: torch.Tensor | None = None,
    ) -> ModelRunnerOutput:
        """Sample every row, then verify each request's drafts (see
        `engine.speculative.verify`): its state takes the emitted tokens,
        and the KV of its rejected positions is rolled back."""
        batch = build_sampling_batch(rows, self.vocab_size, self.device)
        if bitmask is not None:
            batch.allowed_bitmask = bitmask.to(self.device)
        if redirect is not None:
            batch.redirect_from, batch.redirect_to = (t.to(self.device) for t in redirect)
        if unnarrowed is not None:
            batch.unnarrowed_bitmask = unnarrowed.to(self.device)
        result = sample(logits, batch)
        tokens = result.token_ids.tolist()
        firsts, extras = [], []
        for group in groups:
            emitted = emitted_tokens(group.drafts, tokens[group.first_row : group.first_row + len(group.drafts) + 1])
            state = self._states[group.request_id]
            state.token_ids.extend(emitted)
            if group.drafts:
                state.num_computed -= len(group.drafts) + 1 - len(emitted)
                del state.block_ids[-(-state.num_computed // self.kv_spec.block_size) :]
            firsts.append(emitted[0])
            extras.append(emitted[1:])
        request_ids = [group.request_id for group in groups]
        output = ModelRunnerOutput(request_ids, firsts, extras if any(g.drafts for g in groups) else None)
        if result.overridden is not None:
            output.overridden_rows = set(result.overridden.nonzero().flatten().tolist())
        if result.logprobs is not None:  # rows that want logprobs never draft: one row each
            first_rows = [group.first_row for group in groups]
            output.logprobs = result.logprobs[first_rows].tolist()
            if result.top_token_ids is not None:
                output.top_token_ids = result.top_token_ids[first_rows].tolist()
                output.top_logprobs = result.top_logprobs[first_rows].tolist()
        return output

    def wait(self, handle: ModelRunnerOutput | _Deferred) -> ModelRunnerOutput:
        if isinstance(handle, _Deferred):
            assert handle.output is not None, "a constrained step was waited for before complete()"
            return handle.output
        return handle
