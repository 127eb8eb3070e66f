"""Projections packed for oneDNN give what F.linear gives, and the model with
them gives the same logits; where packing does not apply nothing changes."""

import pytest
import torch
import torch.nn.functional as F

from agentgate.engine.layers.cpu_linear import PackedLinear, can_pack
from agentgate.engine.loaders import load_model

# Where oneDNN has native bf16 (this machine's AVX512-BF16 does), packing
# must work; elsewhere it must be declined.
PACKS = torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def test_packing_applies_to_bfloat16_where_onednn_has_it_and_never_to_float32():
    assert can_pack(torch.bfloat16) == PACKS
    assert not can_pack(torch.float32)


@pytest.mark.parametrize("rows", [1, 16, 300])
@pytest.mark.parametrize("with_bias", [False, True])
def test_packed_linear_equals_f_linear(rows, with_bias):
    if not PACKS:
        pytest.skip("this CPU's oneDNN has no native bf16: the engine keeps F.linear (checked above)")
    gen = torch.Generator().manual_seed(rows)
    weight = torch.randn(96, 64, generator=gen).bfloat16()
    bias = torch.randn(96, generator=gen).bfloat16() if with_bias else None
    x = torch.randn(rows, 64, generator=gen).bfloat16()
    torch.testing.assert_close(PackedLinear(weight, bias)(x), F.linear(x, weight, bias), atol=0, rtol=0)


@pytest.mark.parametrize("family,tied", [("llama", True), ("qwen2", False)])
def test_a_packed_model_gives_the_same_logits(tiny_hf, paged_runner, tmp_path, family, tied):
    make = {"qwen2": {"tie_word_embeddings": False}, "llama": {"tie_word_embeddings": True}}[family]
    tiny_hf(tmp_path, family, **make)
    loaded = load_model(tmp_path, dtype="bfloat16")
    model = loaded.model
    prompt = list(range(3, 40))

    def logits():
        runner = paged_runner(model, loaded.config)
        return torch.cat([runner.step([(0, prompt)]), runner.step([(0, [7])]), runner.step([(0, [9])])])

    before = logits()
    packed = model.pack_for_cpu()
    assert packed == PACKS
    kinds = {type(m).__name__ for m in model.modules()}
    assert ("PackedLinear" in kinds) == PACKS and ("Linear" in kinds) == (not PACKS)
    assert (model.lm_head is None) == (tied and not PACKS)
    torch.testing.assert_close(logits(), before, atol=0, rtol=0)


def test_a_float32_model_is_left_alone(tiny_hf, tmp_path):
    tiny_hf(tmp_path, "llama")
    model = load_model(tmp_path, dtype="float32").model
    assert not model.pack_for_cpu()
    assert not any(isinstance(m, PackedLinear) for m in model.modules())
