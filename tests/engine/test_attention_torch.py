"""The plain-torch paged attention against dense causal attention."""

import random

import pytest
import torch

from agentgate.engine.attention.base import AttentionMetadata, count_shared_prefix_blocks
from agentgate.engine.attention.torch import paged_attention
from agentgate.engine.attention.torch_rotary import write_kv
from agentgate.engine.step_rows import decode_rows


def dense_causal(q, k, v, scale):
    """q [ql, H, D] at the last ql positions of k/v [L, Hkv, D]."""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) * scale
    ql, L = q.shape[0], k.shape[0]
    q_pos = torch.arange(L - ql, L)[:, None]
    scores = scores.masked_fill(torch.arange(L)[None, :] > q_pos, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)


def build_batch(seq_specs, num_heads, num_kv_heads, head_dim, block_size, seed=0):
    """seq_specs: list of (cached_len, query_len). Returns everything a test needs,
    with the cache filled through write_kv and block tables shuffled."""
    gen = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    blocks_needed = [-(-(c + q) // block_size) for c, q in seq_specs]
    num_blocks = sum(blocks_needed) + 3
    perm = list(range(num_blocks))
    rng.shuffle(perm)
    k_cache = torch.zeros(num_blocks, block_size, num_kv_heads, head_dim)
    v_cache = torch.zeros_like(k_cache)
    max_blocks = max(blocks_needed)
    tables = torch.zeros(len(seq_specs), max_blocks, dtype=torch.int32)
    full_k, full_v, queries, slots = [], [], [], []
    for i, (cached, qlen) in enumerate(seq_specs):
        ids = [perm.pop() for _ in range(blocks_needed[i])]
        tables[i, : len(ids)] = torch.tensor(ids, dtype=torch.int32)
        total = cached + qlen
        k = torch.randn(total, num_kv_heads, head_dim, generator=gen)
        v = torch.randn(total, num_kv_heads, head_dim, generator=gen)
        pos_slots = torch.tensor([ids[p // block_size] * block_size + p % block_size for p in range(total)])
        # The cached prefix was written by earlier steps.
        write_kv(k[:cached], v[:cached], k_cache, v_cache, pos_slots[:cached])
        full_k.append(k)
        full_v.append(v)
        queries.append(torch.randn(qlen, num_heads, head_dim, generator=gen))
        slots.append(pos_slots[cached:])
    qlens = [q for _, q in seq_specs]
    qsl = torch.tensor([0] + list(torch.tensor(qlens).cumsum(0)), dtype=torch.int32)
    seq_lens = torch.tensor([c + q for c, q in seq_specs], dtype=torch.int32)
    meta = AttentionMetadata(
        slot_mapping=torch.cat(slots),
        query_start_loc=qsl,
        seq_lens=seq_lens,
        block_tables=tables,
        max_query_len=max(qlens),
        max_seq_len=int(seq_lens.max()),
        query_start_loc_cpu=qsl.clone(),
        seq_lens_cpu=seq_lens.clone(),
    )
    new_k = torch.cat([k[c:] for k, (c, _) in zip(full_k, seq_specs)])
    new_v = torch.cat([v[c:] for v, (c, _) in zip(full_v, seq_specs)])
    return dict(
        meta=meta,
        k_cache=k_cache,
        v_cache=v_cache,
        query=torch.cat(queries),
        new_k=new_k,
        new_v=new_v,
        full_k=full_k,
        full_v=full_v,
        queries=queries,
    )


@pytest.mark.parametrize("num_heads,num_kv_heads", [(4, 4), (9, 3), (8, 1)])
@pytest.mark.parametrize(
    "specs",
    [
        [(0, 7), (5, 3), (16, 1), (31, 2)],  # prefill, extend, decode mixed
        [(15, 1), (16, 1), (0, 1), (40, 1)],  # pure decode at block edges
    ],
)
def test_paged_attention_matches_dense(specs, num_heads, num_kv_heads):
    b = build_batch(specs, num_heads, num_kv_heads, head_dim=8, block_size=16)
    write_kv(b["new_k"], b["new_v"], b["k_cache"], b["v_cache"], b["meta"].slot_mapping)
    out = paged_attention(b["query"], b["k_cache"], b["v_cache"], b["meta"], scale=0.3)
    start = 0
    for q, k, v in zip(b["queries"], b["full_k"], b["full_v"]):
        expect = dense_causal(q, k, v, 0.3)
        torch.testing.assert_close(out[start : start + len(q)], expect, atol=1e-5, rtol=1e-5)
        start += len(q)


def test_write_kv_skips_negative_slots():
    k_cache = torch.zeros(2, 4, 1, 2)
    v_cache = torch.zeros_like(k_cache)
    key = torch.ones(3, 1, 2)
    write_kv(key, key * 2, k_cache, v_cache, torch.tensor([5, -1, 0]))
    assert k_cache.view(-1, 1, 2)[5].eq(1).all() and k_cache.view(-1, 1, 2)[0].eq(1).all()
    assert int((k_cache != 0).sum()) == 4
    assert v_cache.view(-1, 1, 2)[5].eq(2).all()


def test_padded_decode_rows_are_finite():
    b = build_batch([(3, 1), (0, 1)], 2, 1, head_dim=4, block_size=4)
    meta = b["meta"]
    meta.seq_lens[1] = 0
    meta.seq_lens_cpu[1] = 0
    meta.slot_mapping[1] = -1
    write_kv(b["new_k"], b["new_v"], b["k_cache"], b["v_cache"], meta.slot_mapping)
    out = paged_attention(b["query"], b["k_cache"], b["v_cache"], meta, scale=0.5)
    assert torch.isfinite(out).all()


def build_shared_prefix_batch(prefix_blocks, own_lens, num_heads, num_kv_heads, head_dim, block_size, seed=0):
    """Decode rows whose block tables start with the same ``prefix_blocks``
    physical blocks (a prefix-cache hit), then blocks of their own; the
    cache already holds every position but each row's last."""
    gen = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    prefix_len = prefix_blocks * block_size
    totals = [prefix_len + n for n in own_lens]
    own_blocks = [-(-t // block_size) - prefix_blocks for t in totals]
    perm = list(range(prefix_blocks + sum(own_blocks) + 2))
    rng.shuffle(perm)
    k_cache = torch.zeros(len(perm), block_size, num_kv_heads, head_dim)
    v_cache = torch.zeros_like(k_cache)
    shared_ids = [perm.pop() for _ in range(prefix_blocks)]
    prefix_k = torch.randn(prefix_len, num_kv_heads, head_dim, generator=gen)
    prefix_v = torch.randn(prefix_len, num_kv_heads, head_dim, generator=gen)
    tables = torch.zeros(len(own_lens), prefix_blocks + max(own_blocks), dtype=torch.int32)
    full_k, full_v, slots = [], [], []
    for i, total in enumerate(totals):
        ids = shared_ids + [perm.pop() for _ in range(own_blocks[i])]
        tables[i, : len(ids)] = torch.tensor(ids, dtype=torch.int32)
        k = torch.cat([prefix_k, torch.randn(total - prefix_len, num_kv_heads, head_dim, generator=gen)])
        v = torch.cat([prefix_v, torch.randn(total - prefix_len, num_kv_heads, head_dim, generator=gen)])
        pos_slots = torch.tensor([ids[p // block_size] * block_size + p % block_size for p in range(total)])
        write_kv(k, v, k_cache, v_cache, pos_slots)
        full_k.append(k)
        full_v.append(v)
        slots.append(pos_slots[-1:])
    qsl = torch.arange(len(own_lens) + 1, dtype=torch.int32)
    seq_lens = torch.tensor(totals, dtype=torch.int32)
    meta = AttentionMetadata(
        slot_mapping=torch.cat(slots),
        query_start_loc=qsl,
        seq_lens=seq_lens,
        block_tables=tables,
        max_query_len=1,
        max_seq_len=max(totals),
        query_start_loc_cpu=qsl.clone(),
        seq_lens_cpu=seq_lens.clone(),
        shared_prefix_blocks=count_shared_prefix_blocks(
            [row[: -(-t // block_size)] for row, t in zip(tables.tolist(), totals)]
        ),
    )
    query = torch.randn(len(own_lens), num_heads, head_dim, generator=gen)
    return meta, k_cache, v_cache, query, full_k, full_v


@pytest.mark.parametrize("num_heads,num_kv_heads", [(4, 4), (9, 3), (8, 1)])
@pytest.mark.parametrize(
    "prefix_blocks,own_lens",
    [
        (3, [1, 16, 17, 40]),  # own parts ending on and just past block edges
        (1, [5]),  # one row: its whole table is "shared"
        (4, [2, 2, 31, 33, 64, 1]),
    ],
)
def test_decode_reads_a_shared_prefix_once_and_gives_the_same_attention(
    prefix_blocks, own_lens, num_heads, num_kv_heads
):
    meta, k_cache, v_cache, query, full_k, full_v = build_shared_prefix_batch(
        prefix_blocks, own_lens, num_heads, num_kv_heads, head_dim=8, block_size=16
    )
    assert meta.shared_prefix_blocks >= prefix_blocks
    out = paged_attention(query, k_cache, v_cache, meta, scale=0.3)
    for i, (k, v) in enumerate(zip(full_k, full_v)):
        torch.testing.assert_close(out[i : i + 1], dense_causal(query[i : i + 1], k, v, 0.3), atol=1e-5, rtol=1e-5)
    meta.shared_prefix_blocks = 0
    torch.testing.assert_close(out, paged_attention(query, k_cache, v_cache, meta, scale=0.3), atol=1e-5, rtol=1e-5)


def test_decode_rows_of_a_mixed_batch_use_the_shared_prefix_too():
    """An extend row (5 new tokens after the same cached 2-block prefix)
    beside the decode rows: the decode rows go through the batched path with
    the shared prefix, the extend row through SDPA."""
    meta, k_cache, v_cache, query, full_k, full_v = build_shared_prefix_batch(2, [3, 20, 9], 4, 2, 8, 16, seed=3)
    gen = torch.Generator().manual_seed(9)
    own_block = k_cache.shape[0]
    k_cache = torch.cat([k_cache, torch.zeros(1, *k_cache.shape[1:])])
    v_cache = torch.cat([v_cache, torch.zeros(1, *v_cache.shape[1:])])
    new_k, new_v = torch.randn(5, 2, 8, generator=gen), torch.randn(5, 2, 8, generator=gen)
    new_q = torch.randn(5, 4, 8, generator=gen)
    new_slots = torch.arange(5) + own_block * 16
    write_kv(new_k, new_v, k_cache, v_cache, new_slots)
    row = torch.zeros(1, meta.block_tables.shape[1], dtype=torch.int32)
    row[0, :3] = torch.tensor([*meta.block_tables[0, :2].tolist(), own_block])
    tables = torch.cat([meta.block_tables, row])
    qsl = torch.tensor([0, 1, 2, 3, 8], dtype=torch.int32)
    seq_lens = torch.cat([meta.seq_lens, torch.tensor([37], dtype=torch.int32)])
    mixed = AttentionMetadata(
        slot_mapping=torch.cat([meta.slot_mapping, new_slots]),
        query_start_loc=qsl,
        seq_lens=seq_lens,
        block_tables=tables,
        max_query_len=5,
        max_seq_len=int(seq_lens.max()),
        query_start_loc_cpu=qsl.clone(),
        seq_lens_cpu=seq_lens.clone(),
        shared_prefix_blocks=count_shared_prefix_blocks(
            [r[: -(-n // 16)] for r, n in zip(tables.tolist(), seq_lens.tolist())]
        ),
    )
    assert mixed.shared_prefix_blocks == 2
    out = paged_attention(torch.cat([query, new_q]), k_cache, v_cache, mixed, scale=0.5)
    for i, (k, v) in enumerate(zip(full_k, full_v)):
        torch.testing.assert_close(out[i : i + 1], dense_causal(query[i : i + 1], k, v, 0.5), atol=1e-5, rtol=1e-5)
    extend_k = torch.cat([full_k[0][:32], new_k])
    extend_v = torch.cat([full_v[0][:32], new_v])
    torch.testing.assert_close(out[3:], dense_causal(new_q, extend_k, extend_v, 0.5), atol=1e-5, rtol=1e-5)


def test_count_shared_prefix_blocks():
    assert count_shared_prefix_blocks([]) == 0
    assert count_shared_prefix_blocks([[4, 5, 6]]) == 3
    assert count_shared_prefix_blocks([[4, 5, 6, 9], [4, 5, 7], [4, 5, 6]]) == 2
    assert count_shared_prefix_blocks([[4, 5], [4, 5, 6, 7]]) == 2  # a shorter row bounds it
    assert count_shared_prefix_blocks([[1, 2], [3, 2]]) == 0
    assert count_shared_prefix_blocks([[7, 1], [2, 1], [7, 1]]) == 0  # the middle row differs first


def prompt_rows_attention(q, k_cache, v_cache, table, seq_len):
    """``paged_attention`` of one sequence's last ``len(q)`` positions, described as prompt rows."""
    rows = q.shape[0]
    qsl = torch.tensor([0, rows], dtype=torch.int32)
    seq_lens = torch.tensor([seq_len], dtype=torch.int32)
    meta = AttentionMetadata(
        slot_mapping=torch.arange(seq_len - rows, seq_len),
        query_start_loc=qsl,
        seq_lens=seq_lens,
        block_tables=table[None],
        max_query_len=rows,
        max_seq_len=seq_len,
        query_start_loc_cpu=qsl,
        seq_lens_cpu=seq_lens,
    )
    with decode_rows(0):
        return paged_attention(q, k_cache, v_cache, meta, 0.125)


def _near_rounding_bf16(seed: int, length: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(queries, key cache, value cache, block table) of ``length`` bf16 tokens, 9 query and 3 KV
    heads of 64, blocks of 16: magnitudes where a sum often sits near a rounding boundary."""
    g = torch.Generator().manual_seed(seed)
    heads, kv_heads, dim, block = 9, 3, 64, 16
    k = (torch.randn(length, kv_heads, dim, generator=g) * 3).bfloat16()
    v = torch.randn(length, kv_heads, dim, generator=g).bfloat16()
    q = (torch.randn(length, heads, dim, generator=g) * 3).bfloat16()
    k_cache = torch.zeros(-(-length // block) + 1, block, kv_heads, dim, dtype=torch.bfloat16)
    v_cache = torch.zeros_like(k_cache)
    write_kv(k, v, k_cache, v_cache, torch.arange(length))
    return q, k_cache, v_cache, torch.arange(k_cache.shape[0], dtype=torch.int32)


@pytest.mark.parametrize("seed", range(40))
def test_a_prompt_row_computes_the_same_numbers_however_much_of_its_prompt_runs_with_it(seed):
    """bf16 (the CPU's KV dtype), magnitudes where a sum often sits near a rounding boundary: a
    prompt's rows computed whole, as a cached prompt's last tokens (one row included) and in
    chunks are bit for bit the same (issue 35: a retried greedy request repeats itself). One SDPA
    call per sequence, as before, differs on some of these seeds."""
    length = 75
    q, k_cache, v_cache, table = _near_rounding_bf16(seed, length)
    whole = prompt_rows_attention(q, k_cache, v_cache, table, length)
    for suffix in (1, 3, 11, 27, 43):
        got = prompt_rows_attention(q[-suffix:], k_cache, v_cache, table, length)
        assert torch.equal(got, whole[-suffix:]), f"the last {suffix} rows"
    for chunk_end in (20, 33, 64):  # a chunk of the prompt: fewer keys, fewer rows
        got = prompt_rows_attention(q[:chunk_end], k_cache, v_cache, table, chunk_end)
        assert torch.equal(got, whole[:chunk_end]), f"a chunk ending at {chunk_end}"


def small_step_decode_attention(q, k_cache, v_cache, table, rows, requests):
    """`paged_attention` of one request's ``rows`` (its last token and drafts, [(position, query)])
    as a small step's decode rows: the cache already holds their keys."""
    first, count = rows[0][0], len(rows)
    qsl = torch.tensor([0, count], dtype=torch.int32)
    seq_lens = torch.tensor([first + count], dtype=torch.int32)
    meta = AttentionMetadata(
        slot_mapping=torch.arange(first, first + count),
        query_start_loc=qsl,
        seq_lens=seq_lens,
        block_tables=table[None],
        max_query_len=count,
        max_seq_len=first + count,
        query_start_loc_cpu=qsl.clone(),
        seq_lens_cpu=seq_lens.clone(),
    )
    with decode_rows(count, requests):
        return paged_attention(torch.stack([query for _, query in rows]), k_cache, v_cache, meta, 0.125)


@pytest.mark.parametrize("seed", range(40))
def test_a_drafted_row_computes_the_numbers_of_its_token_decoded_alone(seed):
    """bf16, magnitudes near rounding boundaries (as above): a request's last token and 6 drafts
    from position 42, the last of them past the 3rd block's end, verified in one small step, give
    every row the same bits as decoding its token alone (issue 52: the rows before the boundary,
    run over the last row's 64 keys, came out otherwise than over their own 48 on an AMX Xeon,
    and a greedy reply changed)."""
    length = 49
    q, k_cache, v_cache, table = _near_rounding_bf16(seed, length)
    positions = range(42, length)
    verified = small_step_decode_attention(q, k_cache, v_cache, table, [(p, q[p]) for p in positions], 1)
    for row, p in enumerate(positions):
        alone = small_step_decode_attention(q, k_cache, v_cache, table, [(p, q[p])], 1)
        assert torch.equal(verified[row], alone[0]), f"the row at position {p}"
