"""RoPE and the KV-cache write through the compiled CPU kernel (`NativeAttention.rotary_write_kv`):
bit for bit what the torch path (`torch_rotary.rotary_write_kv`) computes and writes, padding slots
left alone, and the torch path where the kernel does not take the inputs."""

import json

import pytest
import torch

from agentgate.engine.attention.base import AttentionMetadata
from agentgate.engine.attention.cpu_native import NativeAttention, load_native_attention
from agentgate.engine.attention.torch import TorchAttentionBackend
from agentgate.engine.attention.torch_rotary import rotary_write_kv
from agentgate.engine.layers.rope import rope_tables
from agentgate.engine.llm import LLM
from agentgate.engine.sampling_params import SamplingParams
from tests.engine.runner.conftest import TINY_LLAMA

BLOCKS, BLOCK_SIZE = 40, 16


@pytest.fixture(scope="module")
def native(tmp_path_factory) -> NativeAttention:
    kernel = load_native_attention(tmp_path_factory.mktemp("kernels"))
    assert kernel is not None, "cc builds the kernel on every machine the suite runs on"
    return kernel


def _step(tokens: int, heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype, seed: int):
    """A step's fused q/k/v projection split into heads (strided views, as the model passes them),
    RoPE rows at random positions, and slots of which every third from the second is padding (-1)."""
    generator = torch.Generator().manual_seed(seed)
    fused = (torch.randn(tokens, heads + 2 * kv_heads, head_dim, generator=generator) * 4).to(dtype)
    query, key, value = fused.split([heads, kv_heads, kv_heads], dim=1)
    cos_table, sin_table = rope_tables(head_dim, 8192, 10000.0, device="cpu")
    positions = torch.randint(0, 8192, (tokens,), generator=generator)
    slots = torch.randperm(BLOCKS * BLOCK_SIZE, generator=generator)[:tokens]
    slots[1::3] = -1
    return query, key, value, cos_table[positions], sin_table[positions], slots


def _caches(kv_heads: int, head_dim: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    shape = (BLOCKS, BLOCK_SIZE, kv_heads, head_dim)
    return torch.full(shape, 7.0, dtype=dtype), torch.full(shape, -7.0, dtype=dtype)


@pytest.mark.parametrize(
    ("dtype", "cache_dtype"), [(torch.float32,) * 2, (torch.bfloat16,) * 2, (torch.float32, torch.bfloat16)]
)
@pytest.mark.parametrize(("heads", "kv_heads", "head_dim"), [(9, 3, 64), (4, 4, 32), (8, 1, 128)])
@pytest.mark.parametrize("tokens", [1, 7, 100])  # 100: past the kernel's threading threshold
def test_the_kernel_rotates_and_writes_the_bits_of_the_torch_path(
    native, dtype, cache_dtype, heads, kv_heads, head_dim, tokens
):
    query, key, value, cos, sin, slots = _step(tokens, heads, kv_heads, head_dim, dtype, seed=tokens + head_dim)
    torch_k, torch_v = _caches(kv_heads, head_dim, cache_dtype)
    kernel_k, kernel_v = _caches(kv_heads, head_dim, cache_dtype)
    expected = rotary_write_kv(query, key, value, cos, sin, torch_k, torch_v, slots)
    assert native.takes_rotary(query, key, value, cos)
    got = native.rotary_write_kv(query, key, value, cos, sin, kernel_k, kernel_v, slots)
    assert got.dtype == dtype and torch.equal(got, expected)
    assert torch.equal(kernel_k, torch_k) and torch.equal(kernel_v, torch_v)  # padding slots untouched in both
    written = kernel_k.view(-1, kv_heads, head_dim)[slots[slots >= 0]]
    assert not (written == 7.0).all(dim=(1, 2)).any()  # every token given a slot was written


def _meta(slots: torch.Tensor) -> AttentionMetadata:
    tokens = slots.shape[0]
    starts, lens = torch.tensor([0, tokens], dtype=torch.int32), torch.tensor([tokens], dtype=torch.int32)
    return AttentionMetadata(
        slot_mapping=slots,
        query_start_loc=starts,
        seq_lens=lens,
        block_tables=torch.arange(BLOCKS, dtype=torch.int32)[None],
        max_query_len=tokens,
        max_seq_len=tokens,
        query_start_loc_cpu=starts.clone(),
        seq_lens_cpu=lens.clone(),
        padded=bool((slots < 0).any()),
    )


def test_the_backend_uses_the_kernel_and_keeps_the_torch_path_for_what_it_does_not_take(native, monkeypatch):
    """A float32 step goes through the kernel; a float16 one (a dtype the kernel does not read)
    through the torch path, with the torch path's result."""
    backend = TorchAttentionBackend()
    backend.use_native_kernels(native)
    calls = []
    original = native.rotary_write_kv
    monkeypatch.setattr(native, "rotary_write_kv", lambda *args: calls.append(1) or original(*args))
    for dtype, through_kernel in ((torch.float32, True), (torch.float16, False)):
        query, key, value, cos, sin, slots = _step(9, 9, 3, 64, dtype, seed=3)
        k_cache, v_cache = _caches(3, 64, dtype)
        expected_k, expected_v = _caches(3, 64, dtype)
        expected = rotary_write_kv(query, key, value, cos, sin, expected_k, expected_v, slots)
        calls.clear()
        got = backend.rotary_write_kv(query, key, value, cos, sin, k_cache, v_cache, _meta(slots))
        assert bool(calls) is through_kernel
        assert torch.equal(got, expected) and torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)


def test_an_engine_on_the_kernels_decodes_greedy_tokens_the_torch_rotary_path_decodes(tmp_path, monkeypatch):
    """Whole model, both ways: the kernels' RoPE and cache write against the torch path's (the
    decode attention kernel in both), greedy, the same tokens."""
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    llm = LLM(str(tmp_path), load_format="dummy", dtype="float32", cpu_attention="auto", cache_dir=str(tmp_path))
    params = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
    prompts = [[1, 5, 9, 13], [2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34]]
    through_kernels = [out.token_ids for out in llm.generate(prompts, params)]
    monkeypatch.setattr(NativeAttention, "takes_rotary", staticmethod(lambda *args: False))
    through_torch = [out.token_ids for out in llm.generate(prompts, params)]
    assert through_kernels == through_torch and all(len(ids) == 12 for ids in through_kernels)
