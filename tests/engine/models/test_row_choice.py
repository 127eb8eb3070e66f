"""Quantized linears that give large batches to a dense bf16 copy (``--batched-matmul``): the call
picks by rows, the crossover is measured once and remembered, the weights the loader kept are
released whatever the choice, and a decode step is still counted as reading the quantized form."""

from __future__ import annotations

import json

import pytest
import torch

from agentgate.engine.config import EngineConfig
from agentgate.engine.core import EngineCore
from agentgate.engine.kernel_choice import row_choice as rc
from agentgate.engine.layers.cpu_linear import PackedLinear, can_pack
from agentgate.engine.layers.quant_linear import Int4Linear, kernels_work
from agentgate.engine.layers.quantized import quantize_int4
from agentgate.engine.loaders import load_model
from agentgate.engine.loaders.quantization import describe
from agentgate.engine.step_rows import decode_rows
from tests.support.tiny_models import tiny_llama_dir

pytestmark = pytest.mark.skipif(
    not (kernels_work() and can_pack(torch.bfloat16)), reason="needs the int4 kernel and packed bf16 matmuls"
)


def tiny_int4(tmp_path):
    return load_model(str(tiny_llama_dir(tmp_path)), load_format="dummy", dtype="bfloat16", quantization="int4")


def test_each_call_takes_the_form_its_rows_ask_for():
    weight = torch.randn(96, 64, generator=torch.Generator().manual_seed(0))
    quantized = Int4Linear(quantize_int4(weight))
    dense = PackedLinear(quantized.dense_weight(torch.bfloat16), None)
    linear = rc.RowChosenLinear(quantized, dense, crossover=8)
    few, many = torch.randn(7, 64).bfloat16(), torch.randn(8, 64).bfloat16()
    assert torch.equal(linear(few), quantized(few)) and not torch.equal(linear(few), dense(few))
    assert torch.equal(linear(many), dense(many))
    # The dense copy is the quantized weight itself, rounded once to bf16.
    want = quantized(many).float()
    torch.testing.assert_close(dense(many).float(), want, rtol=2e-2, atol=1e-2 * float(want.abs().max()))


def test_prompt_rows_take_the_prompt_form_whatever_their_count_and_decode_rows_go_by_theirs():
    """Within ``decode_rows(d)``: the first d rows decode (quantized below the crossover), the rest are
    a prompt's, dense even when few (a cached prompt's last tokens compute as the whole prompt did)."""
    weight = torch.randn(96, 64, generator=torch.Generator().manual_seed(1))
    quantized = Int4Linear(quantize_int4(weight))
    dense = PackedLinear(quantized.dense_weight(torch.bfloat16), None)
    linear = rc.RowChosenLinear(quantized, dense, crossover=8)
    x = torch.randn(12, 64, generator=torch.Generator().manual_seed(2)).bfloat16()
    with decode_rows(0):
        assert torch.equal(linear(x[:3]), linear.prompt(x[:3]))
    with decode_rows(3):
        assert torch.equal(linear(x), torch.cat((quantized(x[:3]), linear.prompt(x[3:]))))
    with decode_rows(10):  # 10 decode rows: past the crossover, dense
        assert torch.equal(linear(x), torch.cat((dense(x[:10]), linear.prompt(x[10:]))))
    with decode_rows(12):
        assert torch.equal(linear(x), dense(x))
    assert torch.equal(linear(x[:3]), quantized(x[:3]))  # rows nobody described go by their count


def test_the_crossover_is_measured_once_then_remembered(tmp_path, monkeypatch):
    measured = []
    monkeypatch.setattr(rc, "_measure", lambda layer: measured.append(len(layer)) or (16, 0.0))
    first = tiny_int4(tmp_path).model
    choice = rc.choose_by_rows(first, torch.bfloat16, cache_dir=tmp_path / "cache")
    assert choice.crossover == 16 and choice.how == "measured, spread 0%" and measured == [4]  # qkv, o, gate_up, down
    chosen = [m for m in first.modules() if isinstance(m, rc.RowChosenLinear)]
    assert len(chosen) == 2 * 4 + 1 and all(m.crossover == 16 for m in chosen)  # every projection, the LM head
    assert choice.dense_bytes == sum(2 * m.in_features * m.out_features for m in chosen)
    again = rc.choose_by_rows(tiny_int4(tmp_path).model, torch.bfloat16, cache_dir=tmp_path / "cache")
    assert again.crossover == 16 and again.how == "remembered" and measured == [4]
    entries = json.loads((tmp_path / "cache" / "row_choice.json").read_text())
    assert [e["value"] for k, e in entries.items() if k.startswith("crossover|")] == [16]


def test_no_copy_where_dense_never_wins_and_the_kept_weights_are_released(tmp_path, monkeypatch):
    monkeypatch.setattr(rc, "_measure", lambda layer: (None, 0.0))
    model = tiny_int4(tmp_path).model
    choice = rc.choose_by_rows(model, torch.bfloat16, cache_dir=tmp_path)
    assert choice.crossover is None and choice.dense_bytes == 0 and "never faster" in choice.describe()
    assert not any(isinstance(m, rc.RowChosenLinear) for m in model.modules())
    with pytest.raises(RuntimeError, match="released"):
        model.layers[0].mlp.down_proj.dense_weight(torch.bfloat16)


def test_a_decode_step_still_reads_the_quantized_bytes(tmp_path, monkeypatch):
    monkeypatch.setattr(rc, "_measure", lambda layer: (4, 0.0))
    plain, chosen = tiny_int4(tmp_path).model, tiny_int4(tmp_path).model
    rc.choose_by_rows(chosen, torch.bfloat16, cache_dir=tmp_path)
    assert describe(chosen) == describe(plain)
    assert describe(chosen, rows=3) == describe(plain, rows=3)


def test_a_batch_from_the_crossover_reads_the_dense_copies(tmp_path, monkeypatch):
    monkeypatch.setattr(rc, "_measure", lambda layer: (4, 0.0))
    chosen = tiny_int4(tmp_path).model
    rc.choose_by_rows(chosen, torch.bfloat16, cache_dir=tmp_path)
    copies = [m.dense for m in chosen.modules() if isinstance(m, rc.RowChosenLinear)]
    quantized = [m.quantized for m in chosen.modules() if isinstance(m, rc.RowChosenLinear)]
    assert copies
    below, at = describe(chosen, rows=3)[1], describe(chosen, rows=4)[1]
    dense_bytes = sum(2 * m.out_features * m.in_features for m in copies)
    assert at - below == dense_bytes - sum(m.nbytes for m in quantized) > 0


@pytest.mark.parametrize(
    "options,expect_copies",
    [
        ({}, True),
        ({"batched_matmul": "quantized"}, False),
        ({"deterministic": True}, False),
        ({"dtype": "float32"}, False),
    ],
)
def test_the_engine_keeps_copies_by_default_only(tmp_path, monkeypatch, options, expect_copies):
    monkeypatch.setattr(rc, "_measure", lambda layer: (4, 0.0))
    config = EngineConfig(
        model=str(tiny_llama_dir(tmp_path)),
        load_format="dummy",
        quantization="int4",
        num_kv_blocks=64,
        max_model_len=128,
        cache_dir=str(tmp_path / "cache"),
        **({"dtype": "bfloat16"} | options),
    )
    core = EngineCore(config)
    try:
        model = core.runner.model
        assert any(isinstance(m, rc.RowChosenLinear) for m in model.modules()) == expect_copies
        assert ("dense bf16 from 4" in core.runner.weights) == expect_copies
        quantized = [m for m in model.modules() if isinstance(m, Int4Linear)]
        assert quantized and all(m._weight is None for m in quantized)  # nothing kept beyond loading
    finally:
        core.shutdown()


@pytest.mark.parametrize("cached", ['{"k": 1}', "[1, 2]", "not json"])
def test_a_cache_file_that_is_not_ours_means_measuring_again(tmp_path, monkeypatch, cached):
    monkeypatch.setattr(rc, "_measure", lambda layer: (32, 0.0))
    (tmp_path / "row_choice.json").write_text(cached)
    choice = rc.choose_by_rows(tiny_int4(tmp_path).model, torch.bfloat16, cache_dir=tmp_path)
    assert choice.crossover == 32 and choice.how == "measured, spread 0%"


def test_a_model_already_chosen_is_left_as_it_is(tmp_path, monkeypatch):
    """A model loaded once and handed to a second runner: its linears keep the one copy they got."""
    monkeypatch.setattr(rc, "_measure", lambda layer: (16, 0.0))
    model = tiny_int4(tmp_path).model
    rc.choose_by_rows(model, torch.bfloat16, cache_dir=tmp_path)
    assert rc.choose_by_rows(model, torch.bfloat16, cache_dir=tmp_path) is None
    chosen = [m for m in model.modules() if isinstance(m, rc.RowChosenLinear)]
    assert len(chosen) == 9 and not any(isinstance(m.quantized, rc.RowChosenLinear) for m in chosen)


def test_the_prompt_row_checks_are_remembered_per_shape_and_remeasure_runs_everything_again(tmp_path, monkeypatch):
    measured, checks = [], []
    monkeypatch.setattr(rc, "_measure", lambda layer: measured.append(1) or (8, 0.0))
    check = rc.is_row_invariant
    monkeypatch.setattr(rc, "is_row_invariant", lambda *args: checks.append(args[1]) or check(*args))
    first = rc.choose_by_rows(tiny_int4(tmp_path).model, torch.bfloat16, cache_dir=tmp_path)
    first_checks = len(checks)
    assert len(measured) == 1 and first_checks >= 4  # one check or more for each of the 4 layer shapes
    second = rc.choose_by_rows(tiny_int4(tmp_path).model, torch.bfloat16, cache_dir=tmp_path)
    assert len(measured) == 1 and len(checks) == first_checks
    assert second.prompt_forms == first.prompt_forms and second.how == "remembered"
    entries = json.loads((tmp_path / "row_choice.json").read_text())
    assert sum(key.startswith(f"prompt rows {rc.CHECK_REVISION}|") for key in entries) == 4
    before = {key: entry["measured_at"] for key, entry in entries.items()}
    again = rc.choose_by_rows(tiny_int4(tmp_path).model, torch.bfloat16, cache_dir=tmp_path, remeasure=True)
    assert again.how == "measured, spread 0%" and len(measured) == 2 and len(checks) == 2 * first_checks
    after = json.loads((tmp_path / "row_choice.json").read_text())
    assert after.keys() == before.keys() and all(after[k]["measured_at"] > before[k] for k in before)


def test_the_engine_remembers_under_its_cache_dir_and_remeasures_when_told(tmp_path, monkeypatch):
    measured = []
    monkeypatch.setattr(rc, "_measure", lambda layer: measured.append(1) or (4, 0.0))
    for remeasure, times in ((False, 1), (False, 1), (True, 2)):
        config = EngineConfig(
            model=str(tiny_llama_dir(tmp_path)),
            load_format="dummy",
            dtype="bfloat16",
            quantization="int4",
            num_kv_blocks=64,
            max_model_len=128,
            cache_dir=str(tmp_path / "cache"),
            remeasure=remeasure,
        )
        EngineCore(config).shutdown()
        assert len(measured) == times
    assert (tmp_path / "cache" / "row_choice.json").is_file()
