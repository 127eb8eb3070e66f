"""Llama-family checkpoints loaded into `engine.models`, behind one entry point: `load_model`.

loaded = load_model()                          # the default model (GGUF)
loaded = load_model("/ckpt/Qwen3-0.6B")        # HF safetensors directory
loaded = load_model("m.gguf", dtype="bfloat16", device="cuda")
loaded = load_model("loadtests/configs/qwen3-0.6b", load_format="dummy")
loaded = load_model(quantization="none")       # the GGUF dequantized (default: "auto")
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from agentgate.engine.errors import ModelLoadError
from agentgate.engine.loaders import quantization as quant
from agentgate.engine.loaders.dummy import load_dummy
from agentgate.engine.loaders.gguf import load_gguf
from agentgate.engine.loaders.hf import load_hf
from agentgate.engine.model_files.model_path import resolve_model_path
from agentgate.engine.models.config import ModelConfig
from agentgate.engine.models.llama import CausalLM

LOAD_FORMATS = ("auto", "gguf", "safetensors", "dummy")

Loader = Callable[..., tuple[ModelConfig, CausalLM]]


@dataclass(frozen=True)
class LoadedModel:
    """A model on its device in its dtype, its config, and where it came from.
    ``quantization``: the mode that applied (see `engine.loaders.quantization`)."""

    model: CausalLM
    config: ModelConfig
    path: Path
    quantization: str = "none"


def load_model(
    model: str | Path | None = None,
    *,
    dtype: str = "auto",
    device: torch.device | str = "cpu",
    load_format: str = "auto",
    quantization: str = "auto",
) -> LoadedModel:
    """Load ``model``: None (the default model), a `.gguf` file, or a HF
    directory with `config.json` + `*.safetensors`.

    ``load_format``: "auto" (by what the path is), "gguf", "safetensors", or
    "dummy" (random weights shaped by a `config.json`, its directory, or a
    `.gguf` file). ``dtype``: "auto" (float32 on CPU; on CUDA the config's
    dtype, bfloat16 when it names none or float32), "float32", "float16",
    "bfloat16". ``quantization``: "auto", "none", "int8", "int4" (see
    `engine.loaders.quantization`; CPU only). Every failure is a
    ModelLoadError naming the path.
    """
    if load_format not in LOAD_FORMATS:
        raise ModelLoadError(f"unknown load format {load_format!r}; choose one of {', '.join(LOAD_FORMATS)}")
    path = resolve_model_path(model)
    loader = _pick_loader(path, load_format)
    device = torch.device(device)
    mode = quant.resolve(quantization, device)
    config, module = loader(path, dtype=dtype, device=device, quantization=mode)
    return LoadedModel(model=module, config=config, path=path, quantization=mode)


def _pick_loader(path: Path, load_format: str) -> Loader:
    if load_format == "dummy":
        return load_dummy
    if path.is_dir():
        if load_format == "gguf":
            raise ModelLoadError(f"load format 'gguf' needs a .gguf file; {path} is a directory")
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"{path} is a directory without a config.json; not a HF checkpoint")
        return load_hf
    if load_format == "safetensors":
        raise ModelLoadError(f"load format 'safetensors' needs a checkpoint directory; {path} is a file")
    if path.suffix == ".json":
        raise ModelLoadError(f"{path} is a config without weights; use load_format='dummy' for random weights")
    return load_gguf


__all__ = ["LOAD_FORMATS", "LoadedModel", "load_model"]
