"""The attention kernels' matrix products in fp32 are fp32 (``input_precision="ieee"``), not the
TF32 that Triton's ``tl.dot`` defaults to on a GPU: the fp32 exactness tests on CUDA then compare
kernels of the same arithmetic as the CPU's. Seen here through the interpreter, which receives
each ``tl.dot``'s precision (and computes full fp32 whatever it is)."""

from __future__ import annotations

import os

import pytest
import torch
from triton._C.libtriton import ir
from triton.runtime import interpreter

from agentgate.engine.kernels.decode_attention import decode_attention
from agentgate.engine.kernels.prefill_attention import prefill_attention

pytestmark = [
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="reads the interpreter's dot calls"),
    # The interpreter log-sum-exps empty decode spans on purpose (log2(0) = -inf).
    pytest.mark.filterwarnings("ignore:divide by zero encountered in log2"),
]

BLOCK, HEADS, KV_HEADS, DIM = 16, 4, 2, 16


@pytest.fixture
def dot_precisions(monkeypatch) -> list:
    """The ``input_precision`` of every ``tl.dot`` the interpreter runs from now on."""
    seen = []
    create_dot = interpreter.InterpreterBuilder.create_dot

    def recording(self, a, b, d, input_precision, max_num_imprecise_acc):
        seen.append(input_precision)
        return create_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_dot", recording)
    return seen


def run_both_kernels(dtype: torch.dtype) -> None:
    """One decode and one prefill call over a two-block cache of ``dtype``."""
    torch.manual_seed(0)
    k_cache = torch.randn(2, BLOCK, KV_HEADS, DIM, dtype=dtype)
    v_cache = torch.randn_like(k_cache)
    tables = torch.tensor([[0, 1]], dtype=torch.int32)
    seq_lens = torch.tensor([20], dtype=torch.int32)
    decode_attention(torch.randn(1, HEADS, DIM, dtype=dtype), k_cache, v_cache, seq_lens, tables, 0.25, 1)
    starts = torch.tensor([0, 5], dtype=torch.int32)
    prefill_attention(torch.randn(5, HEADS, DIM, dtype=dtype), k_cache, v_cache, starts, seq_lens, tables, 5, 0.25)


@pytest.mark.parametrize(
    ("dtype", "precision"),
    [(torch.float32, ir.INPUT_PRECISION.IEEE), (torch.float16, ir.INPUT_PRECISION.TF32)],
)
def test_fp32_dots_are_ieee_and_half_dots_keep_the_default(dot_precisions, dtype, precision):
    run_both_kernels(dtype)
    # Decode: two dots per key tile (one tile of 20 keys at BLOCK_N 64); prefill: two per tile too.
    assert len(dot_precisions) >= 4
    assert set(dot_precisions) == {precision}
