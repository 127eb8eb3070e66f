"""--speculative auto drafts only where the decode linears give a row the same bits in any batch
here (engine.kernel_choice.decode_exactness): which modules are checked, what the check reports, that a
verdict is remembered, and that a batch-dependent linear turns auto off with a log line."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from agentgate.engine.config import EngineConfig
from agentgate.engine.core import EngineCore
from agentgate.engine.core_parts import make_speculator
from agentgate.engine.kernel_choice.decode_exactness import batch_dependent_decode_linears, decode_linears
from agentgate.engine.kernel_choice.row_choice import RowChosenLinear
from agentgate.engine.layers.batch_invariant import RowInvariantLinear
from agentgate.engine.layers.cpu_linear import PackedLinear
from agentgate.engine.layers.quant_linear import Int4Linear, kernels_work
from agentgate.engine.layers.quantized import quantize_int4


class BatchDependentLinear(nn.Linear):
    """A linear whose rows move by a little with the batch's size, as a BLAS's blocking does."""

    calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        type(self).calls += 1
        return super().forward(x) + 1e-3 * (x.shape[0] > 3)


@pytest.mark.skipif(
    not torch.ops.mkldnn._is_mkldnn_bf16_supported(),
    reason="this CPU has no oneDNN bf16 path (avx512bw/vl/dq or avx_ne_convert), which the dense form needs",
)
def test_the_decode_linears_are_a_row_chosen_linears_quantized_form_and_plain_linears():
    weight = torch.randn(96, 64, generator=torch.Generator().manual_seed(0))
    quantized = Int4Linear(quantize_int4(weight))
    chosen = RowChosenLinear(quantized, PackedLinear(quantized.dense_weight(torch.bfloat16), None), crossover=8)
    plain = nn.Linear(64, 32)
    model = nn.Sequential(nn.Embedding(10, 64), chosen, nn.Sequential(plain))
    assert [id(m) for m in decode_linears(model)] == [id(quantized), id(plain)]


def test_a_linear_whose_rows_depend_on_the_batch_is_named_and_the_verdict_is_remembered(tmp_path):
    model = nn.Sequential(BatchDependentLinear(64, 32), RowInvariantLinear(nn.Linear(32, 16), "per row"))
    BatchDependentLinear.calls = 0
    found = batch_dependent_decode_linears(model, torch.float32, rows=8, cache_dir=tmp_path)
    assert found == ["BatchDependentLinear 64x32"]
    checked = BatchDependentLinear.calls
    assert checked > 0
    # Remembered under the cache directory: a second start checks nothing.
    assert batch_dependent_decode_linears(model, torch.float32, rows=8, cache_dir=tmp_path) == found
    assert BatchDependentLinear.calls == checked
    # --remeasure checks again.
    assert batch_dependent_decode_linears(model, torch.float32, rows=8, cache_dir=tmp_path, remeasure=True) == found
    assert BatchDependentLinear.calls > checked


@pytest.mark.skipif(not kernels_work(), reason="needs the int4 weight-only kernel")
def test_the_int4_kernel_gives_a_row_the_same_bits_in_any_batch_here(tmp_path):
    """What --speculative auto's default rests on, for the default model's projection shapes."""
    generator = torch.Generator().manual_seed(3)
    model = nn.Sequential(
        *(
            Int4Linear(quantize_int4(torch.randn(out, inp, generator=generator)))
            for inp, out in ((576, 1536), (1536, 576))
        )
    )
    assert batch_dependent_decode_linears(model, torch.bfloat16, rows=28, cache_dir=tmp_path) == []


def test_auto_drafts_nothing_where_a_decode_linear_depends_on_the_batch(caplog):
    config = EngineConfig(device="cpu", speculative="auto")
    assert make_speculator(config) is not None
    with caplog.at_level(logging.WARNING, logger="agentgate.engine"):
        assert make_speculator(config, ("PackedLinear 576x1536",)) is None
    assert "speculative auto: off" in caplog.text and "PackedLinear 576x1536" in caplog.text
    # Asked for by name, drafts are the user's choice: they run anyway.
    assert make_speculator(EngineConfig(device="cpu", speculative="suffix"), ("PackedLinear 576x1536",)) is not None


def test_the_default_model_here_drafts_by_default_exactly_when_its_decode_linears_pass():
    core = EngineCore(EngineConfig(max_model_len=256, num_kv_blocks=32, max_num_seqs=4))
    try:
        assert core.config.speculative is None  # the default: auto on the CPU
        assert (core.scheduler.speculator is None) == bool(core.runner.batch_dependent_decode)
    finally:
        core.shutdown()
