"""PEFT LoRA adapters written by the tests (random weights, or zero B), and the merged-weights
reference: the base weights plus ``scale * B @ A`` in a dense copy of the model."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

HF_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# SmolLM2-135M: hidden 576, 9 heads of 64, 3 KV heads, MLP 1536, 30 layers.
SMOL = {"hidden": 576, "q": 576, "kv": 192, "inter": 1536, "layers": 30}


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
    *,
    rank: int = 8,
    alpha: float = 16.0,
    targets: tuple[str, ...] = HF_TARGETS,
    seed: int = 0,
    std: float = 0.05,
    zero: bool = False,
    rslora: bool = False,
    dims: dict[str, int] = SMOL,
    layers: int | None = None,
) -> Path:
    """A PEFT adapter directory at ``path``: A and B random (``std``), or B zero (``zero``: the
    adapter changes nothing, as a freshly initialised PEFT adapter)."""
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


@torch.no_grad()
def merge_into(model: torch.nn.Module, path: Path, scale: float) -> None:
    """Add ``scale * B @ A`` of the adapter at ``path`` to the dense (float) weights of ``model``
    (a `CausalLM` with plain ``nn.Linear`` q/k/v and gate/up fused as this project stores them)."""
    from safetensors.torch import load_file

    tensors = load_file(str(path / "adapter_model.safetensors"))
    config = model.config
    q, kv, inter = config.q_size, config.kv_size, config.intermediate_size
    rows = {"q_proj": (0, q), "k_proj": (q, q + kv), "v_proj": (q + kv, q + 2 * kv), "gate_proj": (0, inter)}
    rows["up_proj"] = (inter, 2 * inter)
    fused = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj"}
    fused |= {"gate_proj": "gate_up_proj", "up_proj": "gate_up_proj"}
    for name, a in tensors.items():
        if ".lora_A." not in name:
            continue
        b = tensors[name.replace(".lora_A.", ".lora_B.")]
        layer = int(name.split(".layers.")[1].split(".")[0])
        group, target = name.split(".lora_A.")[0].split(".")[-2:]
        module = model.layers[layer].get_submodule(f"{group}.{fused.get(target, target)}")
        weight = module.base.weight if hasattr(module, "base") else module.weight
        start, end = rows.get(target, (0, weight.shape[0]))
        weight[start:end] += (scale * (b.double() @ a.double())).to(weight.dtype)
