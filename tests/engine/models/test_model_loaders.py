"""`load_model`: dispatch, sharded HF checkpoints, dummy weights, dtypes, bad input."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from agentgate.engine.errors import ModelLoadError
from agentgate.engine.loaders import load_model
from agentgate.engine.model_files.model_path import default_model_path

PROMPT = [(3 * i + 2) % 256 for i in range(17)]
QWEN3_DIR = Path(__file__).parents[3] / "loadtests/configs/qwen3-0.6b"


def test_sharded_checkpoint(tmp_path, tiny_hf, paged_runner):
    hf = tiny_hf(tmp_path, "qwen3", shard_size="40KB", head_dim=16)
    assert len(list(tmp_path.glob("*.safetensors"))) > 2
    ours = load_model(str(tmp_path), dtype="float32")
    with torch.no_grad():
        expect = hf(torch.tensor([PROMPT])).logits[0]
    got = paged_runner(ours.model, ours.config).step([(0, PROMPT)])
    torch.testing.assert_close(got, expect, atol=1e-4, rtol=1e-4)


def test_bfloat16_on_cpu(tmp_path, tiny_hf, paged_runner):
    tiny_hf(tmp_path, "llama")
    full = load_model(tmp_path, dtype="float32")
    half = load_model(tmp_path, dtype="bfloat16")
    assert {p.dtype for p in half.model.parameters()} == {torch.bfloat16}
    assert half.model.rope_cos.dtype == torch.float32
    expect = paged_runner(full.model, full.config).step([(0, PROMPT)])
    got = paged_runner(half.model, half.config).step([(0, PROMPT)])
    assert got.dtype == torch.float32
    assert (got - expect).abs().max() < 0.1 * expect.abs().max()


def test_dummy_weights_from_a_config(tmp_path, tiny_hf, paged_runner):
    tiny_hf(tmp_path, "qwen2")
    for path in (tmp_path, tmp_path / "config.json"):
        dummy = load_model(path, load_format="dummy", dtype="float32")
        params = dict(dummy.model.named_parameters())
        assert params["norm.weight"].eq(1).all()
        assert params["layers.0.self_attn.qkv_proj.bias"].abs().sum() > 0
        std = params["layers.1.mlp.down_proj.weight"].std().item()
        assert 0.015 < std < 0.025
        logits = paged_runner(dummy.model, dummy.config).step([(0, PROMPT)])
        assert logits.shape == (len(PROMPT), 256) and torch.isfinite(logits).all()


def test_dummy_weights_shaped_like_the_default_model():
    dummy = load_model(default_model_path(), load_format="dummy", dtype="float32")
    assert dummy.config.num_layers == 30
    assert dummy.model.embed_tokens.weight.shape == (49152, 576)


@pytest.mark.slow
def test_dummy_qwen3_06b(paged_runner):
    dummy = load_model(QWEN3_DIR, load_format="dummy", dtype="bfloat16")
    assert sum(p.numel() for p in dummy.model.parameters()) == pytest.approx(596e6, rel=0.01)
    logits = paged_runner(dummy.model, dummy.config, block_size=16).step([(0, PROMPT)])
    assert logits.shape == (len(PROMPT), 151936) and torch.isfinite(logits).all()


def test_missing_path(tmp_path):
    with pytest.raises(ModelLoadError, match=f"{tmp_path / 'nope'} does not exist"):
        load_model(tmp_path / "nope")


def test_directory_without_config(tmp_path):
    with pytest.raises(ModelLoadError, match="without a config.json"):
        load_model(tmp_path)


def test_config_without_weights(tmp_path, tiny_hf):
    tiny_hf(tmp_path, "llama")
    for shard in tmp_path.glob("*.safetensors"):
        shard.unlink()
    with pytest.raises(ModelLoadError, match=r"no \*\.safetensors"):
        load_model(tmp_path)
    with pytest.raises(ModelLoadError, match="load_format='dummy'"):
        load_model(tmp_path / "config.json")


def test_unsupported_architecture_directory(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(ModelLoadError, match="GPT2LMHeadModel.*not supported.*Qwen3ForCausalLM"):
        load_model(tmp_path)


def test_corrupt_safetensors(tmp_path, tiny_hf):
    tiny_hf(tmp_path, "llama")
    (tmp_path / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json!!}")
    with pytest.raises(ModelLoadError, match="model.safetensors"):
        load_model(tmp_path)


def test_missing_and_misshapen_weights(tmp_path, tiny_hf):
    hf = tiny_hf(tmp_path, "llama")
    state = {k: v.contiguous() for k, v in hf.state_dict().items() if "layers.1.mlp.up_proj" not in k}
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(ModelLoadError, match=r"missing layers\.1\.mlp\.up_proj\.weight"):
        load_model(tmp_path)
    state["model.layers.1.mlp.up_proj.weight"] = torch.zeros(3, 3)
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(ModelLoadError, match=r"layers\.1\.mlp\.up_proj\.weight has shape \(3, 3\)"):
        load_model(tmp_path)


def test_unknown_load_format_and_mismatched_format(tmp_path, tiny_hf):
    with pytest.raises(ModelLoadError, match="unknown load format 'pickle'"):
        load_model(tmp_path, load_format="pickle")
    tiny_hf(tmp_path, "llama")
    with pytest.raises(ModelLoadError, match="needs a .gguf file"):
        load_model(tmp_path, load_format="gguf")
    with pytest.raises(ModelLoadError, match="needs a checkpoint directory"):
        load_model(default_model_path(), load_format="safetensors")
