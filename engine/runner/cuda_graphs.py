"""CUDA graphs of the model's forward pass for pure-decode batches.

One graph per bucket size (a batch is padded up to the next bucket), all
sharing one memory pool and one static `StepInputs` plus a static block
table. Padded rows have slot -1 (no KV write) and sequence length 0 (no
attention). Runners fill the static inputs outside the graph (the overlapped
runner on the device, the sync runner by copying host arrays), then replay;
logits and sampling run eagerly after the replay.
"""

from __future__ import annotations

import torch
from torch import nn

from agentgate.engine.attention import AttentionMetadata
from agentgate.engine.runner.step_batch import StepInputs

BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256, 320, 384, 448, 512)


class DecodeGraphs:
    """Captured decode graphs over static inputs: `inputs` and
    `block_tables` (rows ``[:num_rows]`` are the caller's to fill before
    `replay`)."""

    def __init__(
        self,
        model: nn.Module,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        max_batch: int,
        max_blocks_per_seq: int,
        max_model_len: int,
        device: torch.device,
    ) -> None:
        self.model, self.kv_caches, self.device = model, kv_caches, device
        self.max_model_len = max_model_len
        self.buckets = [b for b in BUCKETS if b < max_batch] + [max_batch]
        self.inputs = StepInputs.padded(max_batch, device)
        self.block_tables = torch.zeros(max_batch, max_blocks_per_seq, dtype=torch.int32, device=device)
        self._graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self._rows_filled = 0  # rows [:this] may hold a real row's values
        self._padded_from = max_batch  # query_start_loc[this + 1:] all equal this

    def _meta(self, size: int) -> AttentionMetadata:
        empty = torch.empty(0, dtype=torch.int32)
        return AttentionMetadata(
            slot_mapping=self.inputs.slot_mapping[:size],
            query_start_loc=self.inputs.query_start_loc[: size + 1],
            seq_lens=self.inputs.seq_lens[:size],
            block_tables=self.block_tables[:size],
            max_query_len=1,
            max_seq_len=self.max_model_len,
            query_start_loc_cpu=empty,
            seq_lens_cpu=empty,
            padded=True,
        )

    @torch.inference_mode()
    def capture(self) -> None:
        """Capture every bucket, largest first, into one shared pool."""
        pool = None
        for size in sorted(self.buckets, reverse=True):
            args = (self.inputs.input_ids[:size], self.inputs.positions[:size], self._meta(size), self.kv_caches)
            for _ in range(2):  # compile kernels and settle allocations outside the graph
                self.model(*args)
            torch.cuda.synchronize(self.device)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                hidden = self.model(*args)
            pool = graph.pool() if pool is None else pool
            self._graphs[size] = (graph, hidden)
        torch.cuda.synchronize(self.device)

    def bucket_for(self, num_rows: int) -> int | None:
        for size in self.buckets:
            if size >= num_rows:
                return size
        return None

    def pad(self, num_rows: int) -> None:
        """Make every row from ``num_rows`` on padding. Only rows a larger
        batch filled since are reset, so a steady batch launches nothing."""
        inputs = self.inputs
        if self._rows_filled > num_rows:
            rows = slice(num_rows, self._rows_filled)
            inputs.input_ids[rows].zero_()
            inputs.positions[rows].zero_()
            inputs.slot_mapping[rows].fill_(-1)
            inputs.seq_lens[rows].zero_()
        if self._padded_from != num_rows:
            inputs.query_start_loc[num_rows + 1 :].fill_(num_rows)
            self._padded_from = num_rows
        self._rows_filled = num_rows

    def replay(self, num_rows: int, bucket: int) -> torch.Tensor:
        """Replay the bucket's graph over the static inputs (rows
        ``[:num_rows]`` filled by the caller after `pad`); returns the hidden
        states of the real rows."""
        graph, hidden = self._graphs[bucket]
        graph.replay()
        return hidden[:num_rows]
