"""Dense copies only while they fit (`engine.kernel_choice.dense_budget`): a fake MemAvailable decides how
many of a tiny model's linears keep a bf16 copy; the rest stay int4 only, and the output is still
the model's."""

from __future__ import annotations

import pytest
import torch

from agentgate.engine.config import EngineConfig
from agentgate.engine.core import EngineCore
from agentgate.engine.kernel_choice import dense_budget
from agentgate.engine.kernel_choice import row_choice as rc
from agentgate.engine.layers.cpu_linear import can_pack
from agentgate.engine.layers.quant_linear import Int4Linear, kernels_work
from agentgate.engine.loaders import load_model
from agentgate.engine.sampling_params import SamplingParams
from tests.support.tiny_models import tiny_llama_dir

pytestmark = pytest.mark.skipif(
    not (kernels_work() and can_pack(torch.bfloat16)), reason="needs the int4 kernel and packed bf16 matmuls"
)

# TINY_LLAMA's copies: a layer's qkv 64x128, o 64x64, gate_up 64x192, down 96x64; the tied LM head 64x256.
LAYER_BYTES = 2 * 64 * (128 + 64 + 192) + 2 * 96 * 64
HEAD_BYTES = 2 * 64 * 256


def tiny_int4(tmp_path):
    return load_model(str(tiny_llama_dir(tmp_path)), load_format="dummy", dtype="bfloat16", quantization="int4")


def fake_memory(monkeypatch, available: int | None) -> None:
    monkeypatch.setattr(dense_budget, "mem_available_bytes", lambda: available)


def test_mem_available_is_read_from_meminfo(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24683520 kB\nMemFree:  100 kB\nMemAvailable:   23366500 kB\n")
    assert dense_budget.mem_available_bytes(meminfo) == 23366500 * 1024
    assert dense_budget.mem_available_bytes(tmp_path / "absent") is None


def test_decoder_layers_keep_their_copies_in_order_and_the_lm_head_last(tmp_path):
    model = tiny_int4(tmp_path).model
    targets = [(n, m) for n, m in model.named_modules() if isinstance(m, Int4Linear)]
    assert targets[0][0] == "lm_head" or targets[-1][0] == "lm_head"
    everything = dense_budget.plan_copies(targets, None)
    assert [n for n, _ in everything.keep][-1] == "lm_head" and not everything.leave
    assert "no limit" in everything.describe()
    fits = dense_budget.plan_copies(targets, 2 * (2 * LAYER_BYTES + HEAD_BYTES))
    assert len(fits.keep) == 9 and "all 9 linears within 50% of the" in fits.describe()
    no_head = dense_budget.plan_copies(targets, 2 * (2 * LAYER_BYTES + HEAD_BYTES) - 2)
    assert [n for n, _ in no_head.leave] == ["lm_head"]
    one_layer = dense_budget.plan_copies(targets, 2 * LAYER_BYTES + 2)
    assert all(n.startswith("layers.0.") for n, _ in one_layer.keep) and len(one_layer.keep) == 4
    assert "for 4 of 9 linears (decoder layers 0-0); the other 5" in one_layer.describe()
    assert "int4 only" in one_layer.describe()


def test_copies_past_the_budget_are_not_made_and_those_linears_stay_int4(tmp_path, monkeypatch):
    monkeypatch.setattr(rc, "_measure", lambda layer: (4, 0.0))
    fake_memory(monkeypatch, 2 * LAYER_BYTES + 2)
    model = tiny_int4(tmp_path).model
    choice = rc.choose_by_rows(model, torch.bfloat16, cache_dir=tmp_path / "cache")
    chosen = {n for n, m in model.named_modules() if isinstance(m, rc.RowChosenLinear)}
    assert chosen == {
        f"layers.0.{p}" for p in ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")
    }
    assert choice.dense_bytes == LAYER_BYTES and "for 4 of 9 linears" in choice.describe()
    alone = [m for n, m in model.named_modules() if isinstance(m, Int4Linear) and not n.startswith("layers.0.")]
    assert len(alone) == 5 and all(m._weight is None for m in alone)  # int4 only, nothing kept beyond loading


def test_no_room_for_any_copy_means_quantized_at_every_size_without_measuring(tmp_path, monkeypatch):
    monkeypatch.setattr(rc, "_measure", lambda layer: pytest.fail("measured with no room for a copy"))
    fake_memory(monkeypatch, 1024)
    model = tiny_int4(tmp_path).model
    choice = rc.choose_by_rows(model, torch.bfloat16, cache_dir=tmp_path)
    assert choice.crossover is None and "no room for a dense copy" in choice.describe()
    assert not any(isinstance(m, rc.RowChosenLinear) for m in model.modules())


def greedy_tokens(core: EngineCore) -> dict[str, list[int]]:
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    prompts = {"short": [5, 9, 13], "long": [(7 * i) % 250 for i in range(40)], "third": [1, 2, 3, 4, 5, 6]}
    for request_id, prompt in prompts.items():
        core.add_request(request_id, prompt, params)
    out: dict[str, list[int]] = {request_id: [] for request_id in prompts}
    for _ in range(200):
        if not core.has_work:
            break
        for step in core.step():
            out[step.request_id].extend(step.new_token_ids)
    return out


def test_an_engine_within_a_small_budget_says_so_and_generates_what_the_quantized_one_does(tmp_path, monkeypatch):
    monkeypatch.setattr(rc, "_measure", lambda layer: (2, 0.0))  # the kept copies take every batch of 2+
    fake_memory(monkeypatch, 2 * LAYER_BYTES + 2)
    tokens, lines = {}, {}
    for matmul in ("auto", "quantized"):
        config = EngineConfig(
            model=str(tiny_llama_dir(tmp_path)),
            load_format="dummy",
            dtype="bfloat16",
            quantization="int4",
            batched_matmul=matmul,
            num_kv_blocks=64,
            max_model_len=128,
            cache_dir=str(tmp_path / "cache"),
        )
        core = EngineCore(config)
        try:
            tokens[matmul], lines[matmul] = greedy_tokens(core), core.runner.weights
        finally:
            core.shutdown()
    assert "0 MiB of dense copies for 4 of 9 linears" in lines["auto"] and "int4 only" in lines["auto"]
    assert all(len(t) == 12 for t in tokens["quantized"].values())
    assert tokens["auto"] == tokens["quantized"]
