"""Random PEFT LoRA adapters (random A and B, or B zero as a freshly initialised PEFT adapter) for
tests and load tests: ``adapter_config.json`` and ``adapter_model.safetensors`` with HF's names."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from agentgate.engine.models.config import ModelConfig

HF_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def hf_shapes(dims: dict[str, int]) -> dict[str, tuple[int, int]]:
    """HF module -> (in, out) for a model of ``dims``."""
    h, q, kv, i = dims["hidden"], dims["q"], dims["kv"], dims["inter"]
    return {
        "q_proj": (h, q),
        "k_proj": (h, kv),
        "v_proj": (h, kv),
        "o_proj": (q, h),
        "gate_proj": (h, i),
        "up_proj": (h, i),
        "down_proj": (i, h),
    }


def write_adapter(
    path: Path,
    dims: dict[str, int],
    *,
    rank: int = 8,
    alpha: float = 16.0,
    targets: tuple[str, ...] = HF_TARGETS,
    seed: int = 0,
    std: float = 0.05,
    zero: bool = False,
    rslora: bool = False,
    layers: int | None = None,
) -> Path:
    """A PEFT adapter directory at ``path`` for a model of ``dims`` (`model_dims`; ``layers``: only
    the first so many): A and B random (``std``), or B zero (``zero``: the adapter changes nothing,
    as a freshly initialised PEFT adapter)."""
    gen = torch.Generator().manual_seed(seed)
    shapes = hf_shapes(dims)
    tensors = {}
    for layer in range(dims["layers"] if layers is None else layers):
        for target in targets:
            group = "self_attn" if target in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
            prefix = f"base_model.model.model.layers.{layer}.{group}.{target}"
            fan_in, fan_out = shapes[target]
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(rank, fan_in, generator=gen) * std
            b = torch.zeros(fan_out, rank) if zero else torch.randn(fan_out, rank, generator=gen) * std
            tensors[f"{prefix}.lora_B.weight"] = b
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path / "adapter_model.safetensors"))
    config = {
        "peft_type": "LORA",
        "r": rank,
        "lora_alpha": alpha,
        "target_modules": list(targets),
        "use_rslora": rslora,
        "base_model_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct",
    }
    (path / "adapter_config.json").write_text(json.dumps(config))
    return path


def model_dims(config: ModelConfig) -> dict[str, int]:
    """The sizes `write_adapter` takes, of a model's config."""
    return {
        "hidden": config.hidden_size,
        "q": config.q_size,
        "kv": config.kv_size,
        "inter": config.intermediate_size,
        "layers": config.num_layers,
    }
