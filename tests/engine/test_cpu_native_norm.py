"""RMSNorm with its residual add through the compiled CPU kernel (`engine.layers.native_norm`): the
torch path's numbers (the residual sum bit for bit, the norm within a few roundings: only the sum
of squares runs in another order), each row's bits its own, the torch path for what it does
not take, and an engine under --cpu-attention auto that runs every norm through it."""

import json

import pytest
import torch

from agentgate.engine.attention.cpu_native import load_native_attention
from agentgate.engine.layers.native_norm import NativeRMSNorm
from agentgate.engine.layers.norm import RMSNorm, rms_norm
from agentgate.engine.llm import LLM
from agentgate.engine.sampling_params import SamplingParams
from tests.engine.runner.conftest import TINY_LLAMA


@pytest.fixture(scope="module")
def norm(tmp_path_factory) -> NativeRMSNorm:
    kernels = load_native_attention(tmp_path_factory.mktemp("kernels"))
    assert kernels is not None, "cc builds the kernels on every machine the suite runs on"
    return NativeRMSNorm(kernels.library)


def _inputs(rows: int, dim: int, dtype: torch.dtype, seed: int):
    generator = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, dim, generator=generator) * 3).to(dtype)
    residual = (torch.randn(rows, dim, generator=generator) * 3).to(dtype)
    weight = (torch.rand(dim, generator=generator) + 0.5).to(dtype)
    return x, residual, weight


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("rows", "dim"), [(1, 576), (16, 576), (100, 64), (3, 2048)])
@pytest.mark.parametrize("with_residual", [True, False])
def test_the_kernel_computes_the_torch_paths_norm(norm, dtype, rows, dim, with_residual):
    x, residual, weight = _inputs(rows, dim, dtype, seed=rows + dim)
    residual = residual if with_residual else None
    expected, expected_sum = rms_norm(x, weight, torch.tensor(1e-5), residual, torch.tensor(float(dim)))
    assert norm.takes(x, weight, residual)
    got, got_sum = norm(x, weight, 1e-5, residual)
    assert got.dtype == dtype and torch.equal(got_sum, expected_sum)  # the residual stream: bit for bit
    # Only the sum of squares runs in another order: rstd a float32 rounding apart, the norm a few
    # roundings of the dtype at most.
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(got.float(), expected.float(), rtol=4 * eps, atol=4 * eps)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_rows_bits_are_its_own_alone_or_among_many_and_at_any_thread_count(norm, dtype):
    x, residual, weight = _inputs(130, 576, dtype, seed=5)  # 130 rows: the kernel's threaded path
    together, summed = norm(x, weight, 1e-5, residual)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one_thread, _ = norm(x, weight, 1e-5, residual)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(together, one_thread)
    for row in (0, 64, 129):
        alone, alone_sum = norm(x[row : row + 1].clone(), weight, 1e-5, residual[row : row + 1].clone())
        assert torch.equal(alone, together[row : row + 1]) and torch.equal(alone_sum, summed[row : row + 1])


def test_the_module_keeps_the_torch_path_for_what_the_kernel_does_not_take(norm, monkeypatch):
    """A float16 input, a row of 40 values and a strided view go through the torch path, with its result."""
    calls = []
    monkeypatch.setattr(NativeRMSNorm, "__call__", lambda self, *args: calls.append(args))
    for x in (
        torch.randn(2, 64).half(),
        torch.randn(2, 40),
        torch.randn(4, 128)[:, :64],
    ):
        module = RMSNorm(x.shape[-1], 1e-5).to(x.dtype)
        expected = module(x)
        module.use_native(norm)
        assert torch.equal(module(x), expected)
    assert not calls


def test_an_engine_under_auto_runs_its_norms_through_the_kernel_and_under_torch_does_not(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    for mode, native in (("auto", True), ("torch", False)):
        llm = LLM(str(tmp_path), load_format="dummy", dtype="float32", cpu_attention=mode, cache_dir=str(tmp_path))
        norms = [m for m in llm.core.runner.model.modules() if isinstance(m, RMSNorm)]
        assert len(norms) == 2 * TINY_LLAMA["num_hidden_layers"] + 1
        assert all((m._native is not None) is native for m in norms)
        [out] = llm.generate([[1, 5, 9, 13]], SamplingParams(max_tokens=6, temperature=0, ignore_eos=True))
        assert len(out.token_ids) == 6
