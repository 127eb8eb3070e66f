"""RMSNorm, with the residual add before it fused in: the plain-torch
reference (the CPU path) and the module that runs the Triton kernel
(`engine.kernels.rms_norm`) where the attention backend is Triton's."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from agentgate.engine.layers.native_norm import NativeRMSNorm


def rms_norm(
    x: Tensor, weight: Tensor, eps: float | Tensor, residual: Tensor | None = None, dim: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """HF's RMSNorm of the last dim (normalise in float32, round to the
    input dtype, scale by ``weight``) → ``(normed, residual_out)``. Without
    ``residual``, ``residual_out`` is ``x``; with one, the norm is taken of
    ``x + residual`` (rounded to the input dtype), which is also returned as
    ``residual_out``, the next layer's residual stream.

    Written for few operator calls (it runs twice a layer on the CPU's
    eager path): copies into preallocated tensors rather than ``.to`` (four
    calls each), in-place arithmetic on the float32 copy, and ``eps`` and
    ``dim`` (the last dim's size, dividing the sum of squares as ``mean``
    does) may be 0-dim float32 tensors: a Python number is wrapped and cast
    on every call. Same roundings as the plain formula."""
    if residual is not None:
        x = x + residual
    xf = torch.empty(x.shape, dtype=torch.float32, device=x.device).copy_(x)
    squares = (xf * xf).sum(-1, keepdim=True)
    rstd = squares.div_(x.shape[-1] if dim is None else dim).add_(eps).rsqrt_()
    normed = torch.empty(x.shape, dtype=x.dtype, device=x.device).copy_(xf.mul_(rstd))
    return (normed.mul_(weight) if weight.dtype == x.dtype else weight * normed), x


class RMSNorm(nn.Module):
    """``norm(x)`` → normed; ``norm(x, residual)`` → (normed of ``x +
    residual``, that sum). With ``kernel`` (the Triton backend), one fused
    launch, which may write the sum into ``residual``'s memory. On the CPU,
    after `use_native`, one call of the compiled kernel for the inputs it takes."""

    def __init__(self, dim: int, eps: float, kernel: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps
        # eps as a float32 scalar tensor for the torch path; built on the CPU explicitly so a model
        # constructed on the meta device still holds its value (moved along by `.to(device)`).
        self.register_buffer("eps_tensor", torch.tensor(eps, dtype=torch.float32, device="cpu"), persistent=False)
        self.register_buffer("dim_tensor", torch.tensor(dim, dtype=torch.float32, device="cpu"), persistent=False)
        self._impl = rms_norm
        self._native: NativeRMSNorm | None = None
        if kernel:
            from agentgate.engine.kernels.rms_norm import rms_norm as triton_rms_norm

            self._impl = triton_rms_norm

    def use_native(self, native: NativeRMSNorm) -> None:
        """The compiled CPU kernel (`engine.layers.native_norm`) from now on, where it takes the inputs."""
        self._native = native

    def forward(self, x: Tensor, residual: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor]:
        if self._native is not None and self._native.takes(x, self.weight, residual):
            normed, summed = self._native(x, self.weight, self.eps, residual)
        elif self._impl is rms_norm:
            normed, summed = rms_norm(x, self.weight, self.eps_tensor, residual, self.dim_tensor)
        else:
            normed, summed = self._impl(x, self.weight, self.eps, residual)
        return normed if residual is None else (normed, summed)
