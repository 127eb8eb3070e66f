"""Plain-torch paged attention: the CPU path and the reference the Triton kernels are tested against."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from agentgate.engine.attention.base import AttentionMetadata


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


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` [tokens, heads, head_dim] by ``cos``/``sin`` [tokens,
    head_dim / 2] (rows of `engine.models.rope.rope_tables` gathered at the
    tokens' positions), neox layout: element ``i`` pairs with ``i +
    head_dim / 2``. Computed in float32, returned in ``x``'s dtype."""
    half = x.shape[-1] // 2
    xf = x.float()
    x1, x2 = xf[..., :half], xf[..., half:]
    cos, sin = cos[:, None, :], sin[:, None, :]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


def rotary_write_kv(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> torch.Tensor:
    """RoPE on the query and the keys, the keys and values stored at their
    slots; returns the rotated query (see `AttentionBackend.rotary_write_kv`)."""
    write_kv(apply_rope(key, cos, sin), value, k_cache, v_cache, slot_mapping)
    return apply_rope(query, cos, sin)


def _gather_context(cache: torch.Tensor, block_table: torch.Tensor, length: int) -> torch.Tensor:
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
        return _decode_attention(
            query,
            k_cache,
            v_cache,
            meta.block_tables,
            meta.seq_lens,
            meta.max_seq_len,
            scale,
            meta.shared_prefix_blocks,
        )
    out = torch.zeros_like(query)
    starts = meta.query_start_loc_cpu.tolist()
    lens = meta.seq_lens_cpu.tolist()
    decode_rows = [i for i, n in enumerate(lens) if n > 0 and starts[i + 1] - starts[i] == 1]
    if decode_rows:
        rows = torch.tensor(decode_rows, device=query.device)
        tokens = torch.tensor([starts[i] for i in decode_rows], device=query.device)
        out[tokens] = _decode_attention(
            query[tokens],
            k_cache,
            v_cache,
            meta.block_tables[rows],
            meta.seq_lens[rows],
            max(lens[i] for i in decode_rows),
            scale,
            meta.shared_prefix_blocks,
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
    shared_blocks: int = 0,
) -> torch.Tensor:
    """One query per sequence: gather every context's whole blocks (up to the
    batch's longest) with one index_select per cache, mask the tail, and do
    the batch as batched matmuls in the cache's dtype, softmax in float32.
    On a CPU this step streams the whole KV context of the batch once per
    layer, so bytes decide, and the gathered context is used in its cache
    layout, [tokens, kv_heads * head_dim], never reordered (see
    `_block_diagonal`).

    The first ``shared_blocks`` blocks, the same for every row, are read
    once and scored for all rows in one matmul (cascade attention): agents
    that share a 300-token system prompt then stream their own suffixes
    only. The two parts' scores meet in one softmax, so the result is the
    same attention."""
    num_seqs, num_heads, head_dim = query.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    width = num_kv_heads * head_dim
    num_blocks = max(-(-max_seq_len // block_size), 1)
    shared = min(shared_blocks, num_blocks)
    own = block_tables[:, shared:num_blocks].reshape(-1).long()
    k = k_cache.index_select(0, own).view(num_seqs, -1, width)
    v = v_cache.index_select(0, own).view(num_seqs, -1, width)
    q = _block_diagonal(query * scale, num_kv_heads).to(k.dtype)  # [seqs, width, heads]
    scores = torch.bmm(k, q).transpose(1, 2)  # [seqs, heads, own tokens]
    if shared:
        prefix = block_tables[0, :shared].long()
        k_prefix = k_cache.index_select(0, prefix).view(-1, width)
        v_prefix = v_cache.index_select(0, prefix).view(-1, width)
        every_row = q.transpose(0, 1).reshape(width, num_seqs * num_heads)
        prefix_scores = (k_prefix @ every_row).view(-1, num_seqs, num_heads).permute(1, 2, 0)
        scores = torch.cat([prefix_scores, scores], dim=-1)
    scores = scores.float()
    valid = torch.arange(scores.shape[-1], device=query.device)[None, :] < seq_lens[:, None]
    scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
    # Padded rows (seq_len 0) attend to nothing: softmax gives NaN there.
    probs = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0).to(k.dtype)
    prefix_len = shared * block_size
    mixed = torch.bmm(probs[..., prefix_len:], v)  # [seqs, heads, width]: every head against every KV head
    if shared:
        mixed += (probs[..., :prefix_len].reshape(-1, prefix_len) @ v_prefix).view(mixed.shape)
    group = num_heads // num_kv_heads
    # Keep each query head's own KV head: the diagonal of [kv_head, kv_head'].
    out = mixed.view(num_seqs, num_kv_heads, group, num_kv_heads, head_dim).diagonal(dim1=1, dim2=3)
    return out.permute(0, 3, 1, 2).reshape(num_seqs, num_heads, head_dim).to(query.dtype)


def _block_diagonal(query: torch.Tensor, num_kv_heads: int) -> torch.Tensor:
    """Decode queries [seqs, heads, head_dim] as [seqs, kv_heads * head_dim,
    heads]: column ``j`` holds query head ``j`` in the rows of its KV head and
    zeros elsewhere. A context in the cache's layout, [tokens, kv_heads *
    head_dim], times this gives every head's scores in one plain matmul:
    kv_heads times the multiply-adds of a per-head product, but no copy of
    the context into a per-head layout, which is what costs on a CPU
    (measured 1.5-4x faster for 1-8 KV heads)."""
    num_seqs, num_heads, head_dim = query.shape
    group = num_heads // num_kv_heads
    grouped = query.view(num_seqs, num_kv_heads, group, head_dim)
    spread = query.new_zeros(num_seqs, num_kv_heads, head_dim, num_kv_heads, group)
    spread.diagonal(dim1=1, dim2=3).copy_(grouped.permute(0, 3, 2, 1))
    return spread.view(num_seqs, num_kv_heads * head_dim, num_heads)


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
        k = _gather_context(k_cache, meta.block_tables[i], seq_len)
        v = _gather_context(v_cache, meta.block_tables[i], seq_len)
        first_position = seq_len - (end - begin)
        for token in range(begin, end):
            n = first_position + token - begin + 1  # keys 0..its own position
            q = (query[token] * scale).view(num_kv_heads, group, head_dim).to(k.dtype)
            scores = torch.bmm(q, k[:n].permute(1, 2, 0)).float()  # [kv_heads, group, n]
            probs = torch.softmax(scores, dim=-1).to(v.dtype)
            mixed = torch.bmm(probs, v[:n].transpose(0, 1))  # [kv_heads, group, head_dim]
            out[token] = mixed.reshape(num_heads, head_dim).to(out.dtype)
    return out


class TorchAttentionBackend:
    """The reference backend: `rotary_write_kv` and `paged_attention` above."""

    name = "torch"
    reads_shared_prefix = True

    rotary_write_kv = staticmethod(rotary_write_kv)

    def paged_attention(self, query, k_cache, v_cache, meta, scale) -> torch.Tensor:
        return paged_attention(query, k_cache, v_cache, meta, scale)


class BatchInvariantTorchBackend(TorchAttentionBackend):
    """`batch_invariant_attention` for ``--deterministic``; it reads every
    context whole, so the runner need not find shared prefixes."""

    name = "torch-batch-invariant"
    reads_shared_prefix = False

    def paged_attention(self, query, k_cache, v_cache, meta, scale) -> torch.Tensor:
        return batch_invariant_attention(query, k_cache, v_cache, meta, scale)
