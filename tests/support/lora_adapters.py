"""PEFT LoRA adapters written by the tests (`engine.lora.synthetic`), and the merged-weights
reference: the base weights plus ``scale * B @ A`` in a dense copy of the model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from agentgate.engine.lora import synthetic

# SmolLM2-135M: hidden 576, 9 heads of 64, 3 KV heads, MLP 1536, 30 layers.
SMOL = {"hidden": 576, "q": 576, "kv": 192, "inter": 1536, "layers": 30}


def write_adapter(path: Path, *, dims: dict[str, int] = SMOL, **options: Any) -> Path:
    """`synthetic.write_adapter` for the default model unless ``dims`` says otherwise."""
    return synthetic.write_adapter(path, dims, **options)


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
