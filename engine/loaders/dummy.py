"""Random weights of a real model's shapes, for benchmarks without a checkpoint."""

from __future__ import annotations

from pathlib import Path

import torch

from agentgate.engine.attention.select import get_backend
from agentgate.engine.errors import ModelLoadError
from agentgate.engine.loaders import quantization as quant
from agentgate.engine.loaders.gguf import read_gguf_config
from agentgate.engine.models.config import ModelConfig, read_hf_config, resolve_dtype
from agentgate.engine.models.llama import CausalLM, build_model

INIT_STD = 0.02


def load_dummy(
    path: Path, *, dtype: str, device: torch.device, seed: int = 0, quantization: str = "none"
) -> tuple[ModelConfig, CausalLM]:
    """A model shaped by ``path`` (a directory holding `config.json`, a
    `config.json` file, or a `.gguf` file whose weights are ignored) with
    weights drawn from N(0, 0.02²) and norms set to one, its linear weights
    quantized for ``quantization`` "int4"/"int8"."""
    config = read_dummy_config(path)
    torch_dtype = resolve_dtype(dtype, config, device)
    with torch.device("meta"):
        shapes = {name: p.shape for name, p in CausalLM(config, get_backend(device)).named_parameters()}
    generator = torch.Generator(device=device).manual_seed(seed)
    tied = config.tie_word_embeddings
    # Each weight quantized as it is drawn: a 7B-shaped model's dense weights (~13 GiB) are never all held at once.
    state = {}
    for name, shape in shapes.items():
        tensor = torch.empty(shape, dtype=torch_dtype, device=device)
        if name.endswith("norm.weight"):
            tensor.fill_(1.0)
        else:
            tensor.normal_(0.0, INIT_STD, generator=generator)
        state[name] = quant.from_dense(tensor, quantization) if quant.is_quantizable(name, tied) else tensor
    return config, build_model(config, get_backend(device), state, device, source=str(path))


def read_dummy_config(path: Path) -> ModelConfig:
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ModelLoadError(f"dummy loading needs a config.json; {path} does not exist")
    if path.suffix == ".gguf":
        return read_gguf_config(path)
    return read_hf_config(path)
