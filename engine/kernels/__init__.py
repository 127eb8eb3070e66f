"""Triton kernels of the CUDA path (run by the Triton interpreter on a CPU)."""

from __future__ import annotations

import torch


def dot_precision(dtype: torch.dtype) -> str:
    """``tl.dot``'s ``input_precision`` for operands of ``dtype``: "ieee" for float32, whose dots
    would otherwise round their inputs to TF32 on a GPU (the interpreter computes full fp32, so the
    fp32 exactness tests would compare unlike kernels); "tf32", Triton's default, for the rest, where
    it changes nothing (only float32 operands have a precision to choose)."""
    return "ieee" if dtype == torch.float32 else "tf32"
