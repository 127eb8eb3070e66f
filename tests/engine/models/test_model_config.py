"""ModelConfig from HF config dicts (transformers 4.x and 5.x layouts) and dtype choice."""

from pathlib import Path

import pytest
import torch

from agentgate.engine.errors import ModelLoadError
from agentgate.engine.layers.rope import RopeScaling
from agentgate.engine.models.config import config_from_hf, cpu_has_native_bf16, read_hf_config, resolve_dtype

QWEN3_CONFIG = Path(__file__).parents[3] / "loadtests/configs/qwen3-0.6b/config.json"

LLAMA_31 = {  # transformers 4.x layout: rope_theta + rope_scaling
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "torch_dtype": "bfloat16",
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
}


def test_qwen3_06b_config_for_dummy_loading():
    config = read_hf_config(QWEN3_CONFIG)
    assert config.architecture == "qwen3" and config.qk_norm and config.tie_word_embeddings
    assert (config.hidden_size, config.num_layers, config.intermediate_size) == (1024, 28, 3072)
    assert (config.num_heads, config.num_kv_heads, config.head_dim) == (16, 8, 128)
    assert (config.vocab_size, config.rope_theta, config.rms_norm_eps) == (151936, 1e6, 1e-6)
    assert not config.attention_bias and config.rope_scaling is None
    assert config.torch_dtype == "bfloat16"


def test_transformers_4_layout_with_llama3_scaling():
    config = config_from_hf(LLAMA_31, source="x")
    assert config.rope_theta == 500000.0 and config.head_dim == 128
    assert config.rope_scaling == RopeScaling(8.0, 1.0, 4.0, 8192)
    assert config.eos_token_id == (128001, 128008, 128009)
    assert config.eos_token_ids == (128001, 128008, 128009)


def test_transformers_5_layout():
    raw = {k: v for k, v in LLAMA_31.items() if k not in ("rope_theta", "rope_scaling", "torch_dtype")}
    raw["rope_parameters"] = {"rope_type": "default", "rope_theta": 1e4}
    raw["dtype"] = "float16"
    config = config_from_hf(raw, source="x")
    assert config.rope_theta == 1e4 and config.rope_scaling is None
    assert config.torch_dtype == "float16"


def test_qwen2_always_has_qkv_bias_and_mistral_window_caps_context():
    qwen2 = {**LLAMA_31, "architectures": ["Qwen2ForCausalLM"], "rope_scaling": None}
    config = config_from_hf(qwen2, source="x")
    assert config.attention_bias and not config.attention_out_bias
    mistral = {
        **LLAMA_31,
        "architectures": ["MistralForCausalLM"],
        "rope_scaling": None,
        "sliding_window": 4096,
        "max_position_embeddings": 32768,
    }
    assert config_from_hf(mistral, source="x").max_position_embeddings == 4096


def test_unsupported_architecture_is_named_with_the_supported_ones():
    raw = {**LLAMA_31, "architectures": ["GPT2LMHeadModel"]}
    with pytest.raises(ModelLoadError) as info:
        config_from_hf(raw, source="cfg.json")
    message = str(info.value)
    assert "GPT2LMHeadModel" in message and "cfg.json" in message
    for name in ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"):
        assert name in message


@pytest.mark.parametrize(
    "change,problem",
    [
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "'yarn' is not supported"),
        ({"hidden_act": "gelu"}, "SiLU"),
        ({"num_key_value_heads": 5}, "not a multiple"),
        ({"hidden_size": "big"}, "malformed"),
        ({"vocab_size": 0}, "must be positive"),
    ],
)
def test_bad_configs(change, problem):
    with pytest.raises(ModelLoadError, match=problem):
        config_from_hf({**LLAMA_31, **change}, source="x")


def test_resolve_dtype():
    config = config_from_hf(LLAMA_31, source="x")  # torch_dtype bfloat16
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_dtype("auto", config, cpu) == (torch.bfloat16 if cpu_has_native_bf16() else torch.float32)
    assert resolve_dtype("auto", config, cuda) == torch.bfloat16
    fp16 = config_from_hf({**LLAMA_31, "torch_dtype": "float16"}, source="x")
    assert resolve_dtype("auto", fp16, cuda) == torch.float16
    fp32 = config_from_hf({**LLAMA_31, "torch_dtype": "float32"}, source="x")
    assert resolve_dtype("auto", fp32, cuda) == torch.bfloat16
    assert resolve_dtype("float16", config, cpu) == torch.float16
    with pytest.raises(ModelLoadError, match="unsupported dtype 'fp8'"):
        resolve_dtype("fp8", config, cpu)


def test_native_bf16_means_the_cpu_flags_not_onednns_emulation():
    """bfloat16 by default only where the CPU says it has bf16 dot products: oneDNN's own check is true
    on every AVX-512 CPU, where its bf16 is emulated and slower than float32."""
    flags = set(
        next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")).split()
    )
    assert cpu_has_native_bf16() == bool({"avx512_bf16", "amx_bf16"} & flags)
