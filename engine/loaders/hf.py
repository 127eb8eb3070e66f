"""HF checkpoints: a directory with `config.json` and `*.safetensors` shards."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from agentgate.engine.attention.select import get_backend
from agentgate.engine.errors import ModelLoadError
from agentgate.engine.loaders import quantization as quant
from agentgate.engine.models.config import ModelConfig, read_hf_config, resolve_dtype
from agentgate.engine.models.llama import CausalLM, build_model, fuse_hf_weights

_INDEX = "model.safetensors.index.json"
# Buffers some older checkpoints saved alongside the weights.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


def load_hf(
    path: Path, *, dtype: str, device: torch.device, quantization: str = "none"
) -> tuple[ModelConfig, CausalLM]:
    """A HF checkpoint directory as a model in ``dtype`` (see `resolve_dtype`)
    on ``device``, its linear weights quantized at load for ``quantization``
    "int4"/"int8" (see `engine.loaders.quantization`)."""
    config = read_hf_config(path / "config.json")
    torch_dtype = resolve_dtype(dtype, config, device)
    weights = quant.quantize_dense(read_safetensors(path, torch_dtype, device), config, quantization)
    state = fuse_hf_weights(config, weights, source=str(path))
    return config, build_model(config, get_backend(device), state, device, source=str(path))


def read_safetensors(path: Path, dtype: torch.dtype, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Every weight of the checkpoint in ``path``, named as in HF with the
    ``model.`` prefix stripped, in ``dtype`` on ``device``."""
    weights: dict[str, torch.Tensor] = {}
    for file in _shards(path):
        try:
            with safe_open(file, framework="pt") as f:
                for name in f.keys():
                    if name.endswith(_IGNORED_SUFFIXES):
                        continue
                    tensor = f.get_tensor(name).to(device=device, dtype=dtype)
                    weights[name.removeprefix("model.")] = tensor
        except (SafetensorError, OSError, RuntimeError) as exc:
            raise ModelLoadError(f"cannot read safetensors file {file}: {exc}") from exc
    return weights


def _shards(path: Path) -> list[Path]:
    """The shard list of ``model.safetensors.index.json`` when there is one,
    else ``model.safetensors``, else every ``*.safetensors`` file."""
    index = path / _INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ModelLoadError(f"cannot read {index}: {exc}") from exc
        files = [path / name for name in sorted(set(weight_map.values()))]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise ModelLoadError(f"{path}: shards listed in {_INDEX} are missing: {', '.join(missing)}")
        return files
    if (path / "model.safetensors").is_file():
        return [path / "model.safetensors"]
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"{path} has a config.json but no *.safetensors weights")
    return files
