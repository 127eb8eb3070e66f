"""The Triton decode and prefill/extend kernels against the torch reference:
under TRITON_INTERPRET=1 in fp32/fp16 on CPU, and (``gpu`` marker) on CUDA in
bf16 with realistic shapes and a CUDA-graph replay. (The fused RoPE + KV
write is tested in test_norm_rotary_kernels.py.)"""

from __future__ import annotations

import os

import pytest
import torch

from agentgate.engine.attention import torch as reference
from agentgate.engine.attention import torch_rotary
from agentgate.engine.attention import triton as attention_backend
from agentgate.engine.attention.base import AttentionMetadata
from agentgate.engine.attention.triton import TritonAttentionBackend
from agentgate.engine.kernels.decode_attention import decode_attention
from agentgate.engine.kernels.prefill_attention import prefill_attention

# The interpreter log-sum-exps of empty decode spans on purpose (log2(0) = -inf).
pytestmark = pytest.mark.filterwarnings("ignore:divide by zero encountered in log2")

SCALE = 0.3
FP32, FP16, BF16 = torch.float32, torch.float16, torch.bfloat16
TOL = {FP32: 1e-4, FP16: 3e-3, BF16: 2e-2}


# CPU tensors reach Triton only through the interpreter, which tests/conftest.py
# turns on where there is no GPU; on a CUDA machine the ``gpu`` cases run instead.
interpreted = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="CPU cases need TRITON_INTERPRET=1")


def cases(cpu, gpu):
    """Interpreter cases as given; CUDA cases marked ``gpu``. Each case is a
    tuple ending in (device, dtype)."""
    return [pytest.param(*c, "cpu", d, marks=interpreted) for *c, d in cpu] + [
        pytest.param(*c, "cuda", d, marks=pytest.mark.gpu) for *c, d in gpu
    ]


DEVICES = cases([(FP32,), (FP16,)], [(BF16,), (FP16,)])
# (num_heads, num_kv_heads, block_size, head_dim): GQA ratios 1, 3 and 8.
SHAPES = [(2, 2, 16, 16), (6, 2, 32, 32), (8, 1, 16, 32)]
SHAPE_CASES = cases(
    [(*SHAPES[0], FP32), (*SHAPES[1], FP16), (*SHAPES[2], FP32), (*SHAPES[0], FP16)],
    [(*shape, BF16) for shape in SHAPES],
)

# (cached_len, query_len) per sequence; cached_len None = padded row
# (seq_len 0, slot -1). Contexts end on and just past block boundaries.
DECODE = [(15, 1), (None, 1), (16, 1), (32, 1), (33, 1)]
MIXED = [(0, 7), (5, 3), (16, 1), (31, 2), (None, 0), (48, 17)]


def make_batch(specs, num_heads, num_kv_heads, head_dim, block_size, dtype, device, seed=0):
    """A batch whose cache already holds every position (the step's new
    tokens too, as after `rotary_write_kv`), blocks shuffled, unused block-table
    entries pointing at real blocks, plus spare table columns."""
    gen = torch.Generator().manual_seed(seed)
    lens = [(0 if c is None else c + q, q) for c, q in specs]
    blocks_needed = [-(-total // block_size) for total, _ in lens]
    num_blocks = sum(blocks_needed) + 2
    perm = torch.randperm(num_blocks, generator=gen)
    width = max(blocks_needed) + 2
    tables = torch.randint(0, num_blocks, (len(specs), width), generator=gen, dtype=torch.int32)
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.randn(shape, generator=gen)
    v_cache = torch.randn(shape, generator=gen)
    used = 0
    slots, new_k, new_v = [], [], []
    for i, ((total, q_len), need) in enumerate(zip(lens, blocks_needed)):
        tables[i, :need] = perm[used : used + need].to(torch.int32)
        used += need
        pos = torch.arange(total - q_len, total)
        if total == 0:
            slots.append(torch.full((q_len,), -1))
        else:
            slots.append(tables[i, pos // block_size].long() * block_size + pos % block_size)
        new_k.append(torch.randn(q_len, num_kv_heads, head_dim, generator=gen))
        new_v.append(torch.randn(q_len, num_kv_heads, head_dim, generator=gen))
    slot_mapping = torch.cat(slots)
    new_k, new_v = torch.cat(new_k), torch.cat(new_v)
    torch_rotary.write_kv(new_k, new_v, k_cache, v_cache, slot_mapping)

    q_lens = torch.tensor([q for _, q in lens])
    qsl = torch.cat([torch.zeros(1, dtype=torch.int32), q_lens.cumsum(0).to(torch.int32)])
    seq_lens = torch.tensor([t for t, _ in lens], dtype=torch.int32)
    query = torch.randn(int(q_lens.sum()), num_heads, head_dim, generator=gen)
    meta = AttentionMetadata(
        slot_mapping=slot_mapping.to(device),
        query_start_loc=qsl.to(device),
        seq_lens=seq_lens.to(device),
        block_tables=tables.to(device),
        max_query_len=int(q_lens.max()),
        max_seq_len=int(seq_lens.max()),
        query_start_loc_cpu=qsl,
        seq_lens_cpu=seq_lens,
    )
    to = dict(device=device, dtype=dtype)
    return query.to(**to), k_cache.to(**to), v_cache.to(**to), meta, new_k.to(**to), new_v.to(**to)


def expected(query, k_cache, v_cache, meta, scale=SCALE):
    """The reference in fp32 on the same (already rounded) inputs."""
    out = reference.paged_attention(query.float(), k_cache.float(), v_cache.float(), meta, scale)
    return out.to(query.dtype)


def assert_close(actual, expect):
    tol = TOL[expect.dtype]
    assert actual.dtype == expect.dtype and actual.shape == expect.shape
    assert torch.isfinite(actual).all()
    torch.testing.assert_close(actual, expect, atol=tol, rtol=tol)


# --- decode -------------------------------------------------------------------


@pytest.mark.parametrize("num_heads,num_kv_heads,block_size,head_dim,device,dtype", SHAPE_CASES)
def test_decode_through_backend(num_heads, num_kv_heads, block_size, head_dim, device, dtype):
    query, k_cache, v_cache, meta, *_ = make_batch(DECODE, num_heads, num_kv_heads, head_dim, block_size, dtype, device)
    out = TritonAttentionBackend().paged_attention(query, k_cache, v_cache, meta, SCALE)
    assert_close(out, expected(query, k_cache, v_cache, meta))
    assert torch.equal(out[1], torch.zeros_like(out[1]))  # the padded row


@pytest.mark.parametrize(
    "num_splits,device,dtype", cases([(1, FP16), (3, FP32), (8, FP16)], [(1, BF16), (3, BF16), (8, BF16)])
)
def test_decode_split_merge(num_splits, device, dtype):
    """Small key tiles and several splits: spans that start and end inside
    blocks, empty spans, and the log-sum-exp merge."""
    specs = [(15, 1), (None, 1), (47, 1), (70, 1)]
    query, k_cache, v_cache, meta, *_ = make_batch(specs, 3, 1, 16, 16, dtype, device)
    out = decode_attention(query, k_cache, v_cache, meta.seq_lens, meta.block_tables, SCALE, num_splits, block_n=16)
    assert_close(out, expected(query, k_cache, v_cache, meta))


@pytest.mark.parametrize("device,dtype", DEVICES)
def test_decode_single_sequence_and_all_padded(device, dtype):
    query, k_cache, v_cache, meta, *_ = make_batch([(40, 1)], 8, 1, 32, 16, dtype, device)
    out = decode_attention(query, k_cache, v_cache, meta.seq_lens, meta.block_tables, SCALE, 4, block_n=16)
    assert_close(out, expected(query, k_cache, v_cache, meta))

    query, k_cache, v_cache, meta, *_ = make_batch([(None, 1), (None, 1)], 4, 2, 16, 16, dtype, device)
    out = TritonAttentionBackend().paged_attention(query, k_cache, v_cache, meta, SCALE)
    assert torch.equal(out, torch.zeros_like(out))


# --- prefill / extend -----------------------------------------------------------


@pytest.mark.parametrize("num_heads,num_kv_heads,block_size,head_dim,device,dtype", SHAPE_CASES)
def test_mixed_batch_through_backend(num_heads, num_kv_heads, block_size, head_dim, device, dtype):
    """Prefill from scratch, extend over a cached prefix, decode rows and a
    padded row in one ragged batch."""
    query, k_cache, v_cache, meta, *_ = make_batch(MIXED, num_heads, num_kv_heads, head_dim, block_size, dtype, device)
    out = TritonAttentionBackend().paged_attention(query, k_cache, v_cache, meta, SCALE)
    assert_close(out, expected(query, k_cache, v_cache, meta))


@pytest.mark.parametrize(
    "num_heads,num_kv_heads,device,dtype",
    cases([(3, 1, FP32), (8, 1, FP16)], [(9, 3, BF16), (8, 1, BF16)]),
)
def test_prefill_small_tiles(num_heads, num_kv_heads, device, dtype):
    """Many query and key tiles per sequence, so the causal diagonal crosses
    tile edges and query tiles split GQA groups' tokens."""
    specs = [(0, 24), (17, 15), (32, 1), (None, 0)]
    query, k_cache, v_cache, meta, *_ = make_batch(specs, num_heads, num_kv_heads, 16, 16, dtype, device)
    out = prefill_attention(
        query,
        k_cache,
        v_cache,
        meta.query_start_loc,
        meta.seq_lens,
        meta.block_tables,
        meta.max_query_len,
        SCALE,
        block_m=16,
        block_n=16,
    )
    assert_close(out, expected(query, k_cache, v_cache, meta))


@pytest.mark.parametrize("device,dtype", DEVICES)
def test_prefill_single_sequence(device, dtype):
    query, k_cache, v_cache, meta, *_ = make_batch([(0, 20)], 4, 2, 32, 16, dtype, device)
    out = TritonAttentionBackend().paged_attention(query, k_cache, v_cache, meta, SCALE)
    assert_close(out, expected(query, k_cache, v_cache, meta))


# --- the backend --------------------------------------------------------------


@pytest.mark.parametrize("device,dtype", DEVICES)
def test_backend_rotates_writes_then_attends(device, dtype):
    """rotary_write_kv then paged_attention, as a model layer calls them,
    against the reference backend doing the same."""
    query, k_cache, v_cache, meta, new_k, new_v = make_batch(MIXED, 4, 2, 16, 16, dtype, device)
    valid = meta.slot_mapping >= 0
    k_cache.view(-1, 2, 16)[meta.slot_mapping[valid]] = 0  # forget the new tokens
    v_cache.view(-1, 2, 16)[meta.slot_mapping[valid]] = 0
    angles = torch.rand(query.shape[0], 8, generator=torch.Generator().manual_seed(5)) * 6.3
    cos, sin = angles.cos().to(device), angles.sin().to(device)
    want_k, want_v = k_cache.clone(), v_cache.clone()
    want_q = torch_rotary.rotary_write_kv(query, new_k, new_v, cos, sin, want_k, want_v, meta.slot_mapping)
    backend = TritonAttentionBackend()
    got_q = backend.rotary_write_kv(query.clone(), new_k, new_v, cos, sin, k_cache, v_cache, meta)
    assert_close(got_q, want_q)
    assert_close(k_cache, want_k)
    assert_close(backend.paged_attention(got_q, k_cache, v_cache, meta, SCALE), expected(want_q, want_k, want_v, meta))


def test_backend_dispatch(monkeypatch):
    """Pure decode goes to the decode kernel, anything longer to prefill."""
    calls = []
    monkeypatch.setattr(attention_backend, "decode_attention", lambda *a, **k: calls.append("decode"))
    monkeypatch.setattr(attention_backend, "prefill_attention", lambda *a, **k: calls.append("prefill"))
    backend = TritonAttentionBackend()
    for specs in (DECODE, MIXED):
        query, k_cache, v_cache, meta, *_ = make_batch(specs, 4, 2, 16, 16, FP32, "cpu")
        backend.paged_attention(query, k_cache, v_cache, meta, SCALE)
    assert calls == ["decode", "prefill"]
    assert TritonAttentionBackend.name == "triton"


# --- GPU only: realistic shapes, CUDA graphs ------------------------------------


@pytest.mark.gpu
def test_get_backend_on_cuda_is_triton():
    from agentgate.engine.attention import get_backend

    assert get_backend("cuda").name == "triton"


@pytest.mark.gpu
@pytest.mark.parametrize("num_heads,num_kv_heads,head_dim", [(9, 3, 64), (16, 8, 128), (32, 4, 128)])
@pytest.mark.parametrize("block_size", [16, 32])
def test_realistic_shapes_cuda(num_heads, num_kv_heads, head_dim, block_size):
    backend = TritonAttentionBackend()
    decode = [(4095, 1), (4096, 1), (1, 1), (None, 1), (2047, 1), (513, 1), (0, 1), (3000, 1)]
    mixed = [(0, 1024), (3000, 96), (4095, 1), (512, 512), (None, 0), (31, 1)]
    for specs in (decode, mixed, [(0, 4096)]):
        query, k_cache, v_cache, meta, *_ = make_batch(
            specs, num_heads, num_kv_heads, head_dim, block_size, BF16, "cuda"
        )
        out = backend.paged_attention(query, k_cache, v_cache, meta, head_dim**-0.5)
        want = expected(query, k_cache, v_cache, meta, head_dim**-0.5)
        torch.testing.assert_close(out, want, atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
def test_decode_cuda_graph_replay():
    """Capture decode attention once; replay it with other seq_lens and block
    tables copied into the captured buffers, against the reference."""
    backend = TritonAttentionBackend()
    specs = [(100, 1), (4000, 1), (None, 1), (17, 1)]
    query, k_cache, v_cache, meta, *_ = make_batch(specs, 9, 3, 64, 16, BF16, "cuda")
    # Static buffers: a block table wide enough for 4096 tokens.
    tables = torch.zeros(len(specs), 4096 // 16, dtype=torch.int32, device="cuda")
    tables[:, : meta.block_tables.shape[1]] = meta.block_tables
    static = AttentionMetadata(
        slot_mapping=meta.slot_mapping,
        query_start_loc=meta.query_start_loc.clone(),
        seq_lens=meta.seq_lens.clone(),
        block_tables=tables,
        max_query_len=1,
        max_seq_len=4096,
        query_start_loc_cpu=meta.query_start_loc_cpu,
        seq_lens_cpu=meta.seq_lens_cpu,
    )
    static_q = query.clone()
    backend.paged_attention(static_q, k_cache, v_cache, static, 0.125)  # compile outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = backend.paged_attention(static_q, k_cache, v_cache, static, 0.125)

    rng = torch.Generator().manual_seed(3)
    num_blocks = k_cache.shape[0]
    for seq_lens in ([100, 4000, 0, 17], [4096, 1, 64, 0], [0, 0, 0, 0], [1500, 2049, 33, 4000]):
        new_tables = torch.randint(0, num_blocks, tables.shape, generator=rng, dtype=torch.int32)
        static.block_tables.copy_(new_tables)
        static.seq_lens.copy_(torch.tensor(seq_lens, dtype=torch.int32))
        static_q.copy_(torch.randn(static_q.shape, generator=rng))
        graph.replay()
        check = AttentionMetadata(
            slot_mapping=static.slot_mapping,
            query_start_loc=static.query_start_loc,
            seq_lens=static.seq_lens,
            block_tables=static.block_tables,
            max_query_len=1,
            max_seq_len=max(seq_lens),
            query_start_loc_cpu=static.query_start_loc_cpu,
            seq_lens_cpu=torch.tensor(seq_lens, dtype=torch.int32),
        )
        want = expected(static_q, k_cache, v_cache, check, 0.125)
        torch.testing.assert_close(static_out, want, atol=2e-2, rtol=2e-2)
