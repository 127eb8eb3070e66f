"""GGUF checkpoints: read the header, map the tensors to HF names, keep the
quantized ones the kernels read as they are (`engine.loaders.quantization`)
and dequantize the rest.

The file itself is read by `engine.model_files.gguf_file`.

llama.cpp's converter permutes the rows of Q and K for llama-arch models so
that its interleaved ("normal") RoPE matches HF's rotate-half RoPE; we undo
that, so every checkpoint reaches the model in HF layout.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from agentgate.engine.attention.select import get_backend
from agentgate.engine.errors import ModelLoadError
from agentgate.engine.layers.quantized import QuantizedWeight, permute_rows
from agentgate.engine.loaders import quantization as quant
from agentgate.engine.model_files.gguf_file import GGUFFile, read_gguf
from agentgate.engine.models.config import ModelConfig, config_from_gguf, resolve_dtype
from agentgate.engine.models.llama import CausalLM, build_model, fuse_hf_weights

# GGUF tensor names -> HF names (``model.`` prefix stripped).
_GLOBAL_NAMES = {
    "token_embd.weight": "embed_tokens.weight",
    "output_norm.weight": "norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_NAMES = {  # after "blk.N." / "layers.N."
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.bias": "self_attn.o_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_BLOCK = re.compile(r"blk\.(\d+)\.(.+)")
_ROPE_FREQS = "rope_freqs.weight"


def read_gguf_config(path: Path) -> ModelConfig:
    """The ModelConfig of a GGUF file, without dequantizing its weights."""
    return _config(read_gguf(path))


def read_gguf_checkpoint(
    path: Path, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"
) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """The config and the dequantized weights of a GGUF file, in HF names
    (``model.`` prefix stripped) and HF layout, in ``dtype`` on ``device``."""
    file = read_gguf(path)
    return (config := _config(file)), _weights(file, config, dtype, device, "none")


def load_gguf(
    path: Path, *, dtype: str, device: torch.device, quantization: str = "none"
) -> tuple[ModelConfig, CausalLM]:
    """A GGUF file as a model in ``dtype`` (see `resolve_dtype`) on ``device``,
    its linear weights quantized as ``quantization`` (already resolved for
    the device, see `engine.loaders.quantization`) says."""
    file = read_gguf(path)
    config = _config(file)
    torch_dtype = resolve_dtype(dtype, config, device)
    weights = _weights(file, config, torch_dtype, device, quantization)
    state = fuse_hf_weights(config, weights, source=str(path))
    return config, build_model(config, get_backend(device), state, device, source=str(path))


def _config(file: GGUFFile) -> ModelConfig:
    factors = None
    if _ROPE_FREQS in file.tensors:
        factors = tuple(file.dequantize(_ROPE_FREQS).reshape(-1).tolist())
    shapes = {name: t.shape for name, t in file.tensors.items()}
    return config_from_gguf(file.metadata, shapes, source=str(file.path), rope_freq_factors=factors)


def _weights(
    file: GGUFFile, config: ModelConfig, dtype: torch.dtype, device: torch.device | str, mode: str
) -> dict[str, torch.Tensor | QuantizedWeight]:
    from agentgate.engine.loaders import gguf_blocks  # imports `gguf`: only where a GGUF file is read

    names = [n for n in file.tensors if n != _ROPE_FREQS]
    hf_names = {n: _hf_name(n, file.path) for n in names}

    def load(name: str) -> tuple[str, torch.Tensor | QuantizedWeight]:
        hf_name = hf_names[name]
        info = file.tensors[name]
        quantizable = quant.is_quantizable(hf_name, config.tie_word_embeddings)
        weight = quant.from_gguf(file.raw(name), info.type, info.shape[0], mode) if quantizable else None
        if weight is None:
            weight = gguf_blocks.dense(file.raw(name), info.type, info.shape)
            if weight is None:
                weight = torch.from_numpy(file.dequantize(name))
            if quantizable:
                weight = quant.from_dense(weight, mode)
        if config.architecture == "llama" and ".q_proj." in hf_name:
            weight = _unpermute(weight, config.num_heads, config.head_dim, file.path)
        elif config.architecture == "llama" and ".k_proj." in hf_name:
            weight = _unpermute(weight, config.num_kv_heads, config.head_dim, file.path)
        if isinstance(weight, torch.Tensor):
            weight = weight.to(device=device, dtype=dtype)
        return hf_name, weight

    return dict(load(name) for name in names)


def _hf_name(name: str, path: Path) -> str:
    match = _BLOCK.fullmatch(name)
    hf = _LAYER_NAMES.get(match.group(2)) if match else _GLOBAL_NAMES.get(name)
    if hf is None:
        raise ModelLoadError(f"{path}: unexpected GGUF tensor {name!r}")
    return f"layers.{match.group(1)}.{hf}" if match else hf


def _unpermute(
    weight: torch.Tensor | QuantizedWeight, num_heads: int, head_dim: int, path: Path
) -> torch.Tensor | QuantizedWeight:
    """Undo llama.cpp's Q/K row permutation: within each head, the converter
    interleaved the two rotary halves (rows ``i`` and ``i + head_dim/2`` became
    rows ``2i`` and ``2i + 1``)."""
    rows = weight.shape[0]
    if rows != num_heads * head_dim:
        raise ModelLoadError(f"{path}: a Q/K projection has {rows} rows, not {num_heads} heads × {head_dim}")
    order = torch.arange(rows).reshape(num_heads, head_dim // 2, 2).transpose(1, 2).reshape(-1)
    return permute_rows(weight, order)
