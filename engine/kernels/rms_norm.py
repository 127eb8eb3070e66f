"""Triton kernel: RMSNorm of each row, with the residual add before it fused
in. One launch replaces the reference's add and eight norm ops
(`engine.layers.norm.rms_norm`, the same contract and the same roundings).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(
    x_ptr,
    residual_ptr,
    weight_ptr,
    out_ptr,
    eps,
    stride_xt,
    stride_xh,
    stride_rt,
    stride_rh,
    stride_ot,
    stride_oh,
    DIM: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Grid ``(rows, heads)``: one program normalises the ``DIM`` values of
    row ``(t, h)``. With a residual it first forms ``x + residual`` rounded
    to the residual's dtype (as torch's add does) and stores that sum back
    into ``residual``. The mean square is taken in fp32, the normalised
    values are rounded to the output dtype before the weight scales them."""
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < DIM
    x = tl.load(x_ptr + t * stride_xt + h * stride_xh + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        residual_at = residual_ptr + t * stride_rt + h * stride_rh + cols
        r = tl.load(residual_at, mask=mask, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(residual_ptr.dtype.element_ty)
        tl.store(residual_at, x, mask=mask)
    xf = x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(xf * xf, axis=0) / DIM + eps)
    normed = (xf * rstd).to(out_ptr.dtype.element_ty).to(tl.float32)
    weight = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + t * stride_ot + h * stride_oh + cols, (weight * normed).to(out_ptr.dtype.element_ty), mask=mask)


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` ``[T, D]`` or ``[T, H, D]`` (the last dim contiguous; any other
    strides) → ``(normed, residual_out)``, normed a new contiguous tensor.
    Without ``residual``: ``residual_out`` is ``x``. With one (``x``'s
    shape): the sum ``x + residual`` is written into ``residual`` in place
    and returned as ``residual_out``."""
    assert x.stride(-1) == 1 and weight.is_contiguous() and x.shape[-1] == weight.shape[0]
    rows = x if x.dim() == 3 else x[:, None, :]
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    out_rows = out if out.dim() == 3 else out[:, None, :]
    res_rows = rows if residual is None else (residual if residual.dim() == 3 else residual[:, None, :])
    if residual is not None:
        assert residual.shape == x.shape and residual.stride(-1) == 1
    num_t, num_h, dim = rows.shape
    if num_t == 0:
        return out, x if residual is None else residual
    _rms_norm_kernel[(num_t, num_h)](
        rows,
        res_rows,
        weight,
        out_rows,
        eps,
        rows.stride(0),
        rows.stride(1),
        res_rows.stride(0),
        res_rows.stride(1),
        out_rows.stride(0),
        out_rows.stride(1),
        DIM=dim,
        HAS_RESIDUAL=residual is not None,
        BLOCK=triton.next_power_of_2(dim),
    )
    return out, x if residual is None else residual
