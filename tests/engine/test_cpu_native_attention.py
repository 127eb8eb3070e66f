"""The compiled CPU decode attention (`engine.attention.cpu_native`): the attention of dense causal
attention, each row's bits its own whatever the batch and threads, built once per cache directory,
and the torch path where it cannot be built; an engine takes it under --cpu-attention auto only."""

import json
import logging

import pytest
import torch

from agentgate.engine.attention.cpu_native import NativeAttention, load_native_attention
from agentgate.engine.attention.torch import TorchAttentionBackend
from agentgate.engine.attention.torch_rotary import write_kv
from agentgate.engine.config import EngineConfig
from agentgate.engine.errors import InvalidRequestError
from agentgate.engine.llm import LLM
from agentgate.engine.sampling_params import SamplingParams
from tests.engine.runner.conftest import TINY_LLAMA
from tests.engine.test_attention_torch import build_batch, dense_causal


@pytest.fixture(scope="module")
def native(tmp_path_factory) -> NativeAttention:
    kernel = load_native_attention(tmp_path_factory.mktemp("kernels"))
    assert kernel is not None, "cc builds the kernel on every machine the suite runs on"
    return kernel


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("num_heads", "num_kv_heads", "head_dim"), [(9, 3, 64), (4, 4, 32), (8, 1, 128)])
def test_decode_rows_of_a_mixed_batch_match_dense_causal_attention(native, dtype, num_heads, num_kv_heads, head_dim):
    """Prefill, extend and decode rows at block edges, one step: the decode rows through the kernel
    (the prompt rows through SDPA), every row equal to dense causal attention over its context."""
    specs = [(0, 7), (5, 1), (16, 1), (31, 1), (15, 1), (47, 3), (1, 1)]
    b = build_batch(specs, num_heads, num_kv_heads, head_dim, block_size=16)
    k_cache, v_cache = b["k_cache"].to(dtype), b["v_cache"].to(dtype)
    write_kv(b["new_k"].to(dtype), b["new_v"].to(dtype), k_cache, v_cache, b["meta"].slot_mapping)
    backend = TorchAttentionBackend()
    backend.use_native_kernels(native)
    out = backend.paged_attention(b["query"].to(dtype), k_cache, v_cache, b["meta"], 0.125)
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    start = 0
    for q, k, v in zip(b["queries"], b["full_k"], b["full_v"]):
        expect = dense_causal(q.to(dtype).float(), k.to(dtype).float(), v.to(dtype).float(), 0.125)
        torch.testing.assert_close(out[start : start + len(q)].float(), expect, atol=tolerance, rtol=tolerance)
        start += len(q)


def _decode_batch(rows: int, seed: int, dtype: torch.dtype = torch.float32):
    """Decode rows over contexts of 1 to 300 tokens in shuffled blocks of 16."""
    generator = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, 301, (rows,), generator=generator, dtype=torch.int32)
    blocks = -(-int(lens.max()) // 16)
    k_cache = torch.randn(rows * blocks + 4, 16, 3, 64, generator=generator).to(dtype)
    v_cache = torch.randn(rows * blocks + 4, 16, 3, 64, generator=generator).to(dtype)
    tables = torch.randperm(rows * blocks + 4, generator=generator)[: rows * blocks].view(rows, blocks).int()
    query = torch.randn(rows, 9, 64, generator=generator).to(dtype)
    return query, k_cache, v_cache, tables, lens


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_rows_bits_are_its_own_alone_in_any_batch_order_and_thread_count(native, dtype):
    """What speculation's exactness and --deterministic rest on: a row's result depends on its query
    and context alone. Each row alone, at one thread, against the whole batch, reversed, at two."""
    query, k_cache, v_cache, tables, lens = _decode_batch(24, seed=7, dtype=dtype)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        batched = native(query, k_cache, v_cache, tables, lens, int(lens.max()), 0.125)
        reverse = torch.arange(len(lens) - 1, -1, -1)
        reversed_ = native(query[reverse], k_cache, v_cache, tables[reverse], lens[reverse], int(lens.max()), 0.125)
        torch.set_num_threads(1)
        for i in range(len(lens)):
            alone = native(query[i : i + 1], k_cache, v_cache, tables[i : i + 1], lens[i : i + 1], int(lens[i]), 0.125)
            assert torch.equal(alone[0], batched[i]), i
            assert torch.equal(reversed_[len(lens) - 1 - i], batched[i]), i
    finally:
        torch.set_num_threads(threads)


def test_a_bfloat16_query_gives_the_bits_of_its_float32_widening_rounded_once(native):
    """The kernel reads a bfloat16 query as it is and writes its output in bfloat16: the bits of the
    float32 query (exactly the same values) through the float32 path, rounded with torch's .to()."""
    query, k_cache, v_cache, tables, lens = _decode_batch(9, seed=13, dtype=torch.bfloat16)
    lens[4] = 0  # an empty row: bfloat16 zeros
    direct = native(query, k_cache, v_cache, tables, lens, int(lens.max()), 0.125)
    widened = native(query.float(), k_cache, v_cache, tables, lens, int(lens.max()), 0.125)
    assert direct.dtype == torch.bfloat16 and widened.dtype == torch.float32
    assert torch.equal(direct, widened.to(torch.bfloat16)) and direct[4].eq(0).all()


def test_empty_rows_get_zeros_and_their_neighbours_their_attention(native):
    query, k_cache, v_cache, tables, lens = _decode_batch(4, seed=3)
    whole = native(query, k_cache, v_cache, tables, lens, int(lens.max()), 0.125)
    lens[1] = 0
    padded = native(query, k_cache, v_cache, tables, lens, int(lens.max()), 0.125)
    assert padded[1].eq(0).all()
    assert torch.equal(padded[[0, 2, 3]], whole[[0, 2, 3]])


def test_a_context_longer_than_the_bound_given_is_an_error_not_a_read_past_the_scratch(native):
    query, k_cache, v_cache, tables, lens = _decode_batch(3, seed=5)
    with pytest.raises(RuntimeError, match="kernel failed"):
        native(query, k_cache, v_cache, tables, lens, int(lens.max()) - 1, 0.125)


def test_built_once_per_cache_directory_then_loaded(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="agentgate.engine"):
        first = load_native_attention(tmp_path)
    assert first is not None and "compiled the CPU kernel" in caplog.text
    built = first.path.stat().st_mtime_ns
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="agentgate.engine"):
        again = load_native_attention(tmp_path)
    assert again is not None and again.path == first.path and again.path.stat().st_mtime_ns == built
    assert "compiled" not in caplog.text
    assert [p.name for p in (tmp_path / "kernels").iterdir()] == [first.path.name]  # no temporaries left


def test_without_a_compiler_the_torch_path_runs_and_the_log_says_why(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with caplog.at_level(logging.INFO, logger="agentgate.engine"):
        assert load_native_attention(tmp_path) is None
    assert "the torch path (no C compiler" in caplog.text


def test_a_compiler_that_fails_leaves_the_torch_path_and_its_error(tmp_path, monkeypatch, caplog):
    failing = tmp_path / "failing-cc"
    failing.write_text('#!/bin/sh\n[ "$1" = --version ] && { echo failing-cc 1.0; exit 0; }\necho broken >&2\nexit 3\n')
    failing.chmod(0o755)
    monkeypatch.setenv("CC", str(failing))
    with caplog.at_level(logging.INFO, logger="agentgate.engine"):
        assert load_native_attention(tmp_path) is None
    assert "did not build or load" in caplog.text and "broken" in caplog.text
    assert not list((tmp_path / "kernels").iterdir())


@pytest.mark.parametrize(
    ("dtype", "heads", "kv_heads", "head_dim", "reason"),
    [
        (torch.float16, 9, 3, 64, "float16"),
        (torch.float32, 8, 8, 72, "head_dim 72"),
        (torch.float32, 9, 2, 64, "9 query heads over 2"),
    ],
)
def test_shapes_it_cannot_take_say_why(dtype, heads, kv_heads, head_dim, reason):
    assert reason in NativeAttention.unsupported(dtype, heads, kv_heads, head_dim)
    assert NativeAttention.unsupported(torch.float32, 9, 3, 64) is None


def test_an_unknown_cpu_attention_is_refused():
    with pytest.raises(InvalidRequestError, match="cpu_attention"):
        EngineConfig(cpu_attention="fast")


@pytest.mark.parametrize(
    ("mode", "deterministic", "native_expected"), [("auto", False, True), ("torch", False, False), ("auto", True, True)]
)
def test_the_engine_takes_the_kernel_under_auto_only_and_decodes(tmp_path, mode, deterministic, native_expected):
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    llm = LLM(
        str(tmp_path),
        load_format="dummy",
        dtype="float32",
        cpu_attention=mode,
        cache_dir=str(tmp_path),
        deterministic=deterministic,
    )
    attention = llm.core.runner.model.attention
    assert (attention.native is not None) is native_expected
    assert attention.name == ("torch-batch-invariant" if deterministic else "torch")
    assert attention.reads_shared_prefix is not (native_expected or deterministic)
    [out] = llm.generate([[1, 5, 9, 13]], SamplingParams(max_tokens=6, temperature=0, ignore_eos=True))
    assert len(out.token_ids) == 6


def test_under_deterministic_a_prompt_token_computes_the_bits_of_the_same_token_decoded(native):
    """`BatchInvariantTorchBackend` with the kernel: every query token a row of its own. One sequence's
    7 prompt tokens and the same context's last token decoded (a prefix-cache hit) in one step give
    that token the same bits, and every token dense causal attention's values."""
    from agentgate.engine.attention.base import AttentionMetadata
    from agentgate.engine.attention.batch_invariant import BatchInvariantTorchBackend

    generator = torch.Generator().manual_seed(11)
    k_cache, v_cache = torch.zeros(4, 4, 3, 64), torch.zeros(4, 4, 3, 64)
    keys, values = torch.randn(7, 3, 64, generator=generator), torch.randn(7, 3, 64, generator=generator)
    table = torch.tensor([2, 0], dtype=torch.int32)
    write_kv(keys, values, k_cache, v_cache, torch.tensor([8, 9, 10, 11, 0, 1, 2]))
    prompt = torch.randn(7, 9, 64, generator=generator)
    query = torch.cat([prompt, prompt[-1:]])
    starts, lens = torch.tensor([0, 7, 8], dtype=torch.int32), torch.tensor([7, 7], dtype=torch.int32)
    meta = AttentionMetadata(
        slot_mapping=torch.full((8,), -1),
        query_start_loc=starts,
        seq_lens=lens,
        block_tables=torch.stack([table, table]),
        max_query_len=7,
        max_seq_len=7,
        query_start_loc_cpu=starts.clone(),
        seq_lens_cpu=lens.clone(),
    )
    backend = BatchInvariantTorchBackend()
    backend.use_native_kernels(native)
    out = backend.paged_attention(query, k_cache, v_cache, meta, 0.125)
    assert torch.equal(out[6], out[7])
    torch.testing.assert_close(out[:7], dense_causal(prompt, keys, values, 0.125), atol=1e-5, rtol=1e-5)


def test_drafted_rows_of_a_large_step_take_the_kernel_one_token_a_row(native, monkeypatch):
    """A step past the small-step bound (`engine.step_rows`) with drafted decode rows: with the
    kernel each drafted token is a decode row of its own, not a prompt-row SDPA call per sequence,
    and every token gets dense causal attention over its context."""
    from agentgate.engine.attention import torch as torch_attention
    from agentgate.engine.step_rows import decode_rows

    prompt_calls = []
    original = torch_attention.prompt_attention
    monkeypatch.setattr(torch_attention, "prompt_attention", lambda *a: prompt_calls.append(1) or original(*a))
    specs = [(20 + i, 3) for i in range(6)] + [(0, 9)]  # six requests with two drafts each, then a prompt
    b = build_batch(specs, 9, 3, 64, block_size=16)
    write_kv(b["new_k"], b["new_v"], b["k_cache"], b["v_cache"], b["meta"].slot_mapping)
    backend = TorchAttentionBackend()
    backend.use_native_kernels(native)
    with decode_rows(18):  # no request count said: not a small step
        out = backend.paged_attention(b["query"], b["k_cache"], b["v_cache"], b["meta"], 0.125)
    assert len(prompt_calls) == 1, "only the prompt goes through SDPA"
    start = 0
    for q, k, v in zip(b["queries"], b["full_k"], b["full_v"]):
        torch.testing.assert_close(out[start : start + len(q)], dense_causal(q, k, v, 0.125), atol=1e-5, rtol=1e-5)
        start += len(q)
