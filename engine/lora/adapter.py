"""A LoRA adapter read from a PEFT directory and mapped onto this project's layers.

A PEFT directory holds ``adapter_config.json`` (``r``, ``lora_alpha``, ``target_modules``,
``use_rslora``) and ``adapter_model.safetensors`` (``…layers.N.self_attn.q_proj.lora_A.weight``
[r, in] and ``…lora_B.weight`` [out, r]). This model fuses q/k/v into ``qkv_proj`` and gate/up into
``gate_up_proj`` (``engine.models.llama``), so the parts of a fused layer become one low-rank pair:
their A matrices stacked ([parts * r, in]) and their B matrices block-diagonal ([out, parts * r]),
a part the adapter does not target left zero. The scale (``lora_alpha / r``, or ``lora_alpha /
sqrt(r)`` with rsLoRA) is folded into B. Anything that does not fit (not a PEFT directory, a rank
above ``max_rank``, a module this model does not have, shapes of another base model) is a
`LoraError` naming the adapter and the module.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from agentgate.engine.errors import LoraError
from agentgate.engine.models.config import ModelConfig

CONFIG_FILE, WEIGHTS_FILE = "adapter_config.json", "adapter_model.safetensors"
# HF module name -> (this model's module, the part's index in it).
_TARGETS = {
    "q_proj": ("self_attn.qkv_proj", 0),
    "k_proj": ("self_attn.qkv_proj", 1),
    "v_proj": ("self_attn.qkv_proj", 2),
    "o_proj": ("self_attn.o_proj", 0),
    "gate_proj": ("mlp.gate_up_proj", 0),
    "up_proj": ("mlp.gate_up_proj", 1),
    "down_proj": ("mlp.down_proj", 0),
}
_WEIGHT = re.compile(r"layers\.(\d+)\.(?:self_attn|mlp)\.(\w+)\.lora_([AB])(?:\.default)?\.weight$")
_load_ids = itertools.count(1)


def module_shapes(config: ModelConfig) -> dict[str, tuple[int, list[int]]]:
    """This model's LoRA-capable modules (without the layer prefix): their input size and the
    output size of each part (q, k, v; gate, up; one part for the others)."""
    hidden, inter = config.hidden_size, config.intermediate_size
    return {
        "self_attn.qkv_proj": (hidden, [config.q_size, config.kv_size, config.kv_size]),
        "self_attn.o_proj": (config.q_size, [hidden]),
        "mlp.gate_up_proj": (hidden, [inter, inter]),
        "mlp.down_proj": (inter, [hidden]),
    }


@dataclass(eq=False)
class LoraAdapter:
    """One loaded adapter. ``weights``: ``layers.N.<module>`` -> (A [k, in], B [out, k]) with the
    scale folded into B; ``uid``: unique per load (the prefix-cache salt: a name reloaded with other
    weights shares no KV with its earlier load)."""

    name: str
    path: str
    rank: int
    scale: float
    weights: dict[str, tuple[torch.Tensor, torch.Tensor]]
    uid: str = field(default="")

    @property
    def nbytes(self) -> int:
        return sum(a.numel() * a.element_size() + b.numel() * b.element_size() for a, b in self.weights.values())


def read_adapter_config(name: str, path: Path) -> dict:
    if not path.is_dir():
        raise LoraError(f"LoRA adapter {name!r}: {path} is not a directory (a PEFT adapter directory)")
    for file in (CONFIG_FILE, WEIGHTS_FILE):
        if not (path / file).is_file():
            raise LoraError(f"LoRA adapter {name!r}: {path} is not a PEFT adapter directory: no {file}")
    try:
        config = json.loads((path / CONFIG_FILE).read_text())
        int(config["r"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LoraError(f"LoRA adapter {name!r}: cannot read {path / CONFIG_FILE}: {exc!r}") from None
    return config


def load_adapter(
    name: str, path: str | Path, model: ModelConfig, *, max_rank: int, dtype: torch.dtype, device: torch.device
) -> LoraAdapter:
    """The adapter in PEFT directory ``path`` for a model of config ``model`` (see the module
    docstring); LoraError when it does not fit."""
    path = Path(path).expanduser()
    config = read_adapter_config(name, path)
    rank = int(config["r"])
    if not 0 < rank <= max_rank:
        raise LoraError(f"LoRA adapter {name!r}: rank {rank} is above --max-lora-rank {max_rank}")
    if config.get("rank_pattern") or config.get("alpha_pattern"):
        raise LoraError(f"LoRA adapter {name!r}: per-module ranks or alphas (rank_pattern) are not supported")
    alpha = float(config.get("lora_alpha", rank))
    scale = alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank
    raw = _read_weights(name, path)
    shapes = module_shapes(model)
    # layers.N.<module> -> {part index: (A, B)}
    parts: dict[str, dict[int, dict[str, torch.Tensor]]] = {}
    for key, tensor in raw.items():
        match = _WEIGHT.search(key)
        if match is None:
            raise LoraError(f"LoRA adapter {name!r}: weight {key} targets a module this server does not adapt")
        layer, hf_module, which = int(match[1]), match[2], match[3]
        if hf_module not in _TARGETS:
            raise LoraError(f"LoRA adapter {name!r}: module {hf_module} ({key}) is not one of {sorted(_TARGETS)}")
        if layer >= model.num_layers:
            raise LoraError(
                f"LoRA adapter {name!r}: {key} is for layer {layer}, the base model has {model.num_layers} layers"
            )
        module, part = _TARGETS[hf_module]
        parts.setdefault(f"layers.{layer}.{module}", {}).setdefault(part, {})[which] = tensor
    weights = {}
    for key, by_part in sorted(parts.items()):
        module = key.split(".", 2)[2]
        in_features, outs = shapes[module]
        a_rows, b_blocks = [], []
        for part, out in enumerate(outs):
            pair = by_part.get(part)
            if pair is None:
                continue
            hf = _hf_name(module, part)
            if set(pair) != {"A", "B"}:
                raise LoraError(f"LoRA adapter {name!r}: {key.rsplit('.', 2)[0]}.{hf} lacks lora_A or lora_B")
            a, b = pair["A"], pair["B"]
            if tuple(a.shape) != (rank, in_features) or tuple(b.shape) != (out, rank):
                raise LoraError(
                    f"LoRA adapter {name!r}: {key.rsplit('.', 1)[0]}.{hf} has lora_A {tuple(a.shape)} and lora_B "
                    f"{tuple(b.shape)}, the base model's {hf} needs ({rank}, {in_features}) and ({out}, {rank}): "
                    "an adapter of another base model"
                )
            a_rows.append(a)
            b_blocks.append((sum(outs[:part]), b))
        k = rank * len(a_rows)
        big_b = torch.zeros(sum(outs), k, dtype=torch.float32)
        for i, (row, b) in enumerate(b_blocks):
            big_b[row : row + b.shape[0], i * rank : (i + 1) * rank] = b.float() * scale
        big_a = torch.cat([a.float() for a in a_rows])
        weights[key] = (big_a.to(device=device, dtype=dtype), big_b.to(device=device, dtype=dtype))
    return LoraAdapter(name, str(path), rank, scale, weights, uid=f"{name}#{next(_load_ids)}")


def _hf_name(module: str, part: int) -> str:
    return next(hf for hf, target in _TARGETS.items() if target == (module, part))


def _read_weights(name: str, path: Path) -> dict[str, torch.Tensor]:
    try:
        with safe_open(path / WEIGHTS_FILE, framework="pt") as f:
            return {key: f.get_tensor(key) for key in f.keys()}
    except (SafetensorError, OSError, RuntimeError) as exc:
        raise LoraError(f"LoRA adapter {name!r}: cannot read {path / WEIGHTS_FILE}: {exc}") from None
