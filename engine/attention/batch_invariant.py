"""Attention for ``--deterministic``: each query token over exactly its context, so a token's
result depends on its own sequence alone (`batch_invariant_attention`), and the backend that
runs it (`BatchInvariantTorchBackend`)."""

from __future__ import annotations

import torch

from agentgate.engine.attention.base import AttentionMetadata
from agentgate.engine.attention.torch import TorchAttentionBackend
from agentgate.engine.attention.torch_prompt import gather_context


def batch_invariant_attention(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """Causal attention one query token at a time, over exactly its context:
    the same operations on tensors of the same shapes and strides whatever
    else the batch holds and whether the token is a prefill, a chunk, a
    cache hit or a decode (a context prefix ``[:n]`` of the gathered
    [tokens, kv_heads, head_dim] has the same strides at every length), so
    the result depends on the token's own sequence alone. For
    ``--deterministic``; a Python loop over tokens, slow for long prompts."""
    out = torch.zeros_like(query)
    starts = meta.query_start_loc_cpu.tolist()
    num_heads, head_dim = query.shape[1:]
    num_kv_heads = k_cache.shape[2]
    group = num_heads // num_kv_heads
    for i, seq_len in enumerate(meta.seq_lens_cpu.tolist()):
        begin, end = starts[i], starts[i + 1]
        if seq_len == 0 or end == begin:
            continue
        k = gather_context(k_cache, meta.block_tables[i], seq_len)
        v = gather_context(v_cache, meta.block_tables[i], seq_len)
        first_position = seq_len - (end - begin)
        for token in range(begin, end):
            n = first_position + token - begin + 1  # keys 0..its own position
            q = (query[token] * scale).view(num_kv_heads, group, head_dim).to(k.dtype)
            scores = torch.bmm(q, k[:n].permute(1, 2, 0)).float()  # [kv_heads, group, n]
            probs = torch.softmax(scores, dim=-1).to(v.dtype)
            mixed = torch.bmm(probs, v[:n].transpose(0, 1))  # [kv_heads, group, head_dim]
            out[token] = mixed.reshape(num_heads, head_dim).to(out.dtype)
    return out


def token_contexts(meta: AttentionMetadata) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Every query token of a step as a decode row of its own: its sequence's block table, the
    length of its context (keys 0..its own position) and the longest. Padded rows' tokens (a
    sequence of length 0) get length 0."""
    starts = meta.query_start_loc_cpu.tolist()
    rows, lens = [], []
    for i, seq_len in enumerate(meta.seq_lens_cpu.tolist()):
        begin, end = starts[i], starts[i + 1]
        first_position = seq_len - (end - begin)
        for token in range(begin, end):
            rows.append(i)
            lens.append(0 if seq_len == 0 else first_position + token - begin + 1)
    device = meta.block_tables.device
    tables = meta.block_tables[torch.tensor(rows, dtype=torch.long, device=device)]
    return tables, torch.tensor(lens, dtype=torch.int32, device=device), max(lens, default=0)


class BatchInvariantTorchBackend(TorchAttentionBackend):
    """`batch_invariant_attention` for ``--deterministic``; it reads every
    context whole, so the runner need not find shared prefixes. With the
    compiled CPU kernel (`use_native_kernels`) every query token, prompt rows
    included, goes through it as a decode row over exactly its context: the same
    contract (a token's result depends on its own sequence alone), without a
    Python loop over tokens."""

    name = "torch-batch-invariant"
    reads_shared_prefix = False

    def __init__(self) -> None:
        super().__init__()
        self._tokens: tuple[AttentionMetadata, tuple[torch.Tensor, torch.Tensor, int]] | None = None  # the step's

    def paged_attention(self, query, k_cache, v_cache, meta, scale) -> torch.Tensor:
        if self.native is None:
            return batch_invariant_attention(query, k_cache, v_cache, meta, scale)
        if self._tokens is None or self._tokens[0] is not meta:  # worked out once per step
            self._tokens = (meta, token_contexts(meta))
        tables, lens, longest = self._tokens[1]
        return self.native(query, k_cache, v_cache, tables, lens, longest, scale)
