"""The GGUF loader on tiny files written here the way llama.cpp's converter
writes them, and on malformed files."""

import math

import gguf
import numpy as np
import pytest
import torch

from agentgate.engine.errors import ModelLoadError
from agentgate.engine.loaders import load_model
from agentgate.engine.model_files.gguf_file import read_gguf
from agentgate.engine.model_files.model_path import default_model_path

PROMPT = [(5 * i + 1) % 256 for i in range(21)]

# HF name (``model.`` stripped) -> llama.cpp tensor name; {} is the layer.
GGUF_NAMES = {
    "embed_tokens.weight": "token_embd.weight",
    "norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(head_dim, theta, factor, low, high, old_len):
    """convert_hf_to_gguf.py's rope_freqs for llama3 scaling."""
    freqs = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < old_len / high:
            out.append(1.0)
        elif wavelen > old_len / low:
            out.append(factor)
        else:
            smooth = (old_len / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def write_gguf(path, hf_model, arch, rope_freqs=None):
    cfg = hf_model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    for name, tensor in hf_model.state_dict().items():
        name = name.removeprefix("model.")
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        array = tensor.numpy()
        if arch == "llama" and ".q_proj." in name:
            array = llama_cpp_permute(array, cfg.num_attention_heads)
        elif arch == "llama" and ".k_proj." in name:
            array = llama_cpp_permute(array, cfg.num_key_value_heads)
        if name.startswith("layers."):
            _, layer, leaf = name.split(".", 2)
            gguf_name = f"blk.{layer}.{GGUF_NAMES[leaf]}"
        else:
            gguf_name = GGUF_NAMES[name]
        w.add_tensor(gguf_name, np.ascontiguousarray(array))
    if rope_freqs is not None:
        w.add_tensor("rope_freqs.weight", rope_freqs)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


LLAMA3 = dict(
    rope_theta=10000.0, factor=4.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=16
)


@pytest.mark.parametrize(
    "arch,overrides",
    [
        ("llama", dict(tie_word_embeddings=True)),
        ("llama", dict(tie_word_embeddings=False, num_key_value_heads=1)),
        ("llama3", dict(rope_parameters={"rope_type": "llama3", **LLAMA3})),
        ("qwen2", dict(tie_word_embeddings=False)),
        ("qwen3", dict(head_dim=32, tie_word_embeddings=True)),
    ],
)
def test_gguf_matches_transformers(arch, overrides, tmp_path, tiny_hf, paged_runner):
    family = "llama" if arch == "llama3" else arch
    hf = tiny_hf(tmp_path / "hf", family, **overrides)
    factors = None
    if arch == "llama3":
        factors = llama3_rope_factors(16, LLAMA3["rope_theta"], 4.0, 1.0, 4.0, 16)
    path = tmp_path / "tiny.gguf"
    write_gguf(path, hf, family, rope_freqs=factors)
    ours = load_model(path, dtype="float32")
    assert ours.config.tie_word_embeddings == hf.config.tie_word_embeddings
    assert ours.config.qk_norm == (arch == "qwen3")
    logits = paged_runner(ours.model, ours.config).step([(0, PROMPT)])
    with torch.no_grad():
        expect = hf(torch.tensor([PROMPT])).logits[0]
    torch.testing.assert_close(logits, expect, atol=1e-4, rtol=1e-4)


def test_every_supported_tensor_type_parses(tmp_path):
    """Our header parser finds the same bytes as gguf.GGUFReader for each type."""
    rng = np.random.default_rng(0)
    Q = gguf.GGMLQuantizationType
    w = gguf.GGUFWriter(str(tmp_path / "types.gguf"), "llama")
    w.add_string("general.name", "types")
    w.add_array("test.strings", ["a", "bé", ""])
    for qtype in (Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1):
        data = rng.standard_normal((3, 64)).astype(np.float32)
        if qtype == Q.F32:
            w.add_tensor(qtype.name, data)
        elif qtype == Q.F16:
            w.add_tensor(qtype.name, data.astype(np.float16))
        else:
            w.add_tensor(qtype.name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
    for qtype in (Q.Q4_K, Q.Q5_K, Q.Q6_K):
        _, type_size = gguf.GGML_QUANT_SIZES[qtype]
        raw = rng.integers(0, 256, size=(2, type_size), dtype=np.uint8)
        raw[:, :2] = np.frombuffer(np.float16(0.5).tobytes(), np.uint8)  # finite scales
        w.add_tensor(qtype.name, raw, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    ours = read_gguf(tmp_path / "types.gguf")
    reference = gguf.GGUFReader(tmp_path / "types.gguf")
    assert ours.metadata["test.strings"] == ["a", "bé", ""]
    assert ours.metadata["general.architecture"] == "llama"
    for tensor in reference.tensors:
        expect = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        got = ours.dequantize(tensor.name)
        assert got.dtype == np.float32 and got.shape == expect.shape, tensor.name
        np.testing.assert_array_equal(got, expect)


def test_unsupported_gguf_architecture(tmp_path):
    w = gguf.GGUFWriter(str(tmp_path / "gpt2.gguf"), "gpt2")
    w.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ModelLoadError, match=r"'gpt2' is not supported.*llama, qwen2, qwen3"):
        load_model(tmp_path / "gpt2.gguf")


def test_random_bytes_are_not_a_gguf(tmp_path):
    path = tmp_path / "noise.gguf"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    with pytest.raises(ModelLoadError, match="not a valid GGUF file") as info:
        load_model(path)
    assert str(path) in str(info.value)


def test_empty_file(tmp_path):
    path = tmp_path / "empty.gguf"
    path.touch()
    with pytest.raises(ModelLoadError, match=str(path)):
        load_model(path)


@pytest.mark.parametrize("keep_bytes", [2_000_000, 300_000])
def test_truncated_default_model(tmp_path, keep_bytes):
    """Cut in the tensor data, and cut inside the vocabulary in the header."""
    path = tmp_path / "cut.gguf"
    with open(default_model_path(), "rb") as f:
        path.write_bytes(f.read(keep_bytes))
    with pytest.raises(ModelLoadError, match="runs past the end") as info:
        load_model(path)
    assert str(path) in str(info.value)
