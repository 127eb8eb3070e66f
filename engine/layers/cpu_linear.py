"""Linear layers with weights packed once for oneDNN: bf16 models on a CPU.

``F.linear`` hands oneDNN a plain row-major weight, which it reorders into
its blocked layout on every call. Packing once at load time skips that: on a
2-core AVX512-BF16 CPU, the default model's projections ran 1.3-2.5x faster
for 1-64 rows (1.1x at 256) with bit-identical results. The packing ops are
the ones PyTorch's own CPU compiler uses (``torch.ops.mkldnn``); where they
are missing or misbehave, `can_pack` says so and the model keeps F.linear
(see ``CausalLM.pack_for_cpu``).
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import Tensor, nn

log = logging.getLogger("agentgate.engine")


class PackedLinear(nn.Module):
    """``x @ weight.T + bias`` for 2-D ``x``, through a weight packed for oneDNN."""

    def __init__(self, weight: Tensor, bias: Tensor | None) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.packed_weight = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)
        self.bias = None if bias is None else bias.detach()

    def forward(self, x: Tensor) -> Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def can_pack(dtype: torch.dtype) -> bool:
    """Whether packed linears work here for ``dtype``: bfloat16 on a CPU whose
    oneDNN has native bf16, checked by running one against ``F.linear``."""
    if dtype != torch.bfloat16 or not torch.backends.mkldnn.is_available():
        return False
    try:
        if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
            return False
        x = torch.randn(3, 8).to(dtype)
        weight, bias = torch.randn(5, 8).to(dtype), torch.randn(5).to(dtype)
        return torch.equal(PackedLinear(weight, bias)(x), F.linear(x, weight, bias))
    except (RuntimeError, AttributeError) as exc:  # an op missing or refusing in this build
        log.info("packed CPU linears unavailable (%s); using F.linear", exc)
        return False


def pack_linears(model: nn.Module) -> None:
    """Replace every ``nn.Linear`` inside ``model`` with a `PackedLinear`
    (dropping the plain weights); the caller checks `can_pack` first."""
    linears = [(name, module) for name, module in model.named_modules() if isinstance(module, nn.Linear)]
    for name, module in linears:
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, PackedLinear(module.weight, module.bias))
