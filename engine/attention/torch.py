"""Plain-torch paged attention: the CPU path and the reference the Triton kernels are tested against
(RoPE and the KV-cache write: `engine.attention.torch_rotary`; prompt rows:
`engine.attention.torch_prompt`; the compiled decode rows: `engine.attention.cpu_native`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch

from agentgate.engine.attention.base import AttentionMetadata
from agentgate.engine.attention.torch_prompt import prompt_attention
from agentgate.engine.attention.torch_rotary import KvSlots, rope_factors, rotate, write_kv_at
from agentgate.engine.step_rows import decode_row_count, is_small_step

if TYPE_CHECKING:
    from agentgate.engine.attention.cpu_native import NativeAttention


def paged_attention(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """Causal attention of ``query`` over the paged cache (see AttentionBackend).

    Decode rows of one query token go through one batched call; prompt rows
    (a prefill, a chunk, a cached prompt's last tokens, even one) through
    `prompt_attention`, one sequence at a time. A multi-token decode row (a
    request's drafts) joins the batched call in a small step, each of its
    tokens as a decode row of its own, and goes as prompt rows otherwise (with
    the compiled kernel, `TorchAttentionBackend.use_native_kernels`, it joins in
    any step). Which rows decode, and which steps are small: `engine.step_rows`."""
    num_decoding = decode_row_count(query.shape[0])
    decode = _DecodeRows.of(query, k_cache, meta, num_decoding, is_small_step())
    return _paged_attention(query, k_cache, v_cache, meta, scale, num_decoding, decode)


def _paged_attention(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    num_decoding: int,
    decode: _DecodeRows | None,
    native: NativeAttention | None = None,
) -> torch.Tensor:
    """`paged_attention` with the step's decode rows worked out (`_DecodeRows.of`); ``native``: the
    compiled kernel the decode rows take instead of `_decode_attention`, where it is loaded."""
    if decode is not None and decode.tokens is None:
        return _decode_rows_attention(query, k_cache, v_cache, scale, decode, native)
    out = torch.zeros_like(query)
    if decode is not None:
        out[decode.tokens] = _decode_rows_attention(query[decode.tokens], k_cache, v_cache, scale, decode, native)
    starts = meta.query_start_loc_cpu.tolist()
    group = query.shape[1] // k_cache.shape[2]
    for i, seq_len in enumerate(meta.seq_lens_cpu.tolist()):
        begin, end = starts[i], starts[i + 1]
        if seq_len == 0 or end == begin or (begin < num_decoding and (end - begin == 1 or decode_expands(decode))):
            continue
        out[begin:end] = prompt_attention(
            query[begin:end], k_cache, v_cache, meta.block_tables[i], seq_len, scale, group
        )
    return out


class _DecodePlan(NamedTuple):
    """What every layer of a decode step shares in `_decode_attention`: built once per step by the
    backend (`TorchAttentionBackend`), so the layers repeat none of it."""

    own: torch.Tensor  # [seqs * blocks] int64: each row's blocks after the shared ones
    prefix: torch.Tensor | None  # [shared] int64: the shared blocks, None when none
    prefix_len: int  # tokens in the shared blocks
    mask: torch.Tensor  # [seqs, 1, prefix + own tokens] float32: 0 where a key is in context, -inf past its end
    spread: torch.Tensor  # the zeros of `_block_diagonal`'s layout; each layer writes its diagonal
    has_empty_rows: bool  # padded rows (seq_len 0) attend to nothing: softmax gives NaN there

    @classmethod
    def build(
        cls,
        query: torch.Tensor,
        k_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        shared_blocks: int,
        has_empty_rows: bool | None = None,
    ) -> _DecodePlan:
        """``has_empty_rows``: whether some row has seq_len 0, when the caller knows on the host
        (`AttentionMetadata.padded`); None reads ``seq_lens``."""
        num_seqs, num_heads, head_dim = query.shape
        block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
        num_blocks = max(-(-max_seq_len // block_size), 1)
        # One row shares its blocks with nobody: scoring them apart would only cost calls.
        shared = min(shared_blocks, num_blocks) if num_seqs > 1 else 0
        device = query.device
        length = torch.arange(num_blocks * block_size, device=device)
        past_end = length[None, :] >= seq_lens[:, None]
        mask = torch.zeros(past_end.shape, dtype=torch.float32, device=device).masked_fill_(past_end, float("-inf"))
        group = num_heads // num_kv_heads
        return cls(
            own=block_tables[:, shared:num_blocks].reshape(-1).long(),
            prefix=block_tables[0, :shared].long() if shared else None,
            prefix_len=shared * block_size,
            mask=mask[:, None, :],
            spread=torch.zeros(
                num_seqs, num_kv_heads, head_dim, num_kv_heads, group, dtype=k_cache.dtype, device=device
            ),
            has_empty_rows=bool((seq_lens == 0).any()) if has_empty_rows is None else has_empty_rows,
        )


class _DecodeRows(NamedTuple):
    """A step's decode rows as `_decode_attention` takes them: which query tokens (None: all of
    them, in order: a pure-decode step) and their plan. In a small step a multi-token decode row
    (drafts) gives one row per token, each over the context a lone decode token at its position
    reads (the step wrote its keys first), and no row reads the shared prefix apart; then every
    row computes what it would alone (`engine.step_rows`)."""

    tokens: torch.Tensor | None
    plan: _DecodePlan | None  # None when the compiled kernel runs (``expand``): it reads no plan
    expanded: bool
    # In a small step whose decode rows read contexts of different block counts: the rows (of the
    # decode rows, in order) of each block count, with their own plan; empty otherwise.
    parts: tuple[tuple[torch.Tensor, _DecodePlan], ...] = ()
    # The decode rows' block tables, context lengths and longest context (what the compiled
    # kernel, `cpu_native`, reads instead of the plan).
    block_tables: torch.Tensor | None = None
    seq_lens: torch.Tensor | None = None
    max_seq_len: int = 0

    @classmethod
    def of(
        cls,
        query: torch.Tensor,
        k_cache: torch.Tensor,
        meta: AttentionMetadata,
        num_decoding: int,
        small: bool,
        has_empty_rows: bool | None = None,
        expand: bool = False,
    ) -> _DecodeRows | None:
        """The decode rows of a step whose first ``num_decoding`` tokens decode; None when none
        does. ``has_empty_rows`` as in `_DecodePlan.build`, for a pure-decode step. ``expand``:
        multi-token decode rows give one row per token in any step, not in small ones only (the
        compiled kernel computes every row over exactly its context, at any batch)."""
        shared = 0 if small else meta.shared_prefix_blocks
        if meta.is_pure_decode and num_decoding == query.shape[0]:
            plan = (
                None
                if expand
                else _DecodePlan.build(
                    query, k_cache, meta.block_tables, meta.seq_lens, meta.max_seq_len, shared, has_empty_rows
                )
            )
            parts = (
                _parts_by_blocks(query, k_cache, meta.block_tables, meta.seq_lens_cpu.tolist())
                if small and not expand
                else ()
            )
            return cls(None, plan, False, parts, meta.block_tables, meta.seq_lens, meta.max_seq_len)
        starts = meta.query_start_loc_cpu.tolist()
        rows, tokens, seq_lens = [], [], []
        for i, seq_len in enumerate(meta.seq_lens_cpu.tolist()):
            begin, end = starts[i], starts[i + 1]
            if seq_len == 0 or end == begin or begin >= num_decoding or (end - begin > 1 and not (small or expand)):
                continue
            for token in range(begin, end):  # keys up to the token's own position
                rows.append(i)
                tokens.append(token)
                seq_lens.append(seq_len - end + token + 1)
        if not rows:
            return None
        device = query.device
        tokens_d = torch.tensor(tokens, device=device)
        block_tables = meta.block_tables[torch.tensor(rows, device=device)]
        seq_lens_d = torch.tensor(seq_lens, dtype=torch.int32, device=device)
        plan = (
            None
            if expand
            else _DecodePlan.build(
                query[tokens_d], k_cache, block_tables, seq_lens_d, max(seq_lens), shared, has_empty_rows=False
            )
        )
        parts = _parts_by_blocks(query[tokens_d], k_cache, block_tables, seq_lens) if small and not expand else ()
        return cls(tokens_d, plan, small or expand, parts, block_tables, seq_lens_d, max(seq_lens))


def _parts_by_blocks(
    query: torch.Tensor, k_cache: torch.Tensor, block_tables: torch.Tensor, seq_lens: list[int]
) -> tuple[tuple[torch.Tensor, _DecodePlan], ...]:
    """A small step's decode rows (``query`` [rows, heads, dim], one block table and context length
    each) grouped by how many KV blocks a row's context spans, each group with the plan of a step of
    its rows alone; empty when every row spans as many. A lone decode token's scores and weighted
    sum run over its own whole blocks; run beside a longer context (a later draft of its request
    that crossed a block boundary, a neighbour's), they would run over that row's block count, keys
    past its end masked, and a bf16 batched matmul that blocks its work by the number of keys
    (oneDNN with AMX) rounds them otherwise (issue 52: a draft at position 43 beside one at 48, 64
    keys against 48, moved a logit by half a unit). So each group runs over exactly its own blocks."""
    block_size = k_cache.shape[1]
    counts = [max(-(-seq_len // block_size), 1) for seq_len in seq_lens]
    if len(set(counts)) <= 1:
        return ()
    device = query.device
    parts = []
    for count in sorted(set(counts)):
        members = [i for i, c in enumerate(counts) if c == count]
        lens = [seq_lens[i] for i in members]
        members_d = torch.tensor(members, device=device)
        plan = _DecodePlan.build(
            query[members_d],
            k_cache,
            block_tables[members_d],
            torch.tensor(lens, dtype=torch.int32, device=device),
            max(lens),
            0,
            has_empty_rows=min(lens) == 0,
        )
        parts.append((members_d, plan))
    return tuple(parts)


def _decode_rows_attention(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    scale: float,
    decode: _DecodeRows,
    native: NativeAttention | None = None,
) -> torch.Tensor:
    """`_decode_attention` of the decode rows ``query``, in one call, or one per part of
    ``decode.parts`` (`_parts_by_blocks`). ``native`` computes every row over exactly its own
    context in one call: no parts needed."""
    if native is not None:
        return native(query, k_cache, v_cache, decode.block_tables, decode.seq_lens, decode.max_seq_len, scale)
    if not decode.parts:
        return _decode_attention(query, k_cache, v_cache, scale, plan=decode.plan)
    out = torch.empty_like(query)
    for members, plan in decode.parts:
        out[members] = _decode_attention(query[members], k_cache, v_cache, scale, plan=plan)
    return out


def decode_expands(decode: _DecodeRows | None) -> bool:
    """Whether ``decode`` holds the step's multi-token decode rows too (a small step's)."""
    return decode is not None and decode.expanded


def _decode_attention(
    query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, scale: float, *, plan: _DecodePlan
) -> torch.Tensor:
    """One query per sequence: gather every context's whole blocks (up to the
    batch's longest) with one index_select per cache, mask the tail, and do
    the batch as batched matmuls in the cache's dtype, softmax in float32.
    On a CPU this step streams the whole KV context of the batch once per
    layer, so bytes decide, and the gathered context is used in its cache
    layout, [tokens, kv_heads * head_dim], never reordered (see
    `_block_diagonal`).

    The plan's shared blocks, the same for every row, are read
    once and scored for all rows in one matmul (cascade attention): agents
    that share a 300-token system prompt then stream their own suffixes
    only. The two parts' scores meet in one softmax, so the result is the
    same attention.

    ``plan``: the step's `_DecodePlan` (the blocks, the mask). The scale is
    applied to the float32 scores, with the mask, in one call; for a
    power-of-two scale (head_dim 64, 256) that rounds as scaling the query
    first would."""
    num_seqs, num_heads, head_dim = query.shape
    num_kv_heads = k_cache.shape[2]
    width = num_kv_heads * head_dim
    k = k_cache.index_select(0, plan.own).view(num_seqs, -1, width)
    v = v_cache.index_select(0, plan.own).view(num_seqs, -1, width)
    q = _block_diagonal(query, num_kv_heads, plan.spread)  # [seqs, width, heads]
    # Not the transposed product (2x faster in float32 at 50 rows): a lone request then sampled
    # other tokens than the same request beside others reading a shared prefix (test_seed_reproducibility).
    scores = torch.bmm(k, q).transpose(1, 2)  # [seqs, heads, own tokens]
    if plan.prefix is not None:
        k_prefix = k_cache.index_select(0, plan.prefix).view(-1, width)
        every_row = q.transpose(0, 1).reshape(width, num_seqs * num_heads)
        prefix_scores = (k_prefix @ every_row).view(-1, num_seqs, num_heads).permute(1, 2, 0)
        scores = torch.cat([prefix_scores, scores], dim=-1)
    scores = torch.add(
        plan.mask, torch.empty(scores.shape, dtype=torch.float32, device=k.device).copy_(scores), alpha=scale
    )
    probs = torch.softmax(scores, dim=-1)
    if plan.has_empty_rows:
        probs.nan_to_num_(nan=0.0)
    probs = torch.empty(probs.shape, dtype=k.dtype, device=k.device).copy_(probs)
    prefix_len = plan.prefix_len
    mixed = torch.bmm(probs[..., prefix_len:] if prefix_len else probs, v)  # [seqs, heads, width]: all KV heads
    if plan.prefix is not None:
        v_prefix = v_cache.index_select(0, plan.prefix).view(-1, width)
        mixed += (probs[..., :prefix_len].reshape(-1, prefix_len) @ v_prefix).view(mixed.shape)
    group = num_heads // num_kv_heads
    # Keep each query head's own KV head: the diagonal of [kv_head, kv_head'].
    out = mixed.view(num_seqs, num_kv_heads, group, num_kv_heads, head_dim).diagonal(dim1=1, dim2=3)
    out = out.permute(0, 3, 1, 2).reshape(num_seqs, num_heads, head_dim)
    return out if out.dtype == query.dtype else out.to(query.dtype)


def _block_diagonal(query: torch.Tensor, num_kv_heads: int, spread: torch.Tensor) -> torch.Tensor:
    """Decode queries [seqs, heads, head_dim] as [seqs, kv_heads * head_dim,
    heads] in ``spread``'s dtype: column ``j`` holds query head ``j`` in the rows of its KV head and
    zeros elsewhere. A context in the cache's layout, [tokens, kv_heads *
    head_dim], times this gives every head's scores in one plain matmul:
    kv_heads times the multiply-adds of a per-head product, but no copy of
    the context into a per-head layout, which is what costs on a CPU
    (measured 1.5-4x faster for 1-8 KV heads). ``spread``
    ([seqs, kv_heads, head_dim, kv_heads, group], zeros off the diagonal) is
    written in place: the diagonal is all a query changes."""
    num_seqs, num_heads, head_dim = query.shape
    group = num_heads // num_kv_heads
    grouped = query.view(num_seqs, num_kv_heads, group, head_dim)
    spread.diagonal(dim1=1, dim2=3).copy_(grouped.permute(0, 3, 2, 1))
    return spread.view(num_seqs, num_kv_heads * head_dim, num_heads)


class TorchAttentionBackend:
    """The reference backend: `torch_rotary.rotary_write_kv` and `paged_attention` above, with what a
    step's layers share worked out by the first layer and reused by the others: the RoPE factors,
    the KV slots and the decode plan. With the compiled CPU kernels (`use_native_kernels`), RoPE
    and the cache write (bit for bit the torch path's) and the decode rows go through them instead.
    A step is recognised by the objects every layer receives (the same ``cos`` tensor, the same
    `AttentionMetadata`); each is held until the next step's replaces it, so an identity is never
    reused while it is compared."""

    name = "torch"
    reads_shared_prefix = True

    def __init__(self) -> None:
        self._rope: tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor, KvSlots]] | None = None
        self._decode: tuple[AttentionMetadata, _DecodeRows | None] | None = None  # the step's, by its metadata
        self.native: NativeAttention | None = None

    def use_native_kernels(self, native: NativeAttention) -> None:
        """RoPE with the cache write, and decode rows, through the compiled kernels (`cpu_native`)
        from now on. The decode kernel reads each row's whole context itself (the shared prefix
        sits in the CPU's cache for the next row), so the runner need not find shared prefixes."""
        self.native = native
        self.reads_shared_prefix = False

    def rotary_write_kv(self, query, key, value, cos, sin, k_cache, v_cache, meta) -> torch.Tensor:
        slot_mapping = meta.slot_mapping
        if self.native is not None and self.native.takes_rotary(query, key, value, cos):
            # The same bits as below in one call instead of about a dozen (padding slots skipped there).
            return self.native.rotary_write_kv(query, key, value, cos, sin, k_cache, v_cache, slot_mapping)
        if self._rope is None or self._rope[0] is not cos or self._rope[1] is not slot_mapping:
            # An eager step writes every token: its slots are used as they are, without a host read.
            slots = KvSlots.of(slot_mapping) if meta.padded else KvSlots(slot_mapping, None)
            self._rope = (cos, slot_mapping, (*rope_factors(cos, sin), slots))
        cos_full, sin_signed, slots = self._rope[2]
        write_kv_at(rotate(key, cos_full, sin_signed), value, k_cache, v_cache, slots)
        return rotate(query, cos_full, sin_signed)

    def paged_attention(self, query, k_cache, v_cache, meta, scale) -> torch.Tensor:
        num_decoding = decode_row_count(query.shape[0])
        if self._decode is None or self._decode[0] is not meta:
            # Eager steps have no padding rows (`AttentionMetadata.padded`): no host read of seq_lens.
            decode = _DecodeRows.of(
                query, k_cache, meta, num_decoding, is_small_step(), meta.padded, expand=self.native is not None
            )
            self._decode = (meta, decode)
        return _paged_attention(query, k_cache, v_cache, meta, scale, num_decoding, self._decode[1], self.native)
