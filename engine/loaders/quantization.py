"""Which weights the loaders keep quantized (``--quantization``).

- ``auto``: keep what the file stores in a form a CPU kernel reads
  (GGUF Q4_0/Q4_1/Q4_K/Q8_0, exactly; `engine.loaders.gguf_blocks`);
  everything else, and safetensors weights, dense.
- ``none``: every weight dense (dequantized at load), today's exact path.
- ``int4`` / ``int8``: at most that many bits per weight: the file's own
  blocks where they are that narrow already, every other linear weight
  quantized at load (`quantize_int4`, groups of 32; `quantize_int8`, per row).

Only the linear layers and the LM head are quantized (a tied embedding
table serves the LM head quantized and the token lookup dense). Off the
CPU, or where the kernels fail their check, every mode falls back to dense
with a log line.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from agentgate.engine.config import QUANTIZATIONS
from agentgate.engine.errors import ModelLoadError
from agentgate.engine.layers.quant_linear import kernels_work
from agentgate.engine.layers.quantized import GROUP_SIZE, QuantizedWeight, quantize_int4, quantize_int8
from agentgate.engine.models.config import ModelConfig

if TYPE_CHECKING:
    import gguf

log = logging.getLogger("agentgate.engine")

_BITS = {"int4": 4, "int8": 8}


def resolve(mode: str, device: torch.device) -> str:
    """``mode`` as it applies on ``device``: "none" off the CPU or without
    working kernels."""
    if mode not in QUANTIZATIONS:
        raise ModelLoadError(f"unknown quantization {mode!r}; choose one of {', '.join(QUANTIZATIONS)}")
    if mode == "none":
        return mode
    if device.type != "cpu":
        if mode != "auto":
            log.warning("--quantization %s applies to the CPU only; %s weights stay dense", mode, device.type)
        return "none"
    if not kernels_work():
        return "none"
    return mode


def is_quantizable(hf_name: str, tied: bool) -> bool:
    """Linear weights and the LM head (the embedding table when tied)."""
    return (
        hf_name.endswith("_proj.weight") or hf_name == "lm_head.weight" or (tied and hf_name == "embed_tokens.weight")
    )


def from_gguf(raw: np.ndarray, qtype: gguf.GGMLQuantizationType, rows: int, mode: str) -> QuantizedWeight | None:
    """The file's blocks kept as they are when ``mode`` allows, else None."""
    from agentgate.engine.loaders import gguf_blocks  # imports `gguf`: only where a GGUF file is read

    if mode == "none" or qtype not in gguf_blocks.INT4_TYPES:
        return None
    if mode in _BITS and gguf_blocks.CODE_BITS[qtype] > _BITS[mode]:
        return None
    return gguf_blocks.decode(raw, qtype, rows)


def quantize_dense(weights: dict[str, Tensor], config: ModelConfig, mode: str) -> dict[str, Tensor | QuantizedWeight]:
    """A dense state dict with its quantizable weights quantized for ``mode``."""
    tied = config.tie_word_embeddings
    return {n: from_dense(w, mode) if is_quantizable(n, tied) else w for n, w in weights.items()}


def from_dense(weight: Tensor, mode: str) -> Tensor | QuantizedWeight:
    """A dense weight quantized at load for ``int4``/``int8``; as it is otherwise."""
    if mode == "int4" and weight.shape[-1] % GROUP_SIZE == 0:
        return quantize_int4(weight)
    if mode in ("int4", "int8"):  # int8 rows, or an int4 request on widths not divisible into groups
        return quantize_int8(weight)
    return weight


def describe(model: torch.nn.Module, rows: int = 1) -> tuple[str, int]:
    """What the model's linear layers hold (e.g. ``"int4 Q4_1 x 90, int4
    Q8_0 x 1"``) and the weight bytes one decode step of ``rows`` requests
    reads: every linear layer, the LM head and the norms, not the embedding
    table (a step looks up a few of its rows). A linear choosing its form by
    rows (`engine.kernel_choice.row_choice`) counts the form those rows take."""
    from agentgate.engine.kernel_choice.row_choice import RowChosenLinear
    from agentgate.engine.layers.cpu_linear import PackedLinear
    from agentgate.engine.layers.norm import RMSNorm
    from agentgate.engine.layers.quant_linear import Int4Linear, QuantLinear, tensor_bytes

    # A batch-size choice holds two forms: a decode step reads the one its row count takes.
    unread = {
        id(m.quantized if rows >= m.crossover else m.dense) for m in model.modules() if isinstance(m, RowChosenLinear)
    }
    kinds: Counter[str] = Counter()
    total = 0
    for module in model.modules():
        if id(module) in unread:
            continue
        if isinstance(module, QuantLinear):
            kinds[f"{'int4' if isinstance(module, Int4Linear) else 'int8'} {module.source}"] += 1
            total += module.nbytes
        elif isinstance(module, torch.nn.Linear):
            kinds["dense"] += 1
            total += tensor_bytes(module.weight, module.bias)
        elif isinstance(module, PackedLinear):  # bfloat16, in oneDNN's opaque layout
            kinds["dense"] += 1
            total += 2 * module.out_features * module.in_features + tensor_bytes(module.bias)
        elif isinstance(module, RMSNorm):
            total += tensor_bytes(module.weight)
    if model.lm_head is None:  # tied and dense: the table is the LM head
        kinds["dense"] += 1
        total += tensor_bytes(model.embed_tokens.weight)
    return ", ".join(f"{kind} x {count}" for kind, count in sorted(kinds.items())), total
