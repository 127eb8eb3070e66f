"""RMSNorm, with the residual add before it fused in: the plain-torch
reference (the CPU path) and the module that runs the Triton kernel
(`engine.kernels.rms_norm`) where the attention backend is Triton's."""

from __future__ import annotations

import torch
from torch import Tensor, nn


def rms_norm(x: Tensor, weight: Tensor, eps: float, residual: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """HF's RMSNorm of the last dim (normalise in float32, round to the
    input dtype, scale by ``weight``) → ``(normed, residual_out)``. Without
    ``residual``, ``residual_out`` is ``x``; with one, the norm is taken of
    ``x + residual`` (rounded to the input dtype), which is also returned as
    ``residual_out``, the next layer's residual stream."""
    if residual is not None:
        x = x + residual
    xf = x.float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * normed.to(x.dtype), x


class RMSNorm(nn.Module):
    """``norm(x)`` → normed; ``norm(x, residual)`` → (normed of ``x +
    residual``, that sum). With ``kernel`` (the Triton backend), one fused
    launch, which may write the sum into ``residual``'s memory."""

    def __init__(self, dim: int, eps: float, kernel: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps
        self._impl = rms_norm
        if kernel:
            from agentgate.engine.kernels.rms_norm import rms_norm as triton_rms_norm

            self._impl = triton_rms_norm

    def forward(self, x: Tensor, residual: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor]:
        normed, summed = self._impl(x, self.weight, self.eps, residual)
        return normed if residual is None else (normed, summed)
