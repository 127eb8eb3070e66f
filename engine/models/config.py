"""What a Llama-family decoder looks like, parsed from HF `config.json` or GGUF metadata."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agentgate.engine.errors import ModelLoadError
from agentgate.engine.layers.rope import RopeScaling

#: HF `architectures` entries we run, and the family each one belongs to.
HF_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
}
#: GGUF `general.architecture` values we run (Mistral GGUFs say "llama").
GGUF_ARCHITECTURES = ("llama", "qwen2", "qwen3")

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class ModelConfig:
    """The shape and numerics of one Llama-family decoder.

    ``rope_freq_factors`` is llama.cpp's precomputed form of llama3 scaling (a
    GGUF ``rope_freqs`` tensor): each inverse frequency is divided by its
    factor. At most one of ``rope_scaling`` / ``rope_freq_factors`` is set.
    ``attention_bias`` means q/k/v biases; ``attention_out_bias`` an o_proj
    bias (HF Llama/Qwen3 with ``attention_bias: true`` have both).
    """

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    rope_scaling: RopeScaling | None = None
    rope_freq_factors: tuple[float, ...] | None = None
    attention_bias: bool = False
    attention_out_bias: bool = False
    qk_norm: bool = False
    torch_dtype: str | None = None
    bos_token_id: int | None = None
    eos_token_id: int | tuple[int, ...] | None = None

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """``eos_token_id`` as a tuple, empty when unknown."""
        if self.eos_token_id is None:
            return ()
        if isinstance(self.eos_token_id, int):
            return (self.eos_token_id,)
        return self.eos_token_id

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim


def read_hf_config(path: Path) -> ModelConfig:
    """Parse a `config.json` file."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"cannot read model config {path}: {exc}") from exc
    if not isinstance(raw, dict):
        raise ModelLoadError(f"model config {path} is not a JSON object")
    return config_from_hf(raw, source=str(path))


def config_from_hf(raw: Mapping[str, Any], *, source: str) -> ModelConfig:
    """Parse a HF `config.json` dict (transformers 4.x or 5.x layout).

    A Mistral/Qwen sliding window is honoured by capping
    ``max_position_embeddings`` at the window: within it, full attention is
    exactly sliding-window attention.
    """
    names = list(raw.get("architectures") or [])
    family = next((HF_ARCHITECTURES[n] for n in names if n in HF_ARCHITECTURES), None)
    if family is None:
        shown = ", ".join(names) or f"model_type {raw.get('model_type')!r}"
        raise ModelLoadError(
            f"{source}: architecture {shown} is not supported; supported: {', '.join(HF_ARCHITECTURES)}"
        )
    try:
        hidden = int(raw["hidden_size"])
        num_heads = int(raw["num_attention_heads"])
        num_kv_heads = int(raw.get("num_key_value_heads") or num_heads)
        head_dim = int(raw.get("head_dim") or hidden // num_heads)
        rope = _hf_rope(raw, source)
        max_pos = int(raw.get("max_position_embeddings", 2048))
        window = raw.get("sliding_window")
        if window and raw.get("use_sliding_window", family == "mistral"):
            max_pos = min(max_pos, int(window))
        if raw.get("hidden_act", "silu") != "silu" or raw.get("mlp_bias"):
            raise ModelLoadError(
                f"{source}: only SiLU-gated MLPs without bias are supported "
                f"(hidden_act={raw.get('hidden_act')!r}, mlp_bias={raw.get('mlp_bias')!r})"
            )
        if float(raw.get("partial_rotary_factor", 1.0)) != 1.0:
            raise ModelLoadError(f"{source}: partial rotary embeddings are not supported")
        # Qwen2 always has q/k/v biases; Mistral never has any.
        bias = family == "qwen2" or (family != "mistral" and bool(raw.get("attention_bias")))
        eos = raw.get("eos_token_id")
        config = ModelConfig(
            architecture=family,
            vocab_size=int(raw["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(raw["intermediate_size"]),
            num_layers=int(raw["num_hidden_layers"]),
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            rope_theta=rope[0],
            rope_scaling=rope[1],
            max_position_embeddings=max_pos,
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            attention_bias=bias,
            # Qwen2 has q/k/v biases only; Llama and Qwen3 put one on o_proj too.
            attention_out_bias=bias and family != "qwen2",
            qk_norm=family == "qwen3",
            torch_dtype=raw.get("torch_dtype") or raw.get("dtype"),
            bos_token_id=raw.get("bos_token_id"),
            eos_token_id=tuple(eos) if isinstance(eos, list) else eos,
        )
    except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
        raise ModelLoadError(f"{source}: malformed model config ({type(exc).__name__}: {exc})") from exc
    return _validated(config, source)


def _hf_rope(raw: Mapping[str, Any], source: str) -> tuple[float, RopeScaling | None]:
    """(theta, scaling) from transformers 5 ``rope_parameters`` or 4.x
    ``rope_theta`` + ``rope_scaling``."""
    params = dict(raw.get("rope_parameters") or raw.get("rope_scaling") or {})
    theta = float(params.get("rope_theta", raw.get("rope_theta", 10000.0)))
    kind = params.get("rope_type", params.get("type", "default"))
    if kind in (None, "default"):
        return theta, None
    if kind != "llama3":
        raise ModelLoadError(f"{source}: RoPE scaling type {kind!r} is not supported; supported: llama3")
    scaling = RopeScaling(
        factor=float(params["factor"]),
        low_freq_factor=float(params["low_freq_factor"]),
        high_freq_factor=float(params["high_freq_factor"]),
        original_max_position_embeddings=int(params["original_max_position_embeddings"]),
    )
    return theta, scaling


def config_from_gguf(
    metadata: Mapping[str, Any],
    tensor_shapes: Mapping[str, tuple[int, ...]],
    *,
    source: str,
    rope_freq_factors: tuple[float, ...] | None = None,
) -> ModelConfig:
    """Parse GGUF metadata; ``tensor_shapes`` (numpy order) tells what the
    metadata does not: vocabulary size, biases, q/k norms, tied embeddings."""
    arch = metadata.get("general.architecture")
    if arch not in GGUF_ARCHITECTURES:
        raise ModelLoadError(
            f"{source}: GGUF architecture {arch!r} is not supported; supported: {', '.join(GGUF_ARCHITECTURES)}"
        )

    def get(key: str, default: Any = None) -> Any:
        value = metadata.get(f"{arch}.{key}", default)
        if value is None:
            raise ModelLoadError(f"{source}: GGUF metadata lacks {arch}.{key}")
        return value

    try:
        hidden = int(get("embedding_length"))
        num_heads = int(get("attention.head_count"))
        head_dim = int(get("attention.key_length", hidden // num_heads))
        if int(get("rope.dimension_count", head_dim)) != head_dim:
            raise ModelLoadError(f"{source}: partial rotary embeddings are not supported")
        scaling = get("rope.scaling.type", "none")
        if scaling != "none":
            raise ModelLoadError(f"{source}: GGUF RoPE scaling type {scaling!r} is not supported")
        if "token_embd.weight" not in tensor_shapes:
            raise ModelLoadError(f"{source}: GGUF file has no token_embd.weight tensor")
        num_layers = int(get("block_count"))
        layers_present = {name.split(".")[1] for name in tensor_shapes if name.startswith("blk.")}
        if layers_present != {str(i) for i in range(num_layers)}:
            raise ModelLoadError(
                f"{source}: GGUF metadata says {num_layers} blocks, the file has tensors for {len(layers_present)}"
            )
        config = ModelConfig(
            architecture=arch,
            vocab_size=int(tensor_shapes["token_embd.weight"][0]),
            hidden_size=hidden,
            intermediate_size=int(get("feed_forward_length")),
            num_layers=num_layers,
            num_heads=num_heads,
            num_kv_heads=int(get("attention.head_count_kv", num_heads)),
            head_dim=head_dim,
            rms_norm_eps=float(get("attention.layer_norm_rms_epsilon")),
            rope_theta=float(get("rope.freq_base", 10000.0)),
            rope_freq_factors=rope_freq_factors,
            max_position_embeddings=int(get("context_length")),
            tie_word_embeddings="output.weight" not in tensor_shapes,
            attention_bias="blk.0.attn_q.bias" in tensor_shapes,
            attention_out_bias="blk.0.attn_output.bias" in tensor_shapes,
            qk_norm="blk.0.attn_q_norm.weight" in tensor_shapes,
            bos_token_id=metadata.get("tokenizer.ggml.bos_token_id"),
            eos_token_id=metadata.get("tokenizer.ggml.eos_token_id"),
        )
    except (TypeError, ValueError, ArithmeticError) as exc:
        raise ModelLoadError(f"{source}: malformed GGUF metadata ({type(exc).__name__}: {exc})") from exc
    return _validated(config, source)


def _validated(config: ModelConfig, source: str) -> ModelConfig:
    sizes = (
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_layers",
        "num_heads",
        "num_kv_heads",
        "head_dim",
        "max_position_embeddings",
    )
    bad = [f"{name}={getattr(config, name)}" for name in sizes if getattr(config, name) <= 0]
    if bad:
        raise ModelLoadError(f"{source}: model sizes must be positive: {', '.join(bad)}")
    if config.num_heads % config.num_kv_heads:
        raise ModelLoadError(
            f"{source}: {config.num_heads} attention heads are not a multiple of {config.num_kv_heads} KV heads"
        )
    if config.head_dim % 2:
        raise ModelLoadError(f"{source}: head_dim {config.head_dim} is odd; RoPE needs it even")
    factors = config.rope_freq_factors
    if factors is not None and len(factors) != config.head_dim // 2:
        raise ModelLoadError(f"{source}: {len(factors)} RoPE frequency factors for head_dim {config.head_dim}")
    return config


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bfloat16 dot products in hardware (AVX512-BF16 or AMX).

    Not oneDNN's ``_is_mkldnn_bf16_supported``: that is true on any AVX-512 CPU, where oneDNN
    emulates bf16 with float32 arithmetic plus conversions. On a 2-core AVX-512 Xeon without
    AVX512-BF16 a bf16 linear of 100 rows by 576 x 1536 took 3.1 ms against float32's 0.8 ms, and
    the default model's decode step (``loadtests.step_profile``, medians of 3 alternating runs)
    18.8 ms against 16.8 ms at batch 1, 67.4 ms against 60.8 ms at batch 16."""
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


def resolve_dtype(dtype: str, config: ModelConfig, device: torch.device) -> torch.dtype:
    """``auto``: on CUDA the config's dtype, bfloat16 when it names none or
    float32; on a CPU with native bfloat16 dot products (AVX512-BF16, AMX)
    bfloat16, else float32 (`cpu_has_native_bf16`). Small-batch decoding on a
    CPU streams every weight once per step, so halving the bytes nearly halves
    the step (measured 2.5-4x faster linears than float32 on an AVX512-BF16
    EPYC)."""
    if dtype in DTYPES:
        return DTYPES[dtype]
    if dtype != "auto":
        raise ModelLoadError(f"unsupported dtype {dtype!r}; choose auto, {', '.join(DTYPES)}")
    if device.type == "cpu":
        return torch.bfloat16 if cpu_has_native_bf16() else torch.float32
    wanted = DTYPES.get(config.torch_dtype or "", torch.float32)
    return torch.bfloat16 if wanted == torch.float32 else wanted
