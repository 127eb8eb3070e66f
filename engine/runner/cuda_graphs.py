"""CUDA graphs of the model's forward pass for pure-decode batches.

One graph per bucket size (a batch is padded up to the next bucket), all
sharing one memory pool and one set of static input buffers. Padded rows
have slot -1 (no KV write) and sequence length 0 (no attention). Input
preparation writes straight into the static buffers, outside the graph;
logits and sampling run eagerly after the replay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from agentgate.engine.attention import AttentionMetadata
from agentgate.engine.kernels import input_prep

if TYPE_CHECKING:
    from agentgate.engine.runner.overlap import OverlapRunner

BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256, 320, 384, 448, 512)


class DecodeGraphs:
    def __init__(self, runner: OverlapRunner, max_batch: int) -> None:
        self.runner = runner
        self.buckets = [b for b in BUCKETS if b < max_batch] + [max_batch]
        dev = runner.device
        self.input_ids = torch.zeros(max_batch, dtype=torch.long, device=dev)
        self.positions = torch.zeros(max_batch, dtype=torch.long, device=dev)
        self.slot_mapping = torch.full((max_batch,), -1, dtype=torch.long, device=dev)
        self.seq_lens = torch.zeros(max_batch, dtype=torch.int32, device=dev)
        self.query_start_loc = torch.arange(max_batch + 1, dtype=torch.int32, device=dev)
        self.block_tables = torch.zeros(max_batch, runner.max_blocks_per_seq, dtype=torch.int32, device=dev)
        self.logits_indices = torch.zeros(max_batch, dtype=torch.long, device=dev)
        self._graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}

    def _meta(self, size: int) -> AttentionMetadata:
        empty = torch.empty(0, dtype=torch.int32)
        return AttentionMetadata(
            slot_mapping=self.slot_mapping[:size],
            query_start_loc=self.query_start_loc[: size + 1],
            seq_lens=self.seq_lens[:size],
            block_tables=self.block_tables[:size],
            max_query_len=1,
            max_seq_len=self.runner.kv_spec.max_model_len,
            query_start_loc_cpu=empty,
            seq_lens_cpu=empty,
        )

    @torch.inference_mode()
    def capture(self) -> None:
        """Capture every bucket, largest first, into one shared pool."""
        runner = self.runner
        pool = None
        for size in sorted(self.buckets, reverse=True):
            meta = self._meta(size)
            args = (self.input_ids[:size], self.positions[:size], meta, runner.kv_caches)
            for _ in range(2):  # compile kernels and settle allocations outside the graph
                runner.model(*args)
            torch.cuda.synchronize(runner.device)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                hidden = runner.model(*args)
            pool = graph.pool() if pool is None else pool
            self._graphs[size] = (graph, hidden)
        torch.cuda.synchronize(runner.device)

    def bucket_for(self, num_rows: int) -> int | None:
        for size in self.buckets:
            if size >= num_rows:
                return size
        return None

    def run(
        self,
        idx_mapping: torch.Tensor,
        query_lens: torch.Tensor,
        sample_rows: torch.Tensor,
        num_rows: int,
        bucket: int,
        num_sampling: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Prepare the static inputs of a ``num_rows`` decode batch, replay the
        bucket's graph, and return (hidden states, logits indices)."""
        s = self.runner.slots
        self.input_ids[num_rows:bucket].zero_()
        self.positions[num_rows:bucket].zero_()
        self.slot_mapping[num_rows:bucket].fill_(-1)
        self.seq_lens[num_rows:bucket].zero_()
        input_prep.prepare_inputs(
            idx_mapping, query_lens, sample_rows, s.token_ids, s.num_computed, s.block_table,
            self.runner.kv_spec.block_size, num_rows, self.input_ids, self.positions, self.slot_mapping,
            self.query_start_loc, self.seq_lens, self.logits_indices,
        )
        self.query_start_loc[num_rows + 1 : bucket + 1].fill_(num_rows)
        torch.index_select(s.block_table, 0, idx_mapping.long(), out=self.block_tables[:num_rows])
        graph, hidden = self._graphs[bucket]
        graph.replay()
        return hidden[:num_rows], self.logits_indices[:num_sampling]
