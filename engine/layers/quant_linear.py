"""Linear layers whose weights stay quantized, through PyTorch's own CPU
weight-only kernels (torch >= 2.6; the GPU machine's 2.11 has both):

- `Int4Linear`: ``aten._weight_int4pack_mm_for_cpu`` over weights packed
  once by ``aten._convert_weight_to_int4pack_for_cpu``; groups of 32, each
  dequantized in the kernel as ``(code - 8) * scale + zero``.
- `Int8Linear`: ``aten._weight_int8pack_mm`` (one scale per output row).

Both kernels are vectorized (AVX2/AVX512) for bfloat16 activations only
(float32 and float16 run a scalar loop, 10-40x slower), and read their
scales in the activations' dtype. So the input is cast to bfloat16 for the
call and the output back to the model's dtype, and each group's scale and
zero are rounded once to bfloat16: the codes stay exactly the file's, a
scale moves by at most 2^-9 of itself (bfloat16 keeps 8 significant bits,
a GGUF fp16 scale 11). `kernel_error` measures what that does to a weight.

Neither op exists on CUDA in this form: the loaders quantize only for the
CPU (`engine.loaders.quantization`).
"""

from __future__ import annotations

import logging

import torch
from torch import Tensor, nn

from agentgate.engine.layers.quantized import GROUP_SIZE, Int4Groups, Int8Channels

log = logging.getLogger("agentgate.engine")

KERNEL_DTYPE = torch.bfloat16


def int4_scale_and_zero(groups: Int4Groups) -> Tensor:
    """[groups, N, 2] (scale, zero) in the kernel's dtype, each rounded once
    from its exact value (computed in float64)."""
    scales = groups.scales.double()
    zeros = groups.offsets.double() + 8 * scales
    return torch.stack([scales, zeros], dim=-1).transpose(0, 1).contiguous().to(KERNEL_DTYPE)


class _KeepsItsWeight:
    """The quantized weight a linear was built from, kept until the loader's last step has made
    what it wants of it (a dense copy for large batches, `engine.kernel_choice.row_choice`)."""

    _weight: Int4Groups | Int8Channels | None

    def dense_weight(self, dtype: torch.dtype) -> Tensor:
        """[out, in] in ``dtype``: the exact dequantized weight, rounded once."""
        if self._weight is None:
            raise RuntimeError("the quantized weight was released")
        return self._weight.dequantize().to(dtype)

    def release_weight(self) -> None:
        self._weight = None


class Int4Linear(_KeepsItsWeight, nn.Module):
    """``x @ w.T + bias`` with ``w`` held as packed 4-bit groups."""

    def __init__(self, groups: Int4Groups, bias: Tensor | None = None) -> None:
        super().__init__()
        self.out_features, self.in_features = groups.shape
        self.repeat = groups.repeat
        self.source = groups.source
        self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(groups.codes.to(torch.int32), 1)
        self.scale_and_zero = int4_scale_and_zero(groups)
        self.bias = None if bias is None else bias.detach()
        self._weight: Int4Groups | None = groups  # until `release_weight` (engine.kernel_choice.row_choice)

    @property
    def nbytes(self) -> int:
        """Bytes a call reads of its weights: codes, scales and zeros, bias."""
        return tensor_bytes(self.packed, self.scale_and_zero, self.bias)

    def forward(self, x: Tensor) -> Tensor:
        if self.repeat == 1 and self.bias is None and _is_kernel_ready(x):  # the model's own case: one call
            return torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.packed, GROUP_SIZE, self.scale_and_zero)
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features).to(KERNEL_DTYPE)
        if self.repeat > 1:  # every group of inputs feeds `repeat` code groups
            rows = x2.shape[0]
            x2 = x2.view(rows, -1, 1, GROUP_SIZE).expand(-1, -1, self.repeat, -1).reshape(rows, -1)
        out = torch.ops.aten._weight_int4pack_mm_for_cpu(x2.contiguous(), self.packed, GROUP_SIZE, self.scale_and_zero)
        out = out.to(x.dtype)
        if self.bias is not None:
            out = out + self.bias
        return out.view(*lead, self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, source={self.source}"


class Int8Linear(_KeepsItsWeight, nn.Module):
    """``x @ w.T + bias`` with ``w`` held as int8 rows with one scale each."""

    def __init__(self, channels: Int8Channels, bias: Tensor | None = None) -> None:
        super().__init__()
        self.out_features, self.in_features = channels.shape
        self.source = channels.source
        self.codes = channels.codes.contiguous()
        self.scales = channels.scales.to(KERNEL_DTYPE)
        self.bias = None if bias is None else bias.detach()
        self._weight: Int8Channels | None = channels  # until `release_weight` (engine.kernel_choice.row_choice)

    @property
    def nbytes(self) -> int:
        return tensor_bytes(self.codes, self.scales, self.bias)

    def forward(self, x: Tensor) -> Tensor:
        if self.bias is None and _is_kernel_ready(x):
            return torch.ops.aten._weight_int8pack_mm(x, self.codes, self.scales)
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features).to(KERNEL_DTYPE).contiguous()
        out = torch.ops.aten._weight_int8pack_mm(x2, self.codes, self.scales).to(x.dtype)
        if self.bias is not None:
            out = out + self.bias
        return out.view(*lead, self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, source={self.source}"


QuantLinear = Int4Linear | Int8Linear


def _is_kernel_ready(x: Tensor) -> bool:
    """Whether ``x`` goes to the kernel as it is: rows of the kernel's dtype, contiguous. A bf16 model's
    activations always are; each reshape, cast and copy skipped is an operator call less per layer."""
    return x.dtype == KERNEL_DTYPE and x.dim() == 2 and x.is_contiguous()


def make_quant_linear(weight: Int4Groups | Int8Channels, bias: Tensor | None) -> QuantLinear:
    return Int4Linear(weight, bias) if isinstance(weight, Int4Groups) else Int8Linear(weight, bias)


def kernels_work() -> bool:
    """Whether both kernels run here and agree with a float32 matmul of the
    weights they stand for (checked once on a small case: an op may be
    missing, refuse this CPU, or misbehave in some build)."""
    global _KERNELS_WORK
    if _KERNELS_WORK is None:
        _KERNELS_WORK = _check_kernels()
    return _KERNELS_WORK


_KERNELS_WORK: bool | None = None


def _check_kernels() -> bool:
    from agentgate.engine.layers.quantized import quantize_int4, quantize_int8

    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(64, 128, generator=generator)
    x = torch.randn(3, 128, generator=generator).to(KERNEL_DTYPE).float()
    try:
        for quantized, linear in (
            (q := quantize_int4(weight), Int4Linear(q)),
            (p := quantize_int8(weight), Int8Linear(p)),
        ):
            expected = x @ quantized.dequantize().T
            if not torch.allclose(linear(x), expected, rtol=2e-2, atol=2e-2 * float(expected.abs().max())):
                log.warning("%s disagrees with its reference here; weights stay dense", type(linear).__name__)
                return False
    except (RuntimeError, AttributeError, NotImplementedError) as exc:  # an op missing or refusing here
        log.info("CPU weight-only kernels unavailable (%s); weights stay dense", exc)
        return False
    return True


def kernel_error(groups: Int4Groups) -> tuple[float, float]:
    """What rounding scales and zeros to the kernel's dtype does to the
    weights: (largest change of one weight in units of its group's scale,
    RMS change relative to the weights' RMS)."""
    sz = int4_scale_and_zero(groups).transpose(0, 1).float()  # [N, groups, 2]
    n, width = groups.codes.shape
    codes = groups.codes.view(n, -1, GROUP_SIZE).float()
    kernel = (codes - 8) * sz[..., :1] + sz[..., 1:]
    exact = codes * groups.scales[..., None] + groups.offsets[..., None]
    diff = (kernel - exact).reshape(n, width)
    largest = (diff.view(n, -1, GROUP_SIZE).abs() / groups.scales.abs()[..., None].clamp_min(1e-30)).max()
    rms = diff.pow(2).mean().sqrt() / exact.pow(2).mean().sqrt().clamp_min(1e-30)
    return float(largest), float(rms)


def tensor_bytes(*tensors: Tensor | None) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)
