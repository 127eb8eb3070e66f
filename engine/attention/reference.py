"""Plain-torch paged attention: the CPU path and the reference for the kernels."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.attention.metadata import AttentionMetadata


def write_kv(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Scatter a step's keys/values into their cache slots (slot -1 = skip)."""
    num_kv_heads, head_dim = k_cache.shape[2], k_cache.shape[3]
    valid = slot_mapping >= 0
    slots = slot_mapping[valid]
    k_cache.view(-1, num_kv_heads, head_dim)[slots] = key[valid].to(k_cache.dtype)
    v_cache.view(-1, num_kv_heads, head_dim)[slots] = value[valid].to(v_cache.dtype)


def _gather_context(
    cache: torch.Tensor, block_table: torch.Tensor, length: int
) -> torch.Tensor:
    """The first ``length`` cached positions of the sequences of ``block_table``
    ([..., num_blocks]) as [..., length, num_kv_heads, head_dim]."""
    block_size = cache.shape[1]
    num_blocks = -(-length // block_size)
    blocks = cache[block_table[..., :num_blocks].long()]
    lead = blocks.shape[:-4]
    return blocks.reshape(*lead, num_blocks * block_size, *cache.shape[2:])[..., :length, :, :]


def paged_attention(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """Causal attention of ``query`` over the paged cache (see AttentionBackend).

    Rows with one query token (decodes) go through one batched call; longer
    rows (prefill, chunks, extends) through SDPA one sequence at a time."""
    if meta.is_pure_decode:
        return _decode_attention(query, k_cache, v_cache, meta.block_tables, meta.seq_lens, meta.max_seq_len, scale)
    out = torch.zeros_like(query)
    starts = meta.query_start_loc_cpu.tolist()
    lens = meta.seq_lens_cpu.tolist()
    decode_rows = [i for i, n in enumerate(lens) if n > 0 and starts[i + 1] - starts[i] == 1]
    if decode_rows:
        rows = torch.tensor(decode_rows, device=query.device)
        tokens = torch.tensor([starts[i] for i in decode_rows], device=query.device)
        out[tokens] = _decode_attention(
            query[tokens], k_cache, v_cache, meta.block_tables[rows], meta.seq_lens[rows],
            max(lens[i] for i in decode_rows), scale,
        )
    group = query.shape[1] // k_cache.shape[2]
    for i, seq_len in enumerate(lens):
        begin, end = starts[i], starts[i + 1]
        if seq_len == 0 or end - begin <= 1:
            continue
        q_len = end - begin
        # [1, heads, len, dim], KV heads repeated for the query groups: CPU
        # SDPA's fused kernel wants 4-D inputs without GQA (about 2x faster).
        q = query[begin:end].transpose(0, 1)[None]
        k = _gather_context(k_cache, meta.block_tables[i], seq_len).transpose(0, 1).repeat_interleave(group, 0)[None]
        v = _gather_context(v_cache, meta.block_tables[i], seq_len).transpose(0, 1).repeat_interleave(group, 0)[None]
        q = q.to(k.dtype)
        if q_len == seq_len:  # no cached prefix: plain causal attention
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        else:
            # Query j sits at position seq_len - q_len + j and sees keys 0..that.
            # An additive float mask: CPU SDPA is much slower with a boolean one.
            q_pos = torch.arange(seq_len - q_len, seq_len, device=query.device)
            k_pos = torch.arange(seq_len, device=query.device)
            mask = torch.zeros(q_len, seq_len, dtype=k.dtype, device=query.device)
            mask.masked_fill_(k_pos[None, :] > q_pos[:, None], float("-inf"))
            attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
        out[begin:end] = attn[0].transpose(0, 1).to(out.dtype)
    return out


def _decode_attention(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    scale: float,
) -> torch.Tensor:
    """One query per sequence: gather every context to the batch's longest and
    mask the tail, so the whole batch is two batched matmuls. Computed in
    float32 by hand: CPU SDPA with a mask is several times slower in bf16."""
    num_seqs, num_heads, head_dim = query.shape
    num_kv_heads = k_cache.shape[2]
    group = num_heads // num_kv_heads
    length = max(max_seq_len, 1)
    k = _gather_context(k_cache, block_tables, length).float().permute(0, 2, 3, 1)  # [B, Hkv, D, L]
    v = _gather_context(v_cache, block_tables, length).float().transpose(1, 2)  # [B, Hkv, L, D]
    q = query.float().view(num_seqs, num_kv_heads, group, head_dim) * scale
    scores = torch.matmul(q, k)  # [B, Hkv, group, L]
    valid = torch.arange(length, device=query.device)[None, :] < seq_lens[:, None]
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    # Padded rows (seq_len 0) attend to nothing: softmax gives NaN there.
    probs = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    out = torch.matmul(probs, v)  # [B, Hkv, group, D]
    return out.reshape(num_seqs, num_heads, head_dim).to(query.dtype)


class TorchAttentionBackend:
    """The reference backend: `write_kv` and `paged_attention` above."""

    name = "torch"

    def write_kv(self, key, value, k_cache, v_cache, slot_mapping) -> None:
        write_kv(key, value, k_cache, v_cache, slot_mapping)

    def paged_attention(self, query, k_cache, v_cache, meta, scale) -> torch.Tensor:
        return paged_attention(query, k_cache, v_cache, meta, scale)
