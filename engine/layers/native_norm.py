"""RMSNorm with its residual add through the compiled CPU kernel (`engine/kernels/rms_norm_cpu.c`),
one call in place of the torch path's dozen (`engine.layers.norm.rms_norm`): the same roundings in
the same order, except the sum of squares, which runs in a fixed order of its own, so a row's bits
depend on that row alone. Loaded with the attention kernels (`engine.attention.cpu_native`) under
``--cpu-attention auto``; the torch path runs wherever they are not."""

from __future__ import annotations

import ctypes

import torch

DTYPES = (torch.float32, torch.bfloat16)
LANES = 16  # the kernel sums squares in 16 lanes: rows of a multiple of 16 values


class NativeRMSNorm:
    """The loaded kernel: `__call__` is `rms_norm` for the inputs `takes` accepts."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self._kernel = library.add_rms_norm
        self._kernel.restype = ctypes.c_int
        pointer, int_, int64, float_ = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_float
        # add_rms_norm(x, residual, summed_out, normed_out, weight, rows, dim, bf16, eps, threads)
        self._kernel.argtypes = [pointer] * 5 + [int64, int_, int_, float_, int_]

    @staticmethod
    def takes(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None) -> bool:
        """Contiguous CPU rows of a multiple of 16 values in one dtype the kernel reads, the
        weight's dtype theirs."""
        return (
            x.shape[-1] % LANES == 0
            and x.dtype in DTYPES
            and weight.dtype == x.dtype
            and x.device.type == "cpu"
            and x.is_contiguous()
            and (
                residual is None
                or (residual.dtype == x.dtype and residual.shape == x.shape and residual.is_contiguous())
            )
        )

    def __call__(
        self, x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(normed, residual_out)`` as `rms_norm` returns them: the norm of ``x`` (plus ``residual``,
        rounded to the dtype, which is also ``residual_out``; else ``x`` is)."""
        dim = x.shape[-1]
        normed = torch.empty_like(x)
        summed = torch.empty_like(x) if residual is not None else x
        failed = self._kernel(
            x.data_ptr(),
            None if residual is None else residual.data_ptr(),
            summed.data_ptr(),
            normed.data_ptr(),
            weight.data_ptr(),
            x.numel() // dim,
            dim,
            int(x.dtype == torch.bfloat16),
            eps,
            max(torch.get_num_threads(), 1),
        )
        if failed:
            raise RuntimeError(f"RMSNorm kernel failed ({failed}): shape {tuple(x.shape)}")
        return normed, summed
